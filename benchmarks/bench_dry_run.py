"""Time `servectl up glm53-393k --dry-run` against the bare import floor, in one run.

The floor is `python -c "import typer, pydantic, yaml"`: what any typer+pydantic CLI pays before doing work.
Runs are interleaved (floor, dry-run, floor, ...) so machine load affects both alike; prints medians and the
ratio. Target: ratio <= 1.5.

    python benchmarks/bench_dry_run.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    floor_cmd = [sys.executable, "-c", "import typer, pydantic, yaml"]
    dry_cmd = [sys.executable, "-m", "servectl", "up", "glm53-393k", "--dry-run"]
    timed(floor_cmd), timed(dry_cmd)  # warm the page cache
    floors, dries = [], []
    for _ in range(args.runs):
        floors.append(timed(floor_cmd))
        dries.append(timed(dry_cmd))
    floor, dry = statistics.median(floors), statistics.median(dries)
    print(f"import floor  median {floor * 1000:7.1f} ms  (min {min(floors) * 1000:.1f})")
    print(f"dry-run       median {dry * 1000:7.1f} ms  (min {min(dries) * 1000:.1f})")
    print(f"ratio {dry / floor:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
