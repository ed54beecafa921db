"""`servectl status` and `servectl --help` against their anchors, in one call.

- ``status`` with no service of this benchmark and with 3 running stand-in services (started through
  ``servectl up`` with a session label, removed at the end), against
  ``docker ps --filter label=servectl.managed=1`` in the same interleaved runs. Target (issue 24): the
  status median <= 10x the docker ps median, in both cases. The drift column reads the plan cache
  (``servectl.adapters.plan_cache``): ``up`` cached each profile's plan, so status compiles nothing.
- ``--help`` against ``python -c pass``. Target: median <= 0.15 s.

Run it under the shared engine's lock: ``flock /tmp/servectl-docker.lock python benchmarks/bench_status_help.py``.

Containers of other sessions on the same engine are listed by ``status`` too; the output says how many it saw.
Absolute targets depend on machine load, so the ``python -c pass`` floor is printed next to them, and when a
target is missed the import profile of the command is printed.

    python benchmarks/bench_status_help.py [--runs 9] [--python VENV/bin/python]

``--python`` times the servectl installed in that interpreter (a plain install: a venv with the wheel, no
checkout on its path, no ``.pth`` of this machine's own site-packages) instead of this checkout's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from _swap_harness import up_standins
from cli_timing import format_profile, import_profile, medians, paired, servectl_env

from servectl.testing.docker import remove_test_session

STATUS_TARGET_RATIO = 10.0
HELP_TARGET_S = 0.15


def report(name: str, med: dict[str, float], target: float, argv: list[str], env: dict[str, str]) -> None:
    value = med[name]
    verdict = "meets" if value <= target else "misses"
    print(f"{name}: {value * 1000:.1f} ms median {verdict} the {target * 1000:.0f} ms target")
    if value > target:
        print(f"  import profile of {' '.join(argv[1:])} (one run, -X importtime):")
        print("\n".join(format_profile(import_profile(argv, env=env))))


def report_ratio(name: str, med: dict[str, float], argv: list[str], env: dict[str, str]) -> None:
    ratio = med[name] / med["docker ps"]
    verdict = "meets" if ratio <= STATUS_TARGET_RATIO else "misses"
    floor, libraries = med["python -c pass"] / med["docker ps"], med["import typer, docker"] / med["docker ps"]
    print(
        f"{name}: {med[name] * 1000:.1f} ms = {ratio:.1f}x docker ps ({med['docker ps'] * 1000:.1f} ms); "
        f"{verdict} the <= {STATUS_TARGET_RATIO:g}x target (python -c pass alone is {floor:.1f}x, "
        f"importing typer and the Docker SDK {libraries:.1f}x)"
    )
    if ratio > STATUS_TARGET_RATIO:
        print(f"  import profile of {' '.join(argv[1:])} (one run, -X importtime):")
        print("\n".join(format_profile(import_profile(argv, env=env))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--help-only", action="store_true", help="time --help only (a machine without Docker)")
    parser.add_argument("--python", help="the interpreter of a plain install to time (default: this checkout's)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-status-"))
    env = servectl_env(SERVECTL_HOME=str(work / "home"), SERVECTL_PROFILES=str(work / "profiles"))
    python = sys.executable
    if args.python:
        python = str(Path(args.python).absolute())  # a venv's python: its own site-packages, not this checkout
        env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        print(f"# servectl of {python}")
    status = [python, "-m", "servectl", "status"]
    help_ = [python, "-m", "servectl", "--help"]
    anchors = {
        "docker ps": ["docker", "ps", "--filter", "label=servectl.managed=1"],
        "python -c pass": [python, "-c", "pass"],
        # what any typer CLI on the Docker SDK pays before it asks the engine anything
        "import typer, docker": [python, "-c", "import typer, docker"],
    }
    if args.help_only:
        med = medians(paired({"--help": help_, "python -c pass": anchors["python -c pass"]}, runs=args.runs, env=env))
        for name, value in med.items():
            print(f"  {value * 1000:7.1f} ms  {name}")
        report("--help", med, HELP_TARGET_S, help_, env)
        return
    listed = json.loads(subprocess.run([*status, "--json"], env=env, capture_output=True, check=True).stdout)
    seen = len(listed["services"])
    print(f"# medians of {args.runs} interleaved runs; status saw {seen} servectl container(s) of other sessions")
    idle = medians(paired({"status (no service)": status, "--help": help_, **anchors}, runs=args.runs, env=env))
    for name, value in idle.items():
        print(f"  {value * 1000:7.1f} ms  {name}")

    session = f"bench-{uuid.uuid4().hex[:12]}"
    try:
        up_standins(work / "profiles", session=session, env=env, prefix="bench-status")
        busy = medians(paired({"status (3 running)": status, **anchors}, runs=args.runs, env=env))
        for name, value in busy.items():
            print(f"  {value * 1000:7.1f} ms  {name} (with 3 running)")
        report_ratio("status (3 running)", busy, status, env)  # profiled while they run
    finally:
        remove_test_session(session)
    report_ratio("status (no service)", idle, status, env)
    report("--help", idle, HELP_TARGET_S, help_, env)


if __name__ == "__main__":
    main()
