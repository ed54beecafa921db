"""A transient progress bar on a terminal's stderr, for commands that report ``done``/``total`` events."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVar


class CountedEvent(Protocol):
    """What a progress event must say: how far it got (``total`` None while it is unknown)."""

    @property
    def done(self) -> int: ...

    @property
    def total(self) -> int | None: ...


E = TypeVar("E", bound=CountedEvent)


@contextmanager
def progress_bar(describe: Callable[[E], str]) -> Iterator[Callable[[E], None]]:
    """Yield the callback that moves the bar (described by ``describe``); nothing shows off a terminal."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    err_console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True, disable=not err_console.is_terminal) as bar:
        task = bar.add_task("discovering model", total=None)

        def on_progress(event: E) -> None:
            bar.update(task, completed=event.done, total=event.total, description=describe(event))

        yield on_progress
