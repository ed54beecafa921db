"""Shared by the CLI start-up benchmarks: interleaved timing of commands and the import profile of one.

Runs alternate between variants (a, b, a, b, ...) so machine load hits each alike; the medians are compared
in the same call. ``import_profile`` runs a command once under ``python -X importtime`` and returns the
modules with the largest cumulative import time, which is where a missed target's time goes.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def servectl_env(**extra: str) -> dict[str, str]:
    """This checkout's servectl on the path, wide output, no colour, its bytecode compiled.

    An installed wheel has its bytecode compiled at install time; a checkout run with
    ``PYTHONDONTWRITEBYTECODE`` set (as on the shared VM) would compile every edited module on every run, so
    the checkout's bytecode is written here once, the way ``pip install`` does.
    """
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "src")], check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": "200", "NO_COLOR": "1", **extra}
    return env


#: CPU seconds (user + system) of every command :func:`timed` ran, by argv, in run order.
CPU_SECONDS: dict[tuple[str, ...], list[float]] = {}


def timed(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> float:
    """Wall seconds of one run; the command must exit 0. Its CPU seconds go to :data:`CPU_SECONDS`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(list(argv), env=dict(env) if env else None, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    CPU_SECONDS.setdefault(tuple(argv), []).append(cpu)
    return elapsed


def paired(
    variants: Mapping[str, Sequence[str]],
    *,
    runs: int,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    envs: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, list[float]]:
    """Each variant ``runs`` times, interleaved, after one untimed warm-up run of each."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for name, argv in variants.items():
        timed(argv, env=(envs or {}).get(name, env), cwd=cwd)
    for _ in range(runs):
        for name, argv in variants.items():
            times[name].append(timed(argv, env=(envs or {}).get(name, env), cwd=cwd))
            CPU_BY_VARIANT.setdefault(name, []).append(CPU_SECONDS[tuple(argv)][-1])
    return times


#: CPU seconds of each variant's timed runs in :func:`paired` (the command's own work; on a shared machine it
#: varies less than the wall time, which also waits for the other work).
CPU_BY_VARIANT: dict[str, list[float]] = {}


def medians(times: Mapping[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in times.items()}


def import_profile(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None, top: int = 15
) -> list[tuple[str, float, float]]:
    """``(module, own ms, cumulative ms)`` of the imports (two levels deep) with the largest cumulative time."""
    assert Path(argv[0]).name.startswith("python"), "import_profile runs a Python command"
    proc = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]],
        env=dict(env) if env else None,
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    rows: list[tuple[str, float, float]] = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        own, cumulative, module = line[len("import time:") :].split("|", 2)
        if not own.strip().isdigit():
            continue  # the header line
        depth = (len(module) - len(module.lstrip(" ")) - 1) // 2
        if depth <= 1:
            rows.append(("  " * depth + module.strip(), int(own) / 1000, int(cumulative) / 1000))
    rows.sort(key=lambda row: row[2], reverse=True)
    return rows[:top]


def format_profile(rows: Sequence[tuple[str, float, float]]) -> list[str]:
    return [f"    {cumulative:8.1f} ms cumulative {own:7.1f} ms own  {module}" for module, own, cumulative in rows]
