"""Write docs/cli.md from the CLI's own --help, so the reference cannot drift (a test checks it).

python scripts/gen_cli_docs.py          # rewrite docs/cli.md
python scripts/gen_cli_docs.py --check  # exit 1 when docs/cli.md is stale
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "cli.md"


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
    text = render()
    if args.check:
        if not DOC.exists() or DOC.read_text() != text:
            print(f"{DOC} is stale: run python scripts/gen_cli_docs.py", file=sys.stderr)
            sys.exit(1)
        return
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(text)
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
