"""Write the CLI's command table and docs/cli.md from the command modules, so neither can drift (a test checks).

``COMMANDS`` in src/servectl/cli/app.py (which module defines each command, so that a run imports only that
one) is written from what each module of ``servectl.cli`` with a ``register(app)`` registers; docs/cli.md from
the CLI's own --help.

python scripts/gen_cli_docs.py          # rewrite them
python scripts/gen_cli_docs.py --check  # exit 1 when one is stale
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_api import replace_block  # a script beside this one

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "cli.md"
CLI = REPO / "src" / "servectl" / "cli"
APP = CLI / "app.py"


def command_modules(folder: Path = CLI) -> list[str]:
    """The modules of ``servectl.cli`` that define a top-level ``register(app)``, in name order."""
    return [
        path.stem
        for path in sorted(folder.glob("*.py"))
        if any(
            isinstance(node, ast.FunctionDef) and node.name == "register"
            for node in ast.parse(path.read_text(encoding="utf-8")).body
        )
    ]


def command_table(modules: list[str], load: Callable[[str], Any] | None = None) -> dict[str, str]:
    """Each command and group the ``modules`` register -> its module: the commands, then the groups, as
    ``servectl --help`` lists them (typer's order), each in module order."""
    sys.path.insert(0, str(REPO / "src"))
    import typer
    from typer.main import get_command_name

    load = load or (lambda name: importlib.import_module(f"servectl.cli.{name}"))
    commands: dict[str, str] = {}
    groups: dict[str, str] = {}
    for module in modules:
        app = typer.Typer()
        load(module).register(app)
        for command in app.registered_commands:
            commands[command.name or get_command_name(command.callback.__name__)] = module
        for group in app.registered_groups:
            groups[str(group.name)] = module
    return {**commands, **groups}


def app_text() -> str:
    """src/servectl/cli/app.py with ``COMMANDS`` as the modules register them."""
    table = command_table(command_modules())
    body = "\n".join(f'    "{name}": "{module}",' for name, module in table.items())
    text = APP.read_text(encoding="utf-8")
    return replace_block(text, "commands", body, where="src/servectl/cli/app.py", script="gen_cli_docs.py")


def help_text(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb", "PYTHONPATH": str(REPO / "src")}
    env.pop("FORCE_COLOR", None)
    out = subprocess.run(
        [sys.executable, "-m", "servectl", *args, "--help"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    out = out.replace("python -m servectl", "servectl")
    return "\n".join(line.rstrip() for line in out.splitlines()).strip("\n")


def commands() -> list[list[str]]:
    sys.path.insert(0, str(REPO / "src"))
    import typer.main

    from servectl.cli import app as cli

    group = typer.main.get_command(cli.app)
    found: list[list[str]] = []

    def walk(command: Any, path: list[str]) -> None:
        if not hasattr(command, "list_commands"):
            found.append(path)
            return
        if path:
            found.append(path)
        ctx = command.make_context(path[-1] if path else "servectl", [], resilient_parsing=True)
        for name in sorted(command.list_commands(ctx)):
            walk(command.get_command(ctx, name), [*path, name])

    walk(group, [])
    return found


#: Commands to try first; tests/integration/test_readme_runs.py runs them (the mark below) from a plain install.
EXAMPLES = """\
servectl profiles                          # every profile on the search path, where it comes from, its status
servectl validate demo                     # the schema and every rule, one line per problem
servectl show demo                         # the profile after `extends`
servectl diff demo demo-rollback           # what differs between two compiled plans
servectl up demo --dry-run                 # the exact docker run and SGLang argv
servectl preflight demo                    # every check before a start (needs Docker for the image and ports)
servectl render demo --to compose --out -  # the same plan as a compose file
servectl gateway init                      # the example gateway file, where servectl reads it
"""


def render() -> str:
    parts = [
        "# CLI reference",
        "",
        "Generated from `servectl ... --help` by `scripts/gen_cli_docs.py`; a test fails when it is stale.",
        "",
        "## Examples",
        "",
        "Each runs on a fresh install with Docker and no GPU (a test runs them in a clean state folder):",
        "",
        "<!-- readme-test: run -->",
        "```bash",
        EXAMPLES.rstrip("\n"),
        "```",
        "",
        "## servectl",
        "",
        "```text",
        help_text(),
        "```",
    ]
    for path in commands():
        parts += ["", f"## servectl {' '.join(path)}", "", "```text", help_text(*path), "```"]
    return "\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    app = app_text()
    if args.check:
        stale = [APP] if APP.read_text(encoding="utf-8") != app else []
        stale += [DOC] if not stale and (not DOC.exists() or DOC.read_text() != render()) else []
        for path in stale:
            print(f"{path.relative_to(REPO)} is stale: run python scripts/gen_cli_docs.py", file=sys.stderr)
        sys.exit(1 if stale else 0)
    if APP.read_text(encoding="utf-8") != app:
        APP.write_text(app, encoding="utf-8")
        print(f"wrote {APP.relative_to(REPO)}")
        os.execv(sys.executable, [sys.executable, *sys.argv])  # render the help of the table just written
    text = render()
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(text)
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
