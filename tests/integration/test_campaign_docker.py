"""`servectl campaign` on the real Docker engine with the stand-in (issue 42's Done-when): six variants whose
speeds and faults are set through the stand-in's knobs, production swapped out and put back, kill -9 and
`campaign resume` with no measurement repeated, SIGINT during a variant's swap putting production back.

The variants: one clearly faster (accepted), one +4 % at C1 and -6 % at C4 (the seed's DFlash2 case, through
STANDIN_BATCH_RATES: the rate follows the requests running), one with a flag typo (rejected-invalid, no
container), one whose tool calls are wrong (rejected-gate-tools), one that crashes while loading weights
(rejected-startup with its log lines), one with no real gain whose speed scatters by 15 % per request
(STANDIN_RATE_NOISE: never accepted, mostly inconclusive; at a true gain equal to the minimum gain, 5 % noise
accepted it about once in 20-40 runs, the alpha the rule allows there); two objectives each written as an
operating-point profile. A variant under the campaign's VRAM reserve is rejected-vram, and kept with the file's
waiver quoted (a campaign run in-process over the stand-ins' memory ledger: the CLI reads no GPU of theirs).
Runtime: the stand-in starts in 0.3 s and each point asks 64-128 tokens at 200-400 tok/s, so a visit is a swap
and about a second of requests.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _helpers import remove_labelled

from servectl.plan.compile import LABEL_PROFILE
from servectl.standin.process import free_port
from servectl.testing.docker import TEST_SESSION_LABEL, write_test_profile

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


class World:
    """A base and a production profile on one port, a campaign file over the base, and servectl run on them."""

    def __init__(self, tmp: Path, image: str, session: str) -> None:
        self.tmp = tmp
        self.started: list[subprocess.Popen[str]] = []
        self.profiles = tmp / "profiles"
        port = free_port()
        tag = session[-6:].lower()
        self.base, self.prod = f"t{tag}-base", f"t{tag}-prod"
        common = {"image": {"ref": image}, "health": {"startup_timeout_s": 60}}
        write_test_profile(
            self.profiles,
            self.base,
            port=port,
            session=session,
            engine={"env": {"STANDIN_STARTUP_DELAY_S": "0.3", "STANDIN_TOKEN_RATE": "200"}},
            container={"name": f"servectl-{self.base}"},
            **common,
        )
        write_test_profile(
            self.profiles,
            self.prod,
            port=port,
            session=session,
            extends=self.base,
            model={"served_name": "prod"},
            container={"name": f"servectl-{self.prod}"},
        )
        self.env = {
            "PATH": "/usr/bin:/bin:/usr/local/bin",
            "HOME": str(tmp),
            "PYTHONPATH": str(REPO / "src"),
            "SERVECTL_HOME": str(tmp / "home"),
            "SERVECTL_PROFILES": str(self.profiles),
            "COLUMNS": "200",
        }

    def campaign(self, name: str, variants: str, *, max_repeats: int = 8) -> Path:
        path = self.tmp / f"{name}.yaml"
        path.write_text(
            f"name: {name}\nbase: {self.base}\nvariants:\n{variants}"
            "workload:\n  points:\n"
            "    - {name: c1, prompt_tokens: 256, concurrency: 1, max_tokens: 96}\n"
            "    - {name: c4, prompt_tokens: 256, concurrency: 4, max_tokens: 128}\n"
            "  warmup: false\n"
            "gates: {suite: default, only: [smoke, tools]}\n"
            f"decision: {{primary_point: c1, min_gain_pct: 2, regression_tolerance_pct: 2, min_repeats: 3, "
            f"max_repeats: {max_repeats}}}\n"
            "objectives:\n"
            "  - {name: balanced-latency, kind: lowest_ttft, decode_floor_tok_s: 300}\n"
            "  - {name: max-output-tpm, kind: max_output_tpm}\n"
        )
        return path

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "servectl", *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.tmp,
            timeout=timeout,
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        started = subprocess.Popen(
            [sys.executable, "-m", "servectl", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=self.tmp,
        )
        self.started.append(started)
        return started

    def stop(self) -> None:
        """Kill what the test started and left running (a failed assertion before its own end)."""
        for process in self.started:
            if process.poll() is None:
                process.kill()
            process.communicate()

    def running(self) -> list[tuple[str, str]]:
        """This world's services (status lists every servectl service on the engine, other tests' too)."""
        status = json.loads(self.run("status", "--json").stdout)
        mine = (self.base, self.prod, "six.", "sig.")
        return [(s["profile"], s["state"]) for s in status["services"] if s["profile"].startswith(mine)]


def measurements(folder: Path) -> list[tuple[str, int, str, float]]:
    if not (folder / "campaign.sqlite").exists():
        return []
    try:
        with sqlite3.connect(f"file:{folder / 'campaign.sqlite'}?mode=ro", uri=True) as db:
            return list(db.execute("SELECT variant, round, point, measured_at FROM measurements ORDER BY rowid"))
    except sqlite3.OperationalError:  # the file is there, its tables not yet
        return []


def created(docker_client: Any, profile: str, since: int) -> int:
    """How many containers of ``profile`` the engine created since ``since`` (its event log, not what is left)."""
    events = docker_client.events(
        since=since,
        until=int(time.time()) + 1,
        filters={"type": "container", "event": "create", "label": f"{LABEL_PROFILE}={profile}"},
        decode=True,
    )
    return sum(1 for _ in events)


def wait_for(condition: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


@pytest.fixture
def world(docker_client: Any, standin_image: str, test_session_id: str, tmp_path: Path) -> Iterator[World]:
    made = World(tmp_path, standin_image, test_session_id)
    yield made
    made.stop()
    remove_labelled(docker_client, TEST_SESSION_LABEL, test_session_id)


SIX = """\
  - {name: fast, overrides: {engine: {env: {STANDIN_TOKEN_RATE: "400"}}}}
  - {name: dflash, overrides: {engine: {env: {STANDIN_BATCH_RATES: "1:208,4:188"}}}}
  - {name: typo, overrides: {engine: {args: {speculative-num-stepz: 3}}}}
  - {name: toolfault, overrides: {engine: {env: {STANDIN_TOOL_FAULT: wrong_function}}}}
  - {name: crash, overrides: {engine: {env: {STANDIN_CRASH_AT: weights}}}}
  - {name: noise, overrides: {engine: {env: {STANDIN_TOKEN_RATE: "200", STANDIN_RATE_NOISE: "0.15"}}}}
"""


def test_six_variants_killed_and_resumed_decide_as_expected_and_production_comes_back(
    world: World, docker_client: Any
) -> None:
    assert world.run("up", world.prod).returncode == 0
    since = int(time.time()) - 1
    campaign = world.campaign("six", SIX)
    folder = world.tmp / "six"
    first = world.start("campaign", "run", str(campaign), "--out", str(folder), "--skip-invalid")
    wait_for(lambda: len(measurements(folder)) >= 7, 300)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    before = measurements(folder)
    resumed = world.run("campaign", "resume", str(folder))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    after = measurements(folder)
    assert set(before) <= set(after)  # every measurement taken before the kill kept as it was, not taken again
    assert len({(v, r, p) for v, r, p, _ in after}) == len(after)
    record = json.loads((folder / "campaign.json").read_text())
    statuses = {v["name"]: v["status"] for v in record["variants"]}
    # no real gain, its speed scattering 15 %: never accepted. Mostly inconclusive (the interval straddles +2 %),
    # sometimes settled below the minimum gain; no sequential rule can make inconclusive certain - at a true gain
    # equal to the minimum each side settles with about alpha - so the unit tests pin that status (SimLab)
    noise = statuses.pop("noise")
    assert noise in ("inconclusive", "rejected-no-gain"), resumed.stdout
    assert statuses == {
        "fast": "accepted-fast",
        "dflash": "rejected-c4-regression",  # -6 % at C4 against a tolerance of 2 %, whatever C1's +4 % says
        "typo": "rejected-invalid",
        "toolfault": "rejected-gate-tools",
        "crash": "rejected-startup",
    }, resumed.stdout
    crash = next(v for v in record["variants"] if v["name"] == "crash")
    assert "STANDIN_CRASH_AT=weights" in crash["reason"]
    assert created(docker_client, "six.typo", since) == 0  # no container for the invalid variant
    assert created(docker_client, "six.crash", since) >= 1  # (the check sees the ones that were created)
    assert world.running() == [(world.prod, "ready")]  # production back, nothing else
    status = world.run("campaign", "status", str(folder))
    assert "5/6 variants settled" not in status.stdout and "6/6 variants settled" in status.stdout
    assert record["winner"] == "fast" and (folder / "winner" / "six.fast.yaml").is_file()
    # two objectives, two operating-point profiles: the winner's settings and the chosen point's concurrency
    objectives = {o["name"]: o for o in json.loads((folder / "objectives.json").read_text())}
    assert {name: o["status"] for name, o in objectives.items()} == {
        "balanced-latency": "accepted-balanced-latency-profile",  # only fast decodes at >= 300 tok/s
        "max-output-tpm": "accepted-max-output-tpm-profile",
    }
    for name, concurrency in (("balanced-latency", {1, 4}), ("max-output-tpm", {4})):
        profile = yaml.safe_load((folder / "winner" / f"six.{name}.yaml").read_text())
        assert profile["extends"] == world.base and objectives[name]["variant"] == "fast"
        assert profile["engine"]["env"] == {"STANDIN_TOKEN_RATE": "400"}
        assert profile["engine"]["max_running_requests"] in concurrency
    assert "objective max-output-tpm: accepted-max-output-tpm-profile" in resumed.stdout


def test_sigint_during_a_variants_swap_ends_the_campaign_with_production_back(world: World, docker_client: Any) -> None:
    assert world.run("up", world.prod).returncode == 0
    slow = '  - {name: slow, overrides: {engine: {env: {STANDIN_STARTUP_DELAY_S: "20"}}}}\n'
    campaign = world.campaign("sig", slow)
    folder = world.tmp / "sig"
    run = world.start("campaign", "run", str(campaign), "--out", str(folder))

    def slow_is_starting() -> bool:
        return any(c.labels.get(LABEL_PROFILE) == "sig.slow" for c in docker_client.containers.list())

    wait_for(slow_is_starting, 120)  # its container is up, its engine still loading: the swap waits on it
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 130, out + err
    assert "error: campaign sig: interrupted (SIGINT) in round 1 at slow;" in err
    assert f"{world.prod} is back" in err and f"servectl campaign resume {folder}" in err
    assert world.running() == [(world.prod, "ready")]
    assert not [c for c in docker_client.containers.list(all=True) if c.labels.get(LABEL_PROFILE) == "sig.slow"]
    assert [row[:3] for row in measurements(folder)] == [("incumbent", 1, "c1"), ("incumbent", 1, "c4")]


def test_a_variant_under_the_vram_reserve_is_rejected_vram_unless_the_file_waives_it(
    world: World, docker_client: Any, test_session_id: str
) -> None:
    """The CLI reads no GPU of the stand-ins, so this campaign runs in-process through a Host whose inventory is
    the stand-ins' own memory ledger (StandinGpuInventory): a 96 GB card, and a variant whose
    --mem-fraction-static 0.95 leaves about 10.5 GiB of it free, under a 12 GiB reserve (the base leaves 16)."""
    from servectl.adapters.docker import DockerSdkEngine
    from servectl.host import Host
    from servectl.profile.yaml_locations import display_path
    from servectl.testing.standin_gpu import StandinGpuInventory, StandinOnCards

    def engines() -> list[StandinOnCards]:
        found = docker_client.containers.list(filters={"label": f"{TEST_SESSION_LABEL}={test_session_id}"})
        return [StandinOnCards(f"http://127.0.0.1:{c.labels['servectl.port']}", (0,)) for c in found]

    hungry = "  - {name: hungry, overrides: {engine: {args: {mem-fraction-static: 0.95}}}}\n"
    environ = {**os.environ, **world.env}
    outcomes = {}
    for name, constraints in (
        ("strict", "constraints: {vram_reserve_mib: 12288}\n"),
        ("waived", "constraints: {vram_reserve_mib: 12288, reserve_waiver: 'C64 KV cache on purpose; nothing else'}\n"),
    ):
        path = world.tmp / f"{name}.yaml"
        text = world.campaign(name, hungry, max_repeats=2).read_text().split("gates:")[0]
        path.write_text(text + constraints + "decision: {primary_point: c1, min_repeats: 2, max_repeats: 2}\n")
        host = Host(
            docker=DockerSdkEngine(environ=environ, client=docker_client),
            gpus=StandinGpuInventory(engines, cards=1),
            state_dir=Path(world.env["SERVECTL_HOME"]),
            environ=environ,
        )
        with host:
            outcomes[name] = host.run_campaign(file=path, out_dir=world.tmp / name)
    (strict,) = outcomes["strict"].rows
    assert strict.status == "rejected-vram", strict.reason
    assert strict.reason.endswith("MiB free on a card after its measurements, under the 12,288 MiB reserve")
    (waived,) = outcomes["waived"].rows
    assert waived.status != "rejected-vram"
    assert f"under the 12,288 MiB reserve, waived ({display_path(world.tmp / 'waived.yaml')}:" in waived.reason
    assert "C64 KV cache on purpose; nothing else)" in waived.reason


def test_production_on_warm_standby_is_released_for_the_campaign_and_resumed_at_its_end(
    make_world: Callable[[type[Any]], Any],
) -> None:
    """Production (swap.standby: warm) on its own port, the campaign's variants on the bench port: the first
    swap releases production's cards instead of stopping it, and the end resumes that same container (no cold
    start), through the swap machinery's warm standby."""
    from test_standby_docker import World as StandbyWorld

    from servectl.host import Host

    w = make_world(StandbyWorld)
    w.profile("prod", warm=True)
    w.profile("bench")  # the campaign's base: its own port, the bench port
    assert w.swap("prod").outcome == "started"
    before = w.container("prod")
    path = w.tmp / "warm.yaml"
    path.write_text(
        "name: warm\nbase: bench\nvariants:\n"
        '  - {name: fast, overrides: {engine: {env: {STANDIN_TOKEN_RATE: "4000"}}}}\n'
        "workload:\n  points:\n    - {name: c1, prompt_tokens: 64, concurrency: 1, max_tokens: 64}\n"
        "  warmup: false\n"
        "decision: {primary_point: c1, min_repeats: 2, max_repeats: 2}\n"
    )
    seen: list[dict[str, str]] = []
    from servectl.campaign.lab import bench_point_of_profile

    with Host(docker=w.docker, gpus=w.gpus, scope=w.labels, state_dir=w.home) as host:

        def bench(ctx: Any, profile: str, settings: Any, out: Path) -> Any:
            seen.append(w.states())
            return bench_point_of_profile(ctx, profile, settings, out)

        outcome = host.run_campaign(file=path, out_dir=w.tmp / "warm", bench_point=bench)
    assert [r.name for r in outcome.rows] == ["fast"]
    assert seen and all(states.get("prod") == "standby" for states in seen)  # released, not stopped
    assert w.states() == {"prod": "ready"}
    assert w.container("prod") == before  # the same container, same start: resumed, not started again
