"""Validation time of all shipped profiles: this tree against a base commit, measured in one run.

The base (default: the commit before engine fidelity, issue 11) is checked out in a temporary worktree. Both
trees are timed interleaved (base, new, base, ...) so machine load affects both alike, two ways:

(At the default base, glm53-exl3-524k was an incomplete profile, not yet a template: it fails there, after
the same loading work.)

- ``servectl validate`` as a command (a fresh process: imports, catalogs, the parser, the log catalog);
- in one process, one round of validating every shipped profile after a first warm round, and of that the
  cross-field rules and flag checks (``profile.rules.check_profile``: what issue 11 changed), warm and cold.

Reading, merging and schema-checking the YAML files is the loader's work, shared by both trees' rules.

Target: each new median within 10 % of the base's (ratio <= 1.10).

    python benchmarks/bench_validation.py [--base REV] [--runs 11]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASE = "af0c226"  # main when issue 11 started

_ROUNDS = """
import sys, time
try:
    import servectl.profile.rules as rules  # since issue 29
except ImportError:
    import servectl.plan.rules as rules
spent = [0.0]
check = rules.check_profile
def timed(loaded):
    start = time.perf_counter()
    try:
        return check(loaded)
    finally:
        spent[0] += time.perf_counter() - start
rules.check_profile = timed  # the base loader imports it per call; the new one through profile.validate
for validating in ("servectl.profile.validate", "servectl.plan.validate"):
    try:
        validate = __import__(validating, fromlist=["check_profile"])
        validate.check_profile = timed
        break
    except ImportError:
        pass
from servectl.plan.inventory import validate_profiles
validate_profiles(None)  # cold: imports, catalogs, first parse
cold = spent[0]
rounds = int(sys.argv[1])
spent[0] = 0.0
start = time.perf_counter()
for _ in range(rounds):
    validate_profiles(None)
print((time.perf_counter() - start) / rounds, spent[0] / rounds, cold)
"""


def command_s(tree: Path) -> float:
    env = {"PYTHONPATH": str(tree / "src"), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    start = time.perf_counter()
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    subprocess.run([sys.executable, "-m", "servectl", "validate"], cwd=tree, env=env, check=False, **quiet)
    return time.perf_counter() - start


def rounds_s(tree: Path, rounds: int) -> tuple[float, float, float]:
    env = {"PYTHONPATH": str(tree / "src"), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    done = subprocess.run(
        [sys.executable, "-c", _ROUNDS, str(rounds)], cwd=tree, env=env, check=True, capture_output=True, text=True
    )
    whole, rules, cold = (float(x) for x in done.stdout.strip().splitlines()[-1].split())
    return whole, rules, cold


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=BASE, help="the commit to compare with")
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--rounds", type=int, default=20, help="in-process rounds per run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="servectl-bench-base-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(base), args.base], check=True,
                       capture_output=True)  # fmt: skip
        try:
            command_s(base), command_s(REPO)  # warm the page cache
            cmd: dict[str, list[float]] = {"base": [], "new": []}
            inproc: dict[str, list[float]] = {"base": [], "new": []}
            rules: dict[str, list[float]] = {"base": [], "new": []}
            cold: dict[str, list[float]] = {"base": [], "new": []}
            for _ in range(args.runs):
                for label, tree in (("base", base), ("new", REPO)):
                    cmd[label].append(command_s(tree))
                    whole, checks, first = rounds_s(tree, args.rounds)
                    inproc[label].append(whole)
                    rules[label].append(checks)
                    cold[label].append(first)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)], check=False)
    shown = (
        ("servectl validate (command)", cmd),
        ("validate all profiles (in process)", inproc),
        ("  of which rules + flag checks", rules),
        ("rules + flag checks, first round", cold),
    )
    for what, data in shown:
        old, new = statistics.median(data["base"]), statistics.median(data["new"])
        print(f"{what:36} base {old * 1000:8.2f} ms  new {new * 1000:8.2f} ms  ratio {new / old:.3f} (target <= 1.10)")


if __name__ == "__main__":
    main()
