"""Staged swap vs unstaged: downtime when the target's weight files are not in the page cache.

Two stand-in services, A and B, on one port. B's model folder holds ``--gib`` GiB of real (non-sparse) weight
files, and B's stand-in reads every one of them at start (``STANDIN_READ_WEIGHTS=1``), as SGLang's checkpoint
loader does. Before each swap A -> B, B's weight files are put out of the page cache with
``posix_fadvise(POSIX_FADV_DONTNEED)`` and ``fincore`` confirms that none of their pages is resident: the state a
host is in when the weights are larger than what its page cache keeps (a 200 GB model on a host whose cache
holds other things). ``drop_caches`` would do the same for the whole machine, and slow down everyone else on
it; evicting exactly these files is the same for this measurement and touches nothing else.

Then the swap runs either staged (``stage=stager()``, what ``servectl swap`` does) or unstaged (``--no-stage``),
alternating run by run so that drift hits both alike. Staged, servectl reads the files ahead *before* the stop
(the ``stage`` phase, while A still serves), and B's start reads them from RAM; unstaged, B's start reads them
from disk inside the downtime. Downtime is servectl's own figure (from the stop of A to B through the health
gate) and is also seen from outside by a prober (``GET /health`` + ``/v1/models`` every 10 ms: the gap between
A's last answer and B's first). Reported: medians per mode, the ratio, the stage phase's time and the rate at
which B's start read its weights (from B's ``Load weight end. elapsed=`` line).

Usage: python benchmarks/bench_staged_swap.py [--runs 3] [--gib 2] [--delay 1]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _swap_harness import (  # noqa: E402
    WEIGHTS_DIR,
    Prober,
    bench_folders,
    evict,
    make_weights,
    standin_image,
    wait_serving,
    write_standin_profile,
)

from servectl.adapters.docker import DockerSdkEngine  # noqa: E402
from servectl.service.context import Context  # noqa: E402
from servectl.service.stage import stager  # noqa: E402
from servectl.service.swap import SwapOptions, SwapResult, swap  # noqa: E402
from servectl.standin.process import free_port  # noqa: E402
from servectl.testing.docker import TEST_SESSION_LABEL  # noqa: E402
from servectl.testing.docker import remove_test_session as remove_session  # noqa: E402

GIB = 2**30
_ELAPSED = re.compile(r"Load weight end\. elapsed=([0-9.]+) s")


@dataclass(frozen=True)
class Run:
    mode: str
    downtime_s: float  # servectl's own figure
    seen_s: float  # from outside, by the prober
    stage_s: float  # the stage phase (before the stop: not downtime)
    load_s: float  # B's own "Load weight end. elapsed="
    resident_before: int


@dataclass(frozen=True)
class Setup:
    engine: DockerSdkEngine
    session: str
    home: Path
    port: int
    old: str
    new: str
    files: list[Path]


def load_seconds(engine: DockerSdkEngine, container: str) -> float:
    logs = engine.client.containers.get(container).logs().decode(errors="replace")
    found = _ELAPSED.findall(logs)
    return float(found[-1]) if found else float("nan")


def once(mode: str, setup: Setup) -> Run:
    def run_swap(target: str, staged: bool) -> SwapResult:
        ctx = Context(docker=setup.engine, scope={TEST_SESSION_LABEL: setup.session}, state_dir=setup.home, nvml=False)
        opts = SwapOptions(handle_signals=False, stage=stager(ctx.probe, clock=time.monotonic) if staged else None)
        return swap(ctx, target=target, opts=opts)

    run_swap(setup.old, False)
    wait_serving(setup.port, setup.old)
    resident = evict(setup.files)
    with Prober(setup.port) as prober:
        time.sleep(0.2)
        result = run_swap(setup.new, mode == "staged")
        wait_serving(setup.port, setup.new)
    return Run(
        mode=mode,
        downtime_s=result.downtime_s or float("nan"),
        seen_s=prober.gap(setup.old, setup.new),
        stage_s=result.phase_s("stage") or 0.0,
        load_s=load_seconds(setup.engine, f"servectl-{setup.new}"),
        resident_before=resident,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="pairs of runs (staged, unstaged)")
    parser.add_argument("--gib", type=float, default=2.0, help="size of B's weight files, GiB")
    parser.add_argument("--delay", type=float, default=1.0, help="stand-in startup delay, seconds")
    args = parser.parse_args()

    files = make_weights(WEIGHTS_DIR, int(args.gib * GIB))
    total = sum(f.stat().st_size for f in files)
    image = standin_image()
    session, folder, home = bench_folders("staged")
    port = free_port()
    old, new = f"stga-{session[-6:]}", f"stgb-{session[-6:]}"
    for name, model in ((old, None), (new, str(WEIGHTS_DIR))):
        write_standin_profile(
            folder, name, session=session, image=image, port=port, delay_s=args.delay, swap=True,
            env={"STANDIN_READ_WEIGHTS": "1"}, model_path=model, health={"startup_timeout_s": 600},
        )  # fmt: skip
    engine = DockerSdkEngine(environ=os.environ)
    setup = Setup(engine=engine, session=session, home=home, port=port, old=old, new=new, files=files)
    runs: list[Run] = []
    try:
        for i in range(args.runs):
            for mode in ("staged", "unstaged") if i % 2 == 0 else ("unstaged", "staged"):
                run = once(mode, setup)
                runs.append(run)
                print(
                    f"run {i + 1}/{args.runs} {mode:<8} downtime {run.downtime_s:7.3f} s (seen {run.seen_s:7.3f} s)  "
                    f"B read its weights in {run.load_s:6.2f} s  stage {run.stage_s:6.2f} s  "
                    f"resident before {run.resident_before / 2**20:.0f} MiB",
                    flush=True,
                )
    finally:
        remove_session(session)
        engine.close()
    print(json.dumps(summary(runs, total, args), indent=2))


def summary(runs: list[Run], total: int, args: argparse.Namespace) -> dict[str, object]:
    def med(mode: str, field: str) -> float:
        return round(statistics.median(getattr(r, field) for r in runs if r.mode == mode), 3)

    staged, unstaged = med("staged", "downtime_s"), med("unstaged", "downtime_s")
    return {
        "pairs": args.runs,
        "weights_gib": round(total / GIB, 2),
        "startup_delay_s": args.delay,
        "median_downtime_s": {"staged": staged, "unstaged": unstaged},
        "median_seen_downtime_s": {"staged": med("staged", "seen_s"), "unstaged": med("unstaged", "seen_s")},
        "unstaged_over_staged": round(unstaged / staged, 2) if staged else None,
        "median_weight_load_s": {"staged": med("staged", "load_s"), "unstaged": med("unstaged", "load_s")},
        "median_stage_phase_s": med("staged", "stage_s"),
        # the weights phase is its share of the delay plus the reading
        "cold_read_gib_per_s": round(total / GIB / (med("unstaged", "load_s") - 0.45 * args.delay), 2),
        "cached_read_gib_per_s": round(total / GIB / (med("staged", "load_s") - 0.45 * args.delay), 2),
        "max_resident_before_mib": round(max(r.resident_before for r in runs) / 2**20, 1),
    }


if __name__ == "__main__":
    main()
