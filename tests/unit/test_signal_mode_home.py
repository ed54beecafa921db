"""A transaction's signal mode has one home (issue 40): the signal guard's ``mode`` (``raise``, ``abandon``,
``defer``: :class:`servectl.signals.SignalGuard`) is set only by the transaction object's named transitions,
:meth:`TxContext.enter_restore` and :meth:`TxContext.settle` (``service/transaction/context.py``), and by the
guard itself (its first signal's ``then``, in ``signals.py``). It was assigned in nine places over ``swap.py``,
``swap_outcome.py``, ``runtime.py`` and ``campaign/run.py``, so which mode a step ran in was read off the
order of statements in four modules.

The guard is an AST walk over ``src/servectl``: any assignment to an attribute named ``mode`` outside the two
homes fails. ``standin/`` and ``testing/`` are outside it (the stand-in's ``tarfile`` members have a ``mode``
too, their file permissions).
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "servectl"
OUTSIDE = ("standin/", "testing/")
HOMES = {
    "service/transaction/context.py": "the transaction's named transitions: enter_restore (abandon), settle (defer)",
    "signals.py": "the guard's own switch after its first signal (SignalGuard.then)",
}


def mode_assignments(tree: ast.AST) -> Iterator[int]:
    """The lines that assign an attribute named ``mode`` (``x.mode = ...``, ``x.mode: T = ...``, ``x.mode += ...``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for part in ast.walk(target):  # tuples: a, x.mode = ...
                if isinstance(part, ast.Attribute) and part.attr == "mode":
                    yield node.lineno


def offenders(files: dict[str, str]) -> list[str]:
    """``module:line`` for each ``.mode`` assignment outside :data:`HOMES`."""
    found = []
    for rel, source in sorted(files.items()):
        if rel in HOMES or rel.startswith(OUTSIDE):
            continue
        found += [f"{rel}:{line}" for line in mode_assignments(ast.parse(source))]
    return found


def sources() -> dict[str, str]:
    return {p.relative_to(SRC).as_posix(): p.read_text(encoding="utf-8") for p in SRC.rglob("*.py")}


def test_the_signal_mode_is_set_only_by_the_transactions_named_transitions() -> None:
    found = offenders(sources())
    assert not found, (
        "a signal guard's mode is set outside its home; call the transaction's tx.enter_restore() or tx.settle() "
        f"(service/transaction/context.py) instead: {found}"
    )


def test_each_home_still_sets_the_mode() -> None:
    """The homes are real: the list may only shrink, never keep an entry that no longer applies."""
    files = sources()
    for rel in HOMES:
        assert list(mode_assignments(ast.parse(files[rel]))), f"{rel} no longer sets a mode: drop it from HOMES"


def test_the_guard_fails_on_a_mode_set_in_a_step() -> None:
    """Shown failing: what swap.py, swap_outcome.py, runtime.py and campaign/run.py did before issue 40."""
    step = textwrap.dedent(
        """
        def transact(tx, guard):
            tx.signals.mode = "defer"
            guard.mode = "abandon"
            a, guard.mode = 1, "raise"
            guard.mode: str = "defer"
            info.modes = 1  # another attribute: fine
        """
    )
    assert offenders({"service/swap.py": step}) == [f"service/swap.py:{n}" for n in (3, 4, 5, 6)]
    assert offenders({"service/transaction/context.py": step, "standin/image.py": step}) == []
