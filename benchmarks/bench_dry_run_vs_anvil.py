"""`servectl up glm53-393k --dry-run` against anvil-serving 2.0.2's `serves up NAME --dry-run --no-router`.

anvil-serving is installed from the package index into a throwaway venv (kept under
``~/.cache/servectl-bench/anvil-serving-2.0.2`` so reruns skip the install). Its one-serve manifest is the
equivalent of glm53-393k in anvil's format (its scaffolded ``serves.toml``): the same container name, port,
served model and the docker run that servectl prints, on one GPU role standing for the card pair (anvil
admits a tensor-parallel serve over two roles only through ``serves mode enter``). Runs interleave; the
target is servectl <= 0.5x anvil with a warm plan cache (the profile compiled before, as on every run after
the first; ``servectl.adapters.plan_cache``). Cold (``SERVECTL_NO_PLAN_CACHE=1``: the profile compiled on every run,
as on the first run after any input changed) is reported beside it. servectl's state folder is a fresh one
(``XDG_STATE_HOME``), found through platformdirs as for a user. When anvil-serving cannot be installed,
servectl is compared with the issue's recorded 0.45 s and the output says so. The import profile of the
dry-run is printed either way.

    python benchmarks/bench_dry_run_vs_anvil.py [--runs 9]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cli_timing import CPU_BY_VARIANT, format_profile, import_profile, medians, paired, servectl_env

ANVIL_VERSION = "2.0.2"
RECORDED_ANVIL_S = 0.45
TARGET_RATIO = 0.5
VENV = Path("~/.cache/servectl-bench").expanduser() / f"anvil-serving-{ANVIL_VERSION}"

MANIFEST = """\
# one serve, the equivalent of servectl's glm53-393k (see bench_dry_run_vs_anvil.py)
[[gpu_roles]]
id = "card-pair"
vram_mib = 195774
reserve_mib = 6144

[[serve]]
name = "glm53-393k"
stack = "serving"
container = "{container}"
runtime = "docker"
port = {port}
model = "{model}"
engine = "sglang"
health = "/health"
gpu_role = "card-pair"
vram_mib = 188000
residency = "resident"
up = {up}
"""


def anvil_command() -> Path | None:
    """The anvil-serving executable in the throwaway venv, installed on first use; None when it cannot be."""
    exe = VENV / "bin" / "anvil-serving"
    if exe.is_file():
        return exe
    try:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, capture_output=True, timeout=300)
        subprocess.run(
            [str(VENV / "bin" / "pip"), "install", "-q", f"anvil-serving=={ANVIL_VERSION}"],
            check=True,
            capture_output=True,
            timeout=600,
        )
    except (subprocess.SubprocessError, OSError) as err:
        print(f"anvil-serving {ANVIL_VERSION} could not be installed: {err}")
        return None
    return exe if exe.is_file() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-anvil-"))
    env = {k: v for k, v in servectl_env(XDG_STATE_HOME=str(work / "state")).items() if k != "SERVECTL_HOME"}
    servectl = [sys.executable, "-m", "servectl", "up", "glm53-393k", "--dry-run"]
    from servectl.plan.compile import docker_run_argv
    from servectl.plan.resolve import resolve

    plan = resolve("glm53-393k", environ=os.environ).plan
    manifest = work / "serves.toml"
    manifest.write_text(
        MANIFEST.format(
            container=plan.docker.name,
            port=plan.docker.ports[0].host_port,
            model=plan.served_name,
            up=json.dumps(shlex.join(docker_run_argv(plan.docker))),
        ),
        encoding="utf-8",
    )
    variants: dict[str, list[str]] = {"servectl": servectl, "servectl cold": servectl}
    anvil = anvil_command()
    if anvil is not None:
        variants["anvil"] = [str(anvil), "serves", "up", "glm53-393k", "--dry-run", "--no-router"]
        variants["anvil"] += ["--manifest", str(manifest)]
    envs = {
        "anvil": {**env, "HOME": str(work / "home")},  # anvil writes its config home; keep it here
        "servectl cold": {**env, "SERVECTL_NO_PLAN_CACHE": "1"},
    }
    floor = {"python -c pass": [sys.executable, "-c", "pass"]}
    times = paired({**variants, **floor}, runs=args.runs, env=env, cwd=work, envs=envs)
    med = medians(times)
    print(f"# medians of {args.runs} interleaved runs")
    for name, value in med.items():
        print(f"  {value * 1000:7.1f} ms  {name}")
    anvil_s = med.get("anvil", RECORDED_ANVIL_S)
    source = f"anvil-serving {ANVIL_VERSION} measured here" if "anvil" in med else "anvil's recorded 0.45 s"
    cpu = medians({name: CPU_BY_VARIANT[name] for name in med})
    print("# CPU (user + system) medians of the same runs")
    for name, value in cpu.items():
        print(f"  {value * 1000:7.1f} ms  {name}")
    if "anvil" in cpu:
        warm, cold = cpu["servectl"] / cpu["anvil"], cpu["servectl cold"] / cpu["anvil"]
        print(f"CPU ratio servectl / anvil = {warm:.2f}x (cold {cold:.2f}x)")
    for name in ("servectl", "servectl cold"):
        ratio = med[name] / anvil_s
        verdict = "meets" if ratio <= TARGET_RATIO else "misses"
        target = f"the <= {TARGET_RATIO}x target" if name == "servectl" else "(no target cold)"
        print(f"ratio {name} / anvil = {ratio:.2f}x ({source}); {verdict if name == 'servectl' else ''} {target}")
    for name in ("servectl", "servectl cold"):
        print(f"import profile of {name}: up glm53-393k --dry-run (one run, -X importtime):")
        print("\n".join(format_profile(import_profile(servectl, env=envs.get(name, env), cwd=work))))


if __name__ == "__main__":
    main()
