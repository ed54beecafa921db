"""Staged swap on the real Docker engine: the target staged before the stop, and a staging failure that stops nothing.

The first case swaps between two stand-in services through :class:`servectl.host.Host` (which stages by default)
with the target's model folder holding real weight files that the stand-in reads at start
(``STANDIN_READ_WEIGHTS=1``). The second asks the real SGLang 0.5.23 test image (``servectl.testing.sglang_image``)
to parse an argv it rejects: the swap ends in one line at the staging step and the old service still serves.
Every container carries this test's label and is removed at the end, passed or failed.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from _helpers import remove_labelled
from servectl_ci import sglang_image

from servectl.adapters.docker import DockerSdkEngine
from servectl.errors import PreflightFailed
from servectl.host import Host
from servectl.service.context import Context
from servectl.service.stage import stager
from servectl.service.swap import PhaseEvent, SwapOptions, swap
from servectl.standin.process import free_port

pytestmark = pytest.mark.integration

SESSION_LABEL = "servectl.test-session"
TEST_LABEL = "servectl.test-stage"
DEMO_MODEL = Path(__file__).resolve().parents[2] / "src/servectl/data/examples/demo-model"
SHARD_MIB = 16


class World:
    def __init__(self, tmp: Path, client: Any, image: str, session: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.client = client
        self.image = image
        self.tid = uuid.uuid4().hex[:10]
        self.labels = {SESSION_LABEL: session, TEST_LABEL: self.tid}
        self.port = free_port()
        self.profiles = tmp / "profiles"
        self.profiles.mkdir()
        self.home = tmp / "home"
        self.model = tmp / "model"
        self.model.mkdir()
        (self.model / "config.json").write_bytes((DEMO_MODEL / "config.json").read_bytes())
        for i in (1, 2, 3):
            (self.model / f"model-0000{i}-of-00003.safetensors").write_bytes(bytes([i]) * (SHARD_MIB * 2**20))
        self.docker = DockerSdkEngine(environ=os.environ, client=client)
        monkeypatch.setenv("SERVECTL_PROFILES", str(self.profiles))
        monkeypatch.setenv("SERVECTL_HOME", str(self.home))
        monkeypatch.setenv("SERVECTL_LOCK_TIMEOUT_S", "2")

    def profile(self, name: str, *, image: dict[str, Any] | None = None, engine: dict[str, Any] | None = None) -> str:
        doc: dict[str, Any] = {
            "name": name,
            "extends": "demo",
            "rollback": None,
            "image": image or {"ref": self.image},
            "model": {"path": str(self.model), "served_name": name},
            "serve": {"port": self.port},
            "engine": {"env": {"STANDIN_STARTUP_DELAY_S": "0.4", "STANDIN_READ_WEIGHTS": "1"}, **(engine or {})},
            "container": {"name": f"stageit-{self.tid}-{name}", "labels": self.labels, "stop_grace_s": 2},
            "health": {"startup_timeout_s": 30, "stall_timeout_s": 15},
        }
        (self.profiles / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        return name

    def host(self) -> Host:
        return Host(docker=self.docker, state_dir=self.home, scope=self.labels)

    def containers(self) -> dict[str, tuple[str, str]]:
        found = self.client.containers.list(all=True, filters={"label": f"{TEST_LABEL}={self.tid}"})
        return {c.name: (c.id, c.status) for c in found}

    def serves(self) -> str | None:
        try:
            models = httpx.get(f"http://127.0.0.1:{self.port}/v1/models", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return None
        return str(models["data"][0]["id"]) if models.get("data") else None

    def cleanup(self) -> None:
        remove_labelled(self.client, TEST_LABEL, self.tid)


@pytest.fixture
def world(make_world: Callable[[type[World]], World]) -> World:
    return make_world(World)


def test_host_swap_stages_the_target_before_the_stop_and_the_standin_reads_its_weights(world: World) -> None:
    world.profile("alpha")
    world.profile("beta")
    events: list[PhaseEvent] = []
    with world.host() as host:
        host.up(name="alpha")
        result = host.swap(name="beta", on_phase=events.append)
    assert result.outcome == "swapped" and world.serves() == "beta"
    phases = [p.phase for p in result.phases]
    assert phases.index("preflight") < phases.index("stage") < phases.index("stop-old")
    [staged] = [e.detail for e in events if e.phase == "stage" and e.step == "staged"]
    assert f"read {3 * SHARD_MIB}.0 MiB of weights ahead" in (staged or "")
    assert "stand-in image parses with" in (staged or "")
    logs = "\n".join(world.client.containers.get(f"stageit-{world.tid}-beta").logs().decode().splitlines())
    assert "Loading safetensors checkpoint shards: 100% Completed | 3/3" in logs

    with world.host() as host:  # --no-stage: the step is left out
        back = host.swap(name="alpha", stage=False)
    assert "stage" not in [p.phase for p in back.phases] and world.serves() == "alpha"


def test_an_argv_the_target_image_rejects_fails_at_staging_and_the_old_service_keeps_serving(
    world: World, docker_client: Any
) -> None:
    images = sglang_image.build_test_images(docker_client=docker_client)
    world.profile("alpha")
    # the profile's catalog is told of a choice that upstream SGLang 0.5.23 does not have: only the image knows
    world.profile(
        "bad",
        image={"ref": images.upstream, "build": None, "digest": None},
        engine={"catalog_extend": {"choices": {"quantization": ["exl3"]}}, "args": {"quantization": "exl3"}},
    )
    with world.host() as host:
        host.up(name="alpha")
    before = world.containers()

    def no_preflight(**_: Any) -> None:  # leave the parse to staging alone (preflight would ask the image too)
        return None

    ctx = Context(docker=world.docker, scope=world.labels, state_dir=world.home, nvml=False)
    with pytest.raises(PreflightFailed) as caught:
        swap(ctx, target="bad", opts=SwapOptions(preflight=no_preflight, stage=stager(ctx.probe, clock=time.monotonic)))
    line = caught.value.message
    assert "\n" not in line and "engine.args: staging bad: SGLang 0.5.23 in the image rejects the argv" in line
    assert "invalid choice: 'exl3'" in line and "nothing was stopped" in line
    assert world.containers() == before and world.serves() == "alpha"
