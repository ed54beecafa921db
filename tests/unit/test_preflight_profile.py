"""A profile's preflight request carries exactly what its plan will run."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from servectl.plan.resolve import resolve
from servectl.preflight.request import parse_size_bytes, request_for
from servectl.preflight.run import run_preflight
from servectl.testing.docker import FakeDockerEngine
from servectl.testing.fakes import FakeGpuInventory, FakeHostProbe

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def in_repo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("SERVECTL_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", "/home/u")


def test_393k_request_matches_the_profile_and_plan() -> None:
    request = request_for(resolve("glm53-393k", environ=os.environ))
    assert request.gpu_indices == (0, 1) and request.arch == "sm120" and request.tp == 2
    assert request.vram_reserve_mib == 3072 and request.vram_reserve_waiver
    assert request.mem_fraction == 0.99 and request.ipc_host
    assert (request.host_address, request.port, request.role) == ("127.0.0.1", 8180, "bench")
    assert request.image_ref == "ghcr.io/ormandj/sglang-glm53-flash-sm120:v0.4.3"
    assert request.image_digest and request.image_digest.startswith("sha256:0c06")
    assert request.model_path == "/home/u/models/GLM-5.3-Flash-ormandj-W4A16-NVFP4"
    assert request.cache_paths == ("/home/u/vllm/glm53-flash-sm120-v84-cache",)
    assert [c.ref for c in request.conflicts] == ["/home/u/vllm/compose-DeepSeek-V4-Flash-0731-DSpark-v9.yml"]


def test_the_request_carries_the_engine_containers_memlock_limit_and_where_it_comes_from() -> None:
    sglang = request_for(resolve("glm53-393k", environ=os.environ))  # no container.ulimits: servectl gives SGLang's own
    assert (sglang.memlock, sglang.memlock_source) == ((-1, -1), "SGLang's ulimits, servectl's default")
    assert (
        request_for(resolve("demo", environ=os.environ)).memlock is None
    )  # the stand-in gets none: the Docker engine's default


def test_demo_requests_no_gpu_and_passes_on_a_gpu_less_box_with_fakes() -> None:
    request = request_for(resolve("demo", environ=os.environ))
    assert not request.gpus_requested
    report = run_preflight(
        request=request,
        gpus=FakeGpuInventory.scenario("no_driver"),
        host=FakeHostProbe(),
        docker=FakeDockerEngine(),
    )
    assert report.check("gpu.present").result == "skipped"


def test_foreign_process_on_a_card_fails_exclusivity_with_its_pid() -> None:
    request = request_for(resolve("glm53-393k", environ=os.environ))
    gpus = FakeGpuInventory.scenario("foreign_pid")
    report = run_preflight(request=request, gpus=gpus, host=FakeHostProbe(), docker=FakeDockerEngine())
    check = report.check("gpu.exclusive")
    assert check.result == "fail"
    pid = gpus.snapshot().devices[0].processes[0].pid  # type: ignore[index]
    assert str(pid) in check.message


@pytest.mark.parametrize(("text", "expected"), [("32g", 32 * 2**30), ("512m", 512 * 2**20), ("100", 100), (None, None)])
def test_shm_size_parses_docker_notation(text: str | None, expected: int | None) -> None:
    assert parse_size_bytes(text) == expected


def test_check_start_raises_on_a_failed_check_and_records_forced_skips(tmp_path: Path) -> None:
    from servectl.adapters.state import History
    from servectl.errors import PreflightFailed
    from servectl.preflight.request import check_start
    from servectl.testing.docker import FakeDockerEngine

    resolved = resolve("glm53-393k", environ=os.environ)
    gpus, host = FakeGpuInventory.scenario("foreign_pid"), FakeHostProbe()
    engine = FakeDockerEngine(images=[resolved.plan.docker.image])
    with pytest.raises(PreflightFailed, match=r"preflight gpu\.exclusive"):
        check_start(resolved, docker=engine, gpus=gpus, host=host, history=History(tmp_path, clock=time.time))
    seen = []
    check_start(
        resolved,
        docker=engine,
        gpus=gpus,
        host=host,
        history=History(tmp_path, clock=time.time),
        skip={
            "gpu.exclusive",
            "gpu.vram_reserve",
            "model.present",
            "model.revision",
            "image.pinned",
            "docker.gpu_runtime",
            "host.disk",
            "host.memory",
        },
        on_report=seen.append,
    )
    (report,) = seen
    assert report.check("gpu.exclusive").result == "skipped"
    forced = [e for e in History(tmp_path, clock=time.time).events() if e.get("event") == "preflight-forced"]
    assert forced and forced[-1]["checks"]["gpu.exclusive"] == "fail"
