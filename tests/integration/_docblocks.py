"""The code blocks of a Markdown document that the docs test runs, and the commands in them.

A fenced block whose language is ``bash``, ``sh``, ``console`` or ``python`` is a *runnable kind*. In the README
every such block runs unless the last non-blank line before its fence is a skip mark with its reason::

    <!-- readme-test: skip - needs two GPUs -->

In other documents (docs/cli.md) only blocks marked ``<!-- readme-test: run -->`` run. In a ``console`` block the
lines that start with ``$ `` are the commands (the rest is output); in a ``bash`` or ``sh`` block every line that is
not blank or a comment is one (a trailing backslash continues it). A ``python`` block is one script.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

RUNNABLE_KINDS = ("bash", "sh", "console", "python")
_FENCE = re.compile(r"^(```+)\s*([A-Za-z0-9_+-]*)\s*$")
_MARK = re.compile(r"^<!--\s*readme-test:\s*(run|skip)\b\s*[-:]?\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Command:
    line: int  # 1-based line in the document
    text: str


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # the opening fence's line, 1-based
    kind: str
    body: str
    mark: str | None  # "run", "skip" or None (unmarked)
    reason: str = ""
    commands: list[Command] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"


def read_blocks(path: Path) -> list[Block]:
    """Every fenced block of a runnable kind in ``path``, with its mark and commands."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        fence, kind = opened.group(1), opened.group(2).lower()
        end = i + 1
        while end < len(lines) and lines[end].strip() != fence:
            end += 1
        if kind in RUNNABLE_KINDS:
            before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            mark = _MARK.match(before.strip())
            body = lines[i + 1 : end]
            found.append(
                Block(
                    path=path,
                    line=i + 1,
                    kind=kind,
                    body="\n".join(body) + "\n",
                    mark=mark.group(1) if mark else None,
                    reason=mark.group(2) if mark else "",
                    commands=_commands(kind, body, first_line=i + 2),
                )
            )
        i = end + 1
    return found


def _commands(kind: str, body: list[str], *, first_line: int) -> list[Command]:
    if kind == "python":
        return [Command(first_line, "\n".join(body) + "\n")]
    out: list[Command] = []
    pending: list[str] = []
    start = first_line
    for n, raw in enumerate(body, start=first_line):
        line = raw.rstrip()
        if kind == "console":
            if not pending:
                if not line.startswith("$ "):
                    continue  # output shown in the document
                line = line[2:]
        elif not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if not pending:
            start = n
        if line.endswith("\\"):
            pending.append(line[:-1])
            continue
        out.append(Command(start, " ".join([*pending, line]).strip()))
        pending = []
    return out
