"""Warm swap back vs cold swap back: the downtime of ``swap`` to a profile on warm standby against a cold start.

Three stand-in services with the same engine settings: A-warm (``swap.standby: warm``: started with SGLang's
memory saver, released on the way away), A-cold (the same profile without standby: stopped on the way away)
and B, each on its own port, all on fake card 0 of :class:`servectl.testing.standin_gpu.StandinGpuInventory`
(which reads each stand-in's memory ledger, as NVML reads a real card). One pair of runs is

* warm: ``swap A-warm`` (a cold start, not measured), ``swap B`` (A-warm released, kept), ``swap A-warm``
  (resume: measured);
* cold: ``swap A-cold``, ``swap B`` (A-cold stopped), ``swap A-cold`` (cold start: measured),

in alternating order from pair to pair so that drift hits both alike. Downtime is servectl's own figure (from
the old service's stop or release to the target through the health gate, one real completion included).
The cold start's cost is the stand-in's startup (``--delay``, spread over SGLang's phases, plus reading its
weight files when ``--gib`` > 0, evicted from the page cache before the swap back of both arms, as in
``bench_staged_swap.py``); the warm one's is the stand-in's resume (``STANDIN_RESUME_S``, ``--resume``) plus
what servectl does around it. Both A profiles have the same engine settings (delay, weights, resume); only
``swap.standby`` differs. B (never measured) starts in ``--other-delay``. Reported: medians, the ratio, each run.

Needs the warm standby of issue 30 on this checkout (``swap.standby`` in profiles, the stand-in's memory saver).

Usage: python benchmarks/bench_standby_swap.py [--runs 3] [--delay 8] [--resume 0.5] [--gib 1] [--other-delay 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _swap_harness import WEIGHTS_DIR, bench_folders, evict, make_weights, standin_image  # noqa: E402

from servectl.adapters.docker import DockerSdkEngine  # noqa: E402
from servectl.service.context import Context  # noqa: E402
from servectl.service.swap import SwapOptions, SwapResult, swap  # noqa: E402
from servectl.standin.process import free_port  # noqa: E402
from servectl.testing.docker import TEST_SESSION_LABEL, write_test_profile  # noqa: E402
from servectl.testing.docker import remove_test_session as remove_session  # noqa: E402

try:
    from servectl.testing.standin_gpu import StandinGpuInventory, StandinOnCards  # the standby's fake card
except ImportError as err:  # an older checkout
    raise SystemExit(f"this checkout has no warm standby yet ({err}); it lands with issue 30") from None

GIB = 2**30


@dataclass(frozen=True)
class Run:
    mode: str
    downtime_s: float
    target_startup_s: float
    phases: dict[str, float]


class World:
    def __init__(self, args: argparse.Namespace) -> None:
        self.session, self.folder, self.home = bench_folders("standby")
        self.engine = DockerSdkEngine(environ=os.environ)
        self.gpus = StandinGpuInventory(self.engines, cards=1)
        self.resident = 0  # the most bytes of the weights left in the page cache after an eviction
        self.files = make_weights(WEIGHTS_DIR, int(args.gib * GIB)) if args.gib > 0 else []
        image = standin_image()
        tag = self.session[-6:]
        self.warm, self.cold, self.other = f"sbw-{tag}", f"sbc-{tag}", f"sbb-{tag}"
        env = {"STANDIN_STARTUP_DELAY_S": f"{args.delay:g}", "STANDIN_RESUME_S": f"{args.resume:g}"}
        if self.files:
            env["STANDIN_READ_WEIGHTS"] = "1"
        for name in (self.warm, self.cold, self.other):
            if name == self.other:  # B's start is never measured: a short one keeps the run short
                env = {**env, "STANDIN_STARTUP_DELAY_S": f"{args.other_delay:g}"}
            sections: dict[str, Any] = {
                "image": {"ref": image},
                "model": {"served_name": name, **({"path": str(WEIGHTS_DIR)} if self.files else {})},
                "container": {
                    "name": f"servectl-{name}",
                    "stop_grace_s": 10,
                    "labels": {"servectl.gpus": "0"},  # on the fake card 0; no GPU request to Docker
                },
                "engine": {"env": env},
                "health": {"startup_timeout_s": 600},
            }
            if name == self.warm:
                sections["swap"] = {"standby": "warm"}
            write_test_profile(self.folder, name, port=free_port(), session=self.session, **sections)

    def engines(self) -> list[Any]:
        found = self.engine.client.containers.list(
            filters={"label": f"{TEST_SESSION_LABEL}={self.session}", "status": "running"}
        )
        return [
            StandinOnCards(f"http://127.0.0.1:{c.labels['servectl.port']}", (0,), pid=int(c.attrs["State"]["Pid"]))
            for c in found
        ]

    def swap(self, target: str) -> SwapResult:
        ctx = Context(docker=self.engine, gpus=self.gpus, scope={TEST_SESSION_LABEL: self.session}, state_dir=self.home)
        return swap(ctx, target=target, opts=SwapOptions(handle_signals=False))

    def once(self, mode: str) -> Run:
        target = self.warm if mode == "warm" else self.cold
        self.swap(target)
        self.swap(self.other)
        if self.files:  # both arms alike: the weights are not in the page cache when the swap back begins
            self.resident = max(self.resident, evict(self.files))
        back = self.swap(target)
        self.swap(self.other)  # leave the pair as it began: only B runs (A-warm on standby)
        return Run(
            mode=mode,
            downtime_s=back.downtime_s or float("nan"),
            target_startup_s=back.target_startup_s or float("nan"),
            phases={p.phase: round(p.duration_s, 3) for p in back.phases},
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="pairs of runs (warm, cold)")
    parser.add_argument("--delay", type=float, default=8.0, help="stand-in cold startup delay, seconds")
    parser.add_argument("--resume", type=float, default=0.5, help="stand-in resume time, seconds")
    parser.add_argument("--gib", type=float, default=1.0, help="weight files the stand-in reads at a cold start")
    parser.add_argument("--other-delay", type=float, default=0.5, help="B's startup delay (never measured), seconds")
    args = parser.parse_args()
    world = World(args)
    runs: list[Run] = []
    try:
        for i in range(args.runs):
            for mode in ("warm", "cold") if i % 2 == 0 else ("cold", "warm"):
                run = world.once(mode)
                runs.append(run)
                print(
                    f"run {i + 1}/{args.runs} {mode:<5} downtime {run.downtime_s:7.3f} s  "
                    f"target up in {run.target_startup_s:7.3f} s  phases {run.phases}",
                    flush=True,
                )
    finally:
        remove_session(world.session)
        world.engine.close()

    def med(mode: str) -> float:
        return round(statistics.median(r.downtime_s for r in runs if r.mode == mode), 3)

    warm, cold = med("warm"), med("cold")
    print(
        json.dumps(
            {
                "pairs": args.runs,
                "startup_delay_s": args.delay,
                "resume_s": args.resume,
                "weights_gib": args.gib,
                "other_delay_s": args.other_delay,
                "max_resident_before_mib": round(world.resident / 2**20, 1),
                "median_target_startup_s": {
                    m: round(statistics.median(r.target_startup_s for r in runs if r.mode == m), 3)
                    for m in ("warm", "cold")
                },
                "median_downtime_s": {"warm": warm, "cold": cold},
                "cold_over_warm": round(cold / warm, 2) if warm else None,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
