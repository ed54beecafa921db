"""CPU time of `servectl validate` on hostile profiles: 80,000 env keys, an alias bomb, 50,000 levels of nesting.

Each case is a fresh profile folder validated in-process; the time is process CPU (so machine load shared
with other jobs does not count). Targets (issue 15): a profile with 80,000 env keys < 2 s, and the same
keys split 40,000 + 40,000 over a base (the merge) < 2 s; the alias bomb and the deep file refused in
< 50 ms. Exit status 1 when a target is missed.

    PYTHONPATH=src python benchmarks/bench_hostile_profiles.py [--keys N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from servectl.errors import ProfileError
from servectl.plan.inventory import validate_profiles
from servectl.profile import loader
from servectl.profile.loader import search_path

HEAD = """name: big
image: {ref: "example/sglang:1"}
model: {path: /models/m, served_name: m}
serve: {port: 8180, role: bench}
"""
BOMB = "name: bomb\na: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)


def env(n: int, value: str) -> str:
    return "engine:\n  env:\n" + "".join(f"    K{i}: {value}{i}\n" for i in range(n))


def measure(folder: Path, name: str) -> tuple[float, str]:
    start = time.process_time()
    result = validate_profiles([name], folders=search_path(environ=os.environ))[name]
    elapsed = time.process_time() - start
    return elapsed, "ok" if result is None else result.lines()[0][:90]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=80_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "profiles"
        folder.mkdir()
        os.chdir(tmp)
        loader.SHIPPED_PROFILES_DIR = Path(tmp) / "none"
        (folder / "big.yaml").write_text(HEAD + env(args.keys, "v"))
        (folder / "_base.yaml").write_text("name: _base\n" + env(args.keys // 2, "b"))
        (folder / "merged.yaml").write_text(
            HEAD.replace("big", "merged") + "extends: _base\n" + env(args.keys // 2, "v")
        )
        (folder / "bomb.yaml").write_text(BOMB)
        (folder / "deep.yaml").write_text("name: deep\nx: " + "[" * 50_000 + "]" * 50_000 + "\n")
        cases = [("big", 2.0), ("merged", 2.0), ("bomb", 0.05), ("deep", 0.05)]
        failed = False
        for name, target in cases:
            try:
                elapsed, outcome = measure(folder, name)
            except ProfileError as e:  # not expected: validate_profiles returns errors
                elapsed, outcome = float("nan"), str(e)
            ok = elapsed < target
            failed |= not ok
            print(
                f"{name:6} {elapsed * 1000:8.1f} ms CPU  (target < {target * 1000:.0f} ms) "
                f"{'ok' if ok else 'MISSED'}  {outcome}"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
