"""What each change of issue 24 bought: the command it sped up, timed at the commit before it and at the commit,
interleaved in one run.

Each commit's ``src`` is exported with ``git archive`` into a temporary folder (bytecode compiled, as an
install does) and run with its own state folder, so the variants share nothing but the machine and the
Docker engine. ``status`` is timed with 3 running stand-in services (started by this checkout, labelled with
a session, removed at the end) after one untimed run of each variant (which fills its plan cache); the
dry-run and validate are timed warm the same way. Medians of ``--runs``; the machine's load hits the two
sides of a pair alike. Commands that talk to Docker: run it under the engine lock,
``flock /tmp/servectl-docker.lock python benchmarks/bench_speed_changes.py``.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from _swap_harness import up_standins
from cli_timing import REPO, medians

#: (what changed, the commit that changed it, the command it changed), oldest first.
CHANGES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("plan cache + lazy compiler imports + one typer command", "ee593b6", ("up", "glm53-393k", "--dry-run")),
    ("status: hash from the cache entry, stdlib /health probe", "411f121", ("status",)),
    ("status: another folder's profile needs no compile", "a34df68", ("status",)),
    ("dry-run script kept in the cache entry", "ed39f27", ("up", "glm53-393k", "--dry-run")),
    ("PyYAML imported on first read", "40244b4", ("status",)),
    ("list[str] words skip typer's coercion", "338c9bd", ("validate", "glm53-393k")),
    ("docker info only for a container without a runtime", "d72c13e", ("status",)),
)


def export(commit: str, into: Path) -> Path:
    """``commit``'s tree (src and profiles) in ``into/<commit>``, its bytecode compiled; the folder."""
    folder = into / commit
    if not folder.exists():
        folder.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "src"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(folder / "src")], check=True, capture_output=True)
    return folder


def start_standins(work: Path, session: str) -> dict[str, str]:
    """3 running stand-in services of this checkout; the environment that finds their profiles."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "SERVECTL_PROFILES": str(work / "profiles")}
    env["SERVECTL_HOME"] = str(work / "up-home")
    up_standins(work / "profiles", session=session, env=env, prefix="bench-changes")
    return env


def measured(
    variants: dict[str, list[str]], *, runs: int, envs: dict[str, dict[str, str]], cwd: Path
) -> tuple[dict[str, float], dict[str, float]]:
    """Median wall and CPU (user + system) seconds of each variant, interleaved, after one untimed run each.

    The CPU time of the command's own process is what a change to it can save; on a machine shared with
    other work it varies far less than the wall time, which waits for the other work too.
    """
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(runs + 1):
        for name, argv in variants.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            proc = subprocess.run(argv, env=envs[name], cwd=cwd, capture_output=True, text=True)
            elapsed = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if proc.returncode != 0:
                raise SystemExit(f"{name}: {' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
            if round_:  # the first round fills each variant's plan cache
                wall[name].append(elapsed)
                cpu[name].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return medians(wall), medians(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    from servectl.testing.docker import remove_test_session

    work = Path(tempfile.mkdtemp(prefix="bench-changes-"))
    session = f"bench-{uuid.uuid4().hex[:12]}"
    try:
        base = start_standins(work, session)
        print(f"# medians of {args.runs} interleaved runs, each pair in one run; 3 stand-in services running")
        for what, commit, command in CHANGES:
            sha = subprocess.run(
                ["git", "-C", str(REPO), "rev-parse", "--short", commit], check=True, capture_output=True, text=True
            ).stdout.strip()
            variants: dict[str, list[str]] = {}
            envs: dict[str, dict[str, str]] = {}
            for label, rev in (("before", f"{sha}^"), ("after", sha)):
                folder = export(rev, work / "trees")
                variants[label] = [sys.executable, "-m", "servectl", *command]
                envs[label] = {
                    **base,
                    "PYTHONPATH": str(folder / "src"),
                    "SERVECTL_HOME": str(work / "homes" / rev),
                    "COLUMNS": "200",
                    "NO_COLOR": "1",
                }
            wall, cpu = measured(variants, runs=args.runs, envs=envs, cwd=work)  # cwd: each tree its own profiles
            print(
                f"{sha} {what}: servectl {' '.join(command)}\n"
                f"    wall {wall['before'] * 1000:.0f} -> {wall['after'] * 1000:.0f} ms "
                f"({(wall['before'] - wall['after']) * 1000:+.0f} ms saved); "
                f"CPU {cpu['before'] * 1000:.0f} -> {cpu['after'] * 1000:.0f} ms "
                f"({(cpu['before'] - cpu['after']) * 1000:+.0f} ms saved)"
            )
    finally:
        remove_test_session(session)


if __name__ == "__main__":
    main()
