"""What the typer release under servectl costs each command's start, paired in one run.

typer 0.29 coerces every parameter value through a pydantic TypeAdapter (``typer._adapters``), even ``--help``
and an option that was left out; 0.27-0.28 coerce through their click types. servectl pins ``typer<0.29``
rather than patching typer's ``process_value`` (issue 29: the CLI uses typer as documented). This benchmark
times plain installs (one venv each, the wheel installed, no checkout on the path) side by side:

    python -m venv /tmp/v28 && /tmp/v28/bin/pip install dist/servectl-*.whl             # typer 0.28 (the pin)
    python -m venv /tmp/v29 && /tmp/v29/bin/pip install --no-deps typer==0.29.2 ...     # the release it avoids
    python benchmarks/bench_typer_versions.py --venv 0.28=/tmp/v28 --venv 0.29=/tmp/v29 [--runs 11]

It prints each venv's typer version and the median wall time of ``status --json`` (no service),
``--help`` and ``up glm53-393k --dry-run``, with ``docker ps`` as the anchor where Docker answers.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli_timing import medians, paired

COMMANDS = {"status": ["status", "--json"], "--help": ["--help"], "dry-run": ["up", "glm53-393k", "--dry-run"]}


def typer_version(venv: Path) -> str:
    probe = [str(venv / "bin" / "python"), "-c", "import typer; print(typer.__version__)"]
    return subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", action="append", required=True, help="LABEL=PATH of a venv with servectl")
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    venvs = {label: Path(path) for label, _, path in (v.partition("=") for v in args.venv)}
    with tempfile.TemporaryDirectory() as home:
        env = {"PATH": "/usr/bin:/bin", "HOME": home, "SERVECTL_HOME": home, "COLUMNS": "200", "NO_COLOR": "1"}
        variants = {
            f"{label} {name}": [str(venv / "bin" / "servectl"), *argv]
            for label, venv in venvs.items()
            for name, argv in COMMANDS.items()
        }
        try:
            subprocess.run(["docker", "ps"], capture_output=True, check=True, timeout=10)
            variants["docker ps"] = ["docker", "ps", "--filter", "label=servectl.managed=1"]
        except (OSError, subprocess.SubprocessError):
            print("docker ps: no engine answers; no anchor")
        med = medians(paired(variants, runs=args.runs, env=env, cwd=Path(home)))
    for label, venv in venvs.items():
        print(f"{label}: typer {typer_version(venv)} in {venv}")
    anchor = med.get("docker ps")
    for name, value in med.items():
        ratio = f" = {value / anchor:.1f}x docker ps" if anchor and name != "docker ps" else ""
        print(f"{name:>24}: {value * 1000:7.1f} ms median{ratio}")


if __name__ == "__main__":
    main()
