"""Swap downtime: ``servectl swap`` against a hand-written ``docker stop; docker run; until curl`` baseline.

Both replace a running stand-in engine (service A) with another (service B, same port) whose startup takes a
fixed delay. A prober thread asks ``GET /health`` every 10 ms and, when it answers 200, ``/v1/models`` for
which service that is; the downtime is the gap between A's last healthy answer and B's first one, seen from
outside, the same way for both. The old service's stop time is measured for each (the baseline: the
``docker stop`` command; servectl: its ``stop-old`` phase), so

    residual = downtime - (old stop time + new startup delay)

is what each way adds on top of stopping and starting: for the baseline, creating and starting the
container and booting the engine's process. servectl's overhead is its residual minus the baseline's
(target <= 0.3 s). servectl's full health gate (ready line, ``/v1/models``, a one-token chat completion)
counts in its downtime; the baseline only waits for ``/health``. Runs alternate (library call in this
process, the CLI in a fresh one, the baseline) so that drift hits all alike; medians are reported.

Usage: python benchmarks/bench_swap_downtime.py [--runs 5] [--delay 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _swap_harness import Prober, baseline_argv, bench_folders, standin_image, wait_serving, write_standin_profile  # noqa: E402

from servectl.adapters.docker import DockerSdkEngine  # noqa: E402
from servectl.plan.resolve import resolve  # noqa: E402
from servectl.service.context import Context  # noqa: E402
from servectl.service.stage import stager  # noqa: E402
from servectl.service.swap import SwapOptions, swap  # noqa: E402
from servectl.standin.process import free_port  # noqa: E402
from servectl.testing.docker import TEST_SESSION_LABEL  # noqa: E402
from servectl.testing.docker import remove_test_session as remove_session  # noqa: E402

TARGET_S = 0.3


@dataclass(frozen=True)
class Run:
    downtime_s: float  # seen by the prober
    stop_s: float  # the old service's stop
    reported_s: float | None = None  # servectl's own downtime figure


def baseline_once(old: str, new: str, session: str) -> Run:
    port = free_port()
    old_argv = baseline_argv(old, session, port)
    subprocess.run(old_argv, check=True, capture_output=True)
    wait_serving(port, old)
    old_name = old_argv[old_argv.index("--name") + 1]
    new_argv = baseline_argv(new, session, port)
    timing = Path(tempfile.mktemp(prefix="bench-stop-"))
    script = (
        f"s=$(date +%s.%N); docker stop {shlex.quote(old_name)} >/dev/null; "
        f"echo $(date +%s.%N) $s > {shlex.quote(str(timing))}; "
        f"{shlex.join(new_argv)} >/dev/null && "
        f"until curl -sf -o /dev/null http://127.0.0.1:{port}/health; do sleep 0.05; done"
    )
    with Prober(port) as prober:
        time.sleep(0.2)
        subprocess.run(["bash", "-c", script], check=True, timeout=120)
        wait_serving(port, new)
    end, start = (float(x) for x in timing.read_text().split())
    timing.unlink()
    return Run(downtime_s=prober.gap(old, new), stop_s=end - start)


def servectl_once(old: str, new: str, session: str, home: Path, engine: DockerSdkEngine, *, cli: bool) -> Run:
    port = resolve(old, environ=os.environ).loaded.profile.serve.port
    scope = {TEST_SESSION_LABEL: session}
    ctx = Context(docker=engine, scope=scope, state_dir=home, nvml=False)
    opts = SwapOptions(
        handle_signals=False, stage=stager(ctx.probe, clock=time.monotonic)
    )  # as `servectl swap` does (stage before the stop)
    swap(ctx, target=old, opts=opts)
    wait_serving(port, old)
    with Prober(port) as prober:
        time.sleep(0.2)
        if cli:
            env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
            proc = subprocess.run(
                [sys.executable, "-m", "servectl", "swap", new, "--json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            if proc.returncode != 0:
                raise SystemExit(f"servectl swap failed: {proc.stderr}")
            data = json.loads(proc.stdout)
            stop_s = next(p["duration_s"] for p in data["phases"] if p["phase"] == "stop-old")
            reported = data["downtime_s"]
        else:
            result = swap(ctx, target=new, opts=opts)
            stop_s, reported = result.phase_s("stop-old") or 0.0, result.downtime_s
        wait_serving(port, new)
    return Run(downtime_s=prober.gap(old, new), stop_s=stop_s, reported_s=reported)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--delay", type=float, default=2.0, help="stand-in startup delay, seconds")
    args = parser.parse_args()

    image = standin_image()
    session, folder, home = bench_folders("swap")
    port = free_port()
    old, new = f"swapa-{session[-6:]}", f"swapb-{session[-6:]}"
    for name in (old, new):
        write_standin_profile(folder, name, session=session, image=image, port=port, delay_s=args.delay, swap=True)
    engine = DockerSdkEngine(environ=os.environ)
    runs: dict[str, list[Run]] = {"baseline": [], "library": [], "cli": []}
    try:
        baseline_once(old, new, session)  # untimed: warms the engine and the page cache
        remove_session(session)
        for i in range(args.runs):
            for variant in ("baseline", "library", "cli"):
                if variant == "baseline":
                    run = baseline_once(old, new, session)
                else:
                    run = servectl_once(old, new, session, home, engine, cli=variant == "cli")
                remove_session(session)
                runs[variant].append(run)
                rest = run.downtime_s - run.stop_s - args.delay
                print(
                    f"run {i + 1}/{args.runs} {variant:8s} downtime {run.downtime_s:6.3f} s  "
                    f"stop {run.stop_s:5.3f} s  minus stop and delay {rest:6.3f} s",
                    flush=True,
                )
    finally:
        remove_session(session)
        engine.close()

    def med(variant: str, key: str) -> float:
        return statistics.median(getattr(r, key) for r in runs[variant])

    residual = {v: med(v, "downtime_s") - med(v, "stop_s") - args.delay for v in runs}
    summary = {
        "runs": args.runs,
        "startup_delay_s": args.delay,
        "median_downtime_s": {v: round(med(v, "downtime_s"), 3) for v in runs},
        "median_old_stop_s": {v: round(med(v, "stop_s"), 3) for v in runs},
        "servectl_reported_downtime_s": {
            v: round(statistics.median(r.reported_s for r in runs[v] if r.reported_s is not None), 3)
            for v in ("library", "cli")
        },
        # What is left once the old stop and the fixed delay are taken out: creating and starting the new
        # container and booting the engine's process (both pay it), plus whatever the launcher adds.
        "downtime_minus_stop_and_delay_s": {v: round(r, 3) for v, r in residual.items()},
        "servectl_overhead_s": {v: round(residual[v] - residual["baseline"], 3) for v in ("library", "cli")},
        "downtime_ratio_to_baseline": {
            v: round(med(v, "downtime_s") / med("baseline", "downtime_s"), 3) for v in ("library", "cli")
        },
        "target_overhead_s": TARGET_S,
    }
    print(json.dumps(summary, indent=2))
    print(
        f"baseline: downtime - (stop + delay) = {residual['baseline']:.3f} s "
        "(container create/start and the engine process booting)"
    )
    for variant in ("library", "cli"):
        extra = summary["servectl_overhead_s"][variant]
        verdict = "meets" if extra <= TARGET_S else "misses"
        print(
            f"{variant}: downtime - (stop + delay) = {residual[variant]:.3f} s; servectl's overhead over the "
            f"baseline {extra:+.3f} s, {verdict} the {TARGET_S} s target"
        )


if __name__ == "__main__":
    main()
