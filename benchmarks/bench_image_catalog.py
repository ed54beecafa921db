"""`catalog extract` and `validate --in-image` times against the bare cost of asking the image, in one run.

On the upstream SGLang 0.5.23 test image (``servectl_ci.sglang_image``), alternating, ``--repeats`` times:

* start: a throwaway container (the same options servectl uses) running ``python3 -c pass``;
* start+parse (the floor): the same container running the least code that parses an argv with SGLang's own
  parser: ``from sglang.srt.server_args import prepare_server_args; prepare_server_args(ARGV)``;
* parse in image: :func:`servectl.adapters.engine_image.parse_in_image` (what ``validate --in-image`` and
  preflight's ``engine.parse`` run) on the argv of ``glm53-524k-bringup``;
* extract: :func:`servectl.service.catalog.extract_catalog` (what ``catalog extract`` runs).

Reports medians and the ratios to the floor. Targets: each a few seconds on an idle machine, and no more
than the floor (ratio <= ``--max-ratio``, default 1.25: the probe sends its source, frames JSON and runs
SGLang's resolution; the dump walks 531 actions). Exit 1 when a ratio is over.

    PYTHONPATH=src python benchmarks/bench_image_catalog.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from servectl.adapters.docker import DockerSdkEngine
from servectl.adapters.engine_image import parse_in_image
from servectl.plan.resolve import resolve
from servectl.service.catalog import extract_catalog

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "tools"))
from servectl_ci.sglang_image import build_test_images


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-ratio", type=float, default=1.25)
    parser.add_argument("--profile", default="glm53-524k-bringup")
    args = parser.parse_args()

    t0 = time.perf_counter()
    images = build_test_images()
    build_s = time.perf_counter() - t0
    engine = DockerSdkEngine(environ=os.environ)
    argv = list(resolve(args.profile, environ=os.environ).plan.engine_argv)
    floor_code = "import sys; from sglang.srt.server_args import prepare_server_args; prepare_server_args(sys.argv[1:])"
    times: dict[str, list[float]] = {"start": [], "start+parse": [], "parse in image": [], "extract": []}
    with tempfile.TemporaryDirectory() as store:
        for _ in range(args.repeats):
            t = time.perf_counter()
            done = engine.run_oneshot(images.upstream, ["python3", "-c", "pass"], timeout_s=120)
            assert done.exit_code == 0, done.stderr
            times["start"].append(time.perf_counter() - t)

            t = time.perf_counter()
            done = engine.run_oneshot(images.upstream, ["python3", "-c", floor_code, *argv], timeout_s=120)
            assert done.exit_code == 0, done.stderr[-500:]
            times["start+parse"].append(time.perf_counter() - t)

            t = time.perf_counter()
            verdict = parse_in_image(image=images.upstream, argv=argv, engine=engine)
            assert verdict.parsed, verdict.error
            times["parse in image"].append(time.perf_counter() - t)

            t = time.perf_counter()
            result = extract_catalog(image=images.upstream, engine=engine, store_dir=Path(store))
            assert result.option_count > 500
            times["extract"].append(time.perf_counter() - t)

    median = {name: statistics.median(values) for name, values in times.items()}
    floor = median["start+parse"]
    load = os.getloadavg()
    print(f"image {images.upstream} (built or found in {build_s:.1f} s); {args.repeats} repeats, alternating")
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'':16} {'median s':>9} {'/ floor':>8}   runs")
    for name, values in times.items():
        runs = " ".join(f"{v:.2f}" for v in values)
        print(f"{name:16} {median[name]:9.2f} {median[name] / floor:8.2f}   {runs}")
    over = [name for name in ("parse in image", "extract") if median[name] / floor > args.max_ratio]
    if over:
        print(f"over the target ratio {args.max_ratio}: {', '.join(over)}")
        return 1
    print(f"both within {args.max_ratio} x the floor (container start + SGLang's own parse)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
