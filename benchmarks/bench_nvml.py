"""Time the NVML part of preflight on a machine with NVIDIA GPUs, and print a real preflight report.

    python benchmarks/bench_nvml.py [--runs 50] [--json OUT.json] [--report REPORT.json]

Prints the time of ``import pynvml``, of the first snapshot (which initialises NVML) and the median of
``--runs`` further snapshots, then runs a full preflight for all cards of this host (real NVML, real host
probe, the real Docker engine where one answers) and prints it as a table; ``--report`` also writes it as
JSON. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rich.console import Console  # after the src/ path is set

from servectl.adapters.docker import DockerSdkEngine
from servectl.adapters.gpu import NvmlInventory
from servectl.adapters.host import PsutilHostProbe
from servectl.cli.views.preflight import render_report
from servectl.preflight.model import PreflightRequest
from servectl.preflight.run import run_preflight


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--json", type=Path, default=None, help="write the timings here")
    parser.add_argument("--report", type=Path, default=None, help="write the preflight report here")
    args = parser.parse_args()

    started = time.perf_counter()
    import pynvml  # noqa: F401  # timed on purpose

    import_ms = (time.perf_counter() - started) * 1000
    inventory = NvmlInventory()
    started = time.perf_counter()
    first = inventory.snapshot()
    first_ms = (time.perf_counter() - started) * 1000
    times = []
    for _ in range(args.runs):
        started = time.perf_counter()
        inventory.snapshot()
        times.append((time.perf_counter() - started) * 1000)
    timings = {
        "cards": len(first.devices),
        "driver": first.driver_version,
        "import_pynvml_ms": round(import_ms, 2),
        "first_snapshot_with_init_ms": round(first_ms, 2),
        "snapshot_median_ms": round(statistics.median(times), 3),
        "snapshot_min_ms": round(min(times), 3),
        "snapshot_max_ms": round(max(times), 3),
        "runs": args.runs,
    }
    print(json.dumps(timings, indent=2))
    if args.json:
        args.json.write_text(json.dumps(timings, indent=2) + "\n")

    indices = tuple(d.index for d in first.devices)
    request = PreflightRequest(
        profile_name="all-local-cards",
        gpu_indices=indices,
        arch=first.devices[0].arch if first.devices else None,
        tp=len(indices),
        port=8180,
        mem_fraction=0.9,
        image_ref="servectl-none:latest",
        model_path="/nonexistent-model",
        ipc_host=True,
    )
    report = run_preflight(
        request=request, gpus=inventory, host=PsutilHostProbe(), docker=DockerSdkEngine(environ=os.environ)
    )
    render_report(report, Console(width=200))
    print(
        f"preflight total {report.duration_seconds * 1000:.1f} ms, NVML part "
        f"{(report.gpu_query_seconds or 0) * 1000:.2f} ms"
    )
    if args.report:
        args.report.write_text(report.to_json() + "\n")
    inventory.close()


if __name__ == "__main__":
    main()
