"""servectl's own startup overhead: ``servectl up`` to ready, against ``docker run`` + a curl loop.

Both start the same container (the stand-in engine with a fixed startup delay; the baseline runs the exact
``docker run`` that ``servectl up --dry-run`` prints, under another name) and stop the clock when the service
is ready: the baseline when ``curl /health`` first answers 200 (polling every 50 ms), servectl when ``up``
returns, which is after its full health gate (``/health``, the ready line, ``/v1/models``, a one-token chat
completion). Runs alternate so that drift in the engine's speed hits both alike.

Reported per variant (median over the runs): time to ready, time minus the fixed delay, and servectl's own
overhead = servectl - baseline, for the CLI (a fresh ``python -m servectl up``: interpreter, imports,
profile load, checks, gate) and for the library call ``servectl.service.runtime.up()`` in a warm process.
Target: overhead <= 0.3 s through the CLI (issue 16), not only the library. When the CLI misses it, the
import profile of a fresh ``servectl up`` process is printed.

Usage: python benchmarks/bench_up_overhead.py [--runs 5] [--delay 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _swap_harness import baseline_argv, bench_folders, standin_image, write_standin_profile  # noqa: E402

from servectl.adapters.docker import DockerSdkEngine  # noqa: E402
from servectl.service import runtime  # noqa: E402
from servectl.service.context import Context  # noqa: E402
from servectl.standin.process import free_port  # noqa: E402
from servectl.testing.docker import TEST_SESSION_LABEL  # noqa: E402
from servectl.testing.docker import remove_test_session as remove_session  # noqa: E402

TARGET_S = 0.3


def baseline_once(name: str, session: str, port: int) -> float:
    """``docker run -d`` of the plan's exact argv (own name and port), then curl /health until 200."""
    argv = baseline_argv(name, session, port)
    script = (
        f"{shlex.join(argv)} >/dev/null && "
        f"until curl -sf -o /dev/null http://127.0.0.1:{port}/health; do sleep 0.05; done"
    )
    t0 = time.perf_counter()
    subprocess.run(["bash", "-c", script], check=True, timeout=120)
    return time.perf_counter() - t0


def cli_once(name: str, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "servectl", "up", name], env=env, capture_output=True, text=True, timeout=120
    )
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"servectl up failed: {proc.stderr}")
    return elapsed


_IMPORTS = (
    "import servectl.cli.app as c; [c._module_commands(m) for m in set(c.COMMANDS.values())]; "
    "import servectl.plan.resolve, servectl.service.runtime, servectl.adapters.docker, "
    "docker, httpx, rich.status"
)


def import_floor_once(env: dict[str, str]) -> float:
    """A fresh interpreter importing what ``servectl up`` imports, and nothing else."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", _IMPORTS], env=env, check=True)
    return time.perf_counter() - t0


def library_once(name: str, engine: DockerSdkEngine, session: str, home: Path) -> float:
    t0 = time.perf_counter()
    ctx = Context(docker=engine, scope={TEST_SESSION_LABEL: session}, state_dir=home, nvml=False)
    runtime.up(ctx, name=name)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--delay", type=float, default=2.0, help="stand-in startup delay, seconds")
    args = parser.parse_args()

    image = standin_image()
    session, folder, home = bench_folders("up")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    name = f"bench-{session[-6:]}"
    port = free_port()
    write_standin_profile(folder, name, session=session, image=image, port=port, delay_s=args.delay)
    engine = DockerSdkEngine(environ=os.environ)
    times: dict[str, list[float]] = {"baseline": [], "cli": [], "library": [], "imports": []}
    try:
        # One untimed start of each kind warms the engine and the page cache.
        baseline_once(name, session, free_port())
        remove_session(session)
        for i in range(args.runs):
            for variant in ("baseline", "cli", "library"):
                if variant == "baseline":
                    t = baseline_once(name, session, free_port())
                elif variant == "cli":
                    t = cli_once(name, env)
                else:
                    t = library_once(name, engine, session, home)
                times[variant].append(t)
                remove_session(session)
                print(
                    f"run {i + 1}/{args.runs} {variant:8s} {t:6.3f} s (minus delay {t - args.delay:6.3f} s)",
                    flush=True,
                )
            times["imports"].append(import_floor_once(env))
    finally:
        remove_session(session)

    med = {k: statistics.median(v) for k, v in times.items()}
    summary = {
        "runs": args.runs,
        "startup_delay_s": args.delay,
        "median_ready_s": {k: round(v, 3) for k, v in med.items()},
        "median_minus_delay_s": {k: round(v - args.delay, 3) for k, v in med.items() if k != "imports"},
        "cli_import_floor_s": round(med["imports"], 3),
        "servectl_overhead_s": {
            "cli": round(med["cli"] - med["baseline"], 3),
            "library": round(med["library"] - med["baseline"], 3),
            "cli_minus_import_floor": round(med["cli"] - med["imports"] - med["baseline"], 3),
        },
        "ratio_to_baseline": {
            "cli": round(med["cli"] / med["baseline"], 3),
            "library": round(med["library"] / med["baseline"], 3),
        },
        "target_overhead_s": TARGET_S,
    }
    print(json.dumps(summary, indent=2))
    overhead = summary["servectl_overhead_s"]
    for variant in ("cli", "library"):
        verdict = "meets" if overhead[variant] <= TARGET_S else "misses"
        print(f"{variant} overhead {overhead[variant]:.3f} s {verdict} the {TARGET_S} s target")
    print(
        f"CLI overhead {overhead['cli']:.3f} s, of which {med['imports']:.3f} s is a fresh interpreter "
        f"importing servectl's modules (left: {overhead['cli_minus_import_floor']:.3f} s)"
    )
    if overhead["cli"] > TARGET_S:
        from cli_timing import format_profile, import_profile

        print("import profile of servectl up (a fresh process importing what it runs, -X importtime):")
        print("\n".join(format_profile(import_profile([sys.executable, "-c", _IMPORTS], env=env))))


if __name__ == "__main__":
    main()
