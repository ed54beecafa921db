"""The CLI stays thin: a command module parses options, calls one ``Host`` method, renders, maps errors.

So a command module (``src/servectl/cli/*.py``) imports, at run time, only the front door
(``servectl.host``, ``servectl.api``), the exception tree (``servectl.errors``), the CLI's own modules (its
views render results) and the settings objects a command builds from its options and passes whole
(``servectl.bench.settings``, ``servectl.bench.qualify.settings``); ``cli/app.py`` also the process's
``servectl.signals`` and ``servectl.version``. Types named only for annotations (under ``TYPE_CHECKING``) are
free. A command that reached past the host into the library (``servectl.gateway.container``, a resolver,
a store) would assemble the operation itself; it becomes a ``Host`` method instead (docs/api.md).

The views (``cli/views/``) turn results into text and never act: they import no ``servectl.host`` or
``servectl.api``.

Listed exceptions, each with its reason, are the whole list; the test fails on one that no longer applies.
"""

from __future__ import annotations

import ast
from pathlib import Path

CLI = Path(__file__).resolve().parents[2] / "src" / "servectl" / "cli"

COMMANDS_MAY_IMPORT = (
    "servectl.host",
    "servectl.api",
    "servectl.errors",
    "servectl.cli",
    "servectl.bench.settings",
    "servectl.bench.qualify.settings",
    "servectl.signals",
    "servectl.version",
)
VIEWS_MAY_NOT_IMPORT = ("servectl.host", "servectl.api")
#: module -> why it may import more (keep this short: a new entry needs a reason a reviewer accepts).
EXCEPTIONS: dict[str, str] = {}


def _runtime_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """``(line, module)`` of every ``servectl`` import outside ``if TYPE_CHECKING:`` blocks."""
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            typing_only.update(id(n) for child in node.body for n in ast.walk(child))
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return [(line, m) for line, m in found if m == "servectl" or m.startswith("servectl.")]


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def bypasses(cli: Path, exceptions: dict[str, str]) -> list[str]:
    """One line per import that goes around the host (commands) or acts (views), and per stale exception."""
    problems = []
    excused_and_needed: set[str] = set()
    for path in sorted(cli.rglob("*.py")):
        relative = path.relative_to(cli).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_view = relative.startswith("views/")
        for line, module in _runtime_imports(tree):
            if is_view:
                if _within(module, VIEWS_MAY_NOT_IMPORT):
                    problems.append(f"cli/{relative}:{line}: a view imports {module}; views render, commands act")
                continue
            if _within(module, COMMANDS_MAY_IMPORT):
                continue
            if relative in exceptions:
                excused_and_needed.add(relative)
                continue
            problems.append(
                f"cli/{relative}:{line}: imports {module}; call one Host method instead (add it in host/, then "
                "run python scripts/gen_api.py)"
            )
    problems.extend(
        f"cli/{name}: listed in EXCEPTIONS but imports nothing beyond the host; drop it"
        for name in sorted(set(exceptions) - excused_and_needed)
    )
    return problems


def test_cli_commands_reach_the_library_only_through_the_host() -> None:
    assert len(list(CLI.glob("*.py"))) > 10  # the scan found the commands
    assert bypasses(CLI, EXCEPTIONS) == []


def test_the_check_fails_on_a_command_that_bypasses_the_host(tmp_path: Path) -> None:
    (tmp_path / "views").mkdir()
    files = {
        "thin.py": "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from servectl.gateway.keys import KeyEntry\n"
        "def f():\n    from servectl.host import from_env\n    from servectl.cli.views.x import y\n",
        "fat.py": "def f():\n    from servectl.gateway.container import gateway_up\n",
        "whole.py": "import servectl.plan.resolve\n",
        "excused.py": "from servectl.plan.resolve import resolve\n",
        "stale.py": "from servectl.errors import UsageError\n",
        "views/acts.py": "from servectl.host import from_env\n",
        "views/reads.py": "from servectl.service.watch import phases_with_lines\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert bypasses(tmp_path, {"excused.py": "a reason", "stale.py": "a reason"}) == [
        "cli/fat.py:2: imports servectl.gateway.container; call one Host method instead (add it in host/, then "
        "run python scripts/gen_api.py)",
        "cli/views/acts.py:1: a view imports servectl.host; views render, commands act",
        "cli/whole.py:1: imports servectl.plan.resolve; call one Host method instead (add it in host/, then "
        "run python scripts/gen_api.py)",
        "cli/stale.py: listed in EXCEPTIONS but imports nothing beyond the host; drop it",
    ]
