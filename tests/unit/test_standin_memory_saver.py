"""The stand-in's memory saver, as a host process: SGLang's release/resume routes over its fake GPU ledger."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from servectl_ci.sglang_venv import is_built, venv_python

from servectl.adapters.gpu import MIB
from servectl.profile.memory_saver import extract, load_memory_saver
from servectl.standin.memory import CONTEXT_BYTES
from servectl.standin.process import HostStandin
from servectl.testing.standin_gpu import StandinGpuInventory, StandinOnCards

DEMO_MODEL = str(Path(__file__).parents[2] / "examples" / "demo-model")
SAVER = load_memory_saver()
RELEASE = SAVER["endpoints"]["release"]["path"]
RESUME = SAVER["endpoints"]["resume"]["path"]
ALL = {"tags": ["weights", "kv_cache"]}
ASK = {"messages": [{"role": "user", "content": "Say something."}], "max_tokens": 4, "temperature": 0}


@pytest.fixture
def saver_engine(request: pytest.FixtureRequest) -> Iterator[httpx.Client]:
    flags, env = getattr(request, "param", (("--enable-memory-saver", "--enable-weights-cpu-backup"), {}))
    with HostStandin(
        ["--model-path", DEMO_MODEL, *flags], env={"STANDIN_TOKEN_RATE": "2000", "STANDIN_STARTUP_DELAY_S": "0", **env}
    ) as proc:
        proc.wait_ready()
        with httpx.Client(base_url=proc.base_url, timeout=10) as client:
            yield client


def gpu(client: httpx.Client) -> dict[str, Any]:
    memory: dict[str, Any] = client.get("/get_server_info").json()["standin"]["gpu_memory"]
    return memory


def answer(client: httpx.Client) -> str:
    text: str = client.post("/v1/chat/completions", json=ASK).json()["choices"][0]["message"]["content"]
    return text


def test_the_catalog_names_sglangs_routes_body_and_flags_with_their_source() -> None:
    assert (RELEASE, RESUME) == ("/release_memory_occupation", "/resume_memory_occupation")
    assert SAVER["endpoints"]["release"]["source"].startswith("sglang/srt/entrypoints/http_server.py:")
    assert SAVER["requests"]["ReleaseMemoryOccupationReqInput"]["fields"]["tags"]["default"] is None
    assert {"weights", "kv_cache"} <= set(SAVER["tags"]["all"])
    assert set(SAVER["flags"]) == {"--enable-memory-saver", "--enable-weights-cpu-backup"}


def test_release_frees_weights_and_kv_then_resume_takes_them_back_with_the_same_answer(
    saver_engine: httpx.Client,
) -> None:
    client = saver_engine
    before, full = answer(client), gpu(client)
    assert full["held_bytes_per_rank"][0] > CONTEXT_BYTES + full["region_bytes_per_rank"]["weights"]
    released = client.post(RELEASE, json=ALL)
    assert (released.status_code, released.json()) == (200, None)
    after = gpu(client)
    assert after["held_bytes_per_rank"] == [CONTEXT_BYTES + full["region_bytes_per_rank"]["cuda_graph"]]
    assert after["released_tags"] == ["kv_cache", "weights"]
    assert after["host_backup_bytes"] == full["region_bytes_per_rank"]["weights"]
    resumed = client.post(RESUME, json=ALL)
    assert (resumed.status_code, resumed.json()) == (200, None)
    back = gpu(client)
    assert back["held_bytes_per_rank"] == full["held_bytes_per_rank"] and back["host_backup_bytes"] == 0
    assert back["last_resume_s"] is not None and back["last_resume_s"] >= 0.5
    assert answer(client) == before and "!" not in before


@pytest.mark.parametrize("saver_engine", [((), {})], indirect=True)
def test_without_the_memory_saver_a_release_answers_200_and_frees_nothing(saver_engine: httpx.Client) -> None:
    full = gpu(saver_engine)["held_bytes_per_rank"]
    assert saver_engine.post(RELEASE, json=ALL).status_code == 200
    assert gpu(saver_engine)["held_bytes_per_rank"] == full


@pytest.mark.parametrize("saver_engine", [(("--enable-memory-saver",), {})], indirect=True)
def test_without_the_cpu_backup_resumed_weights_are_garbage(saver_engine: httpx.Client) -> None:
    assert saver_engine.post(RELEASE, json=ALL).status_code == 200
    assert saver_engine.post(RESUME, json=ALL).status_code == 200
    assert answer(saver_engine) == "!!!!"


@pytest.mark.parametrize(
    "saver_engine",
    [(("--enable-memory-saver", "--enable-weights-cpu-backup"), {"STANDIN_RESUME_FAULT": "fail"})],
    indirect=True,
)
def test_a_failing_resume_is_refused_as_sglang_refuses_and_keeps_the_memory_released(
    saver_engine: httpx.Client,
) -> None:
    saver_engine.post(RELEASE, json=ALL)
    refused = saver_engine.post(RESUME, json=ALL)
    assert refused.status_code == 400 and "failed" in refused.json()["error"]["message"]
    assert gpu(saver_engine)["released_tags"] == ["kv_cache", "weights"]


@pytest.mark.parametrize(
    "saver_engine",
    [(("--enable-memory-saver", "--enable-weights-cpu-backup"), {"STANDIN_RESUME_FAULT": "wrong"})],
    indirect=True,
)
def test_commanded_wrong_output_after_a_resume(saver_engine: httpx.Client) -> None:
    saver_engine.post(RELEASE, json=ALL)
    assert saver_engine.post(RESUME, json=ALL).status_code == 200
    assert gpu(saver_engine)["released_tags"] == []
    assert answer(saver_engine) == "!!!!"


@pytest.mark.parametrize(
    "saver_engine",
    [(("--enable-memory-saver", "--enable-weights-cpu-backup"), {"STANDIN_RELEASE_FAULT": "keep"})],
    indirect=True,
)
def test_commanded_release_that_answers_200_and_frees_nothing(saver_engine: httpx.Client) -> None:
    full = gpu(saver_engine)["held_bytes_per_rank"]
    assert saver_engine.post(RELEASE, json=ALL).status_code == 200
    assert gpu(saver_engine)["held_bytes_per_rank"] == full


@pytest.mark.skipif(
    not is_built() and not os.environ.get("SERVECTL_REQUIRE_SGLANG_PARSER"),
    reason="the SGLang 0.5.23 parser venv is not built (CI builds it and sets SERVECTL_REQUIRE_SGLANG_PARSER)",
)
def test_the_shipped_memory_saver_catalog_is_what_the_sglang_source_says() -> None:
    python = venv_python()
    code = "import importlib.util as u; print(list(u.find_spec('sglang').submodule_search_locations)[0])"
    root = Path(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip())
    assert extract(root.parent, SAVER["version"]) == SAVER, "stale: python scripts/extract_sglang_catalogs.py"


def test_the_standin_gpu_inventory_sees_the_memory_leave_the_card_and_return(saver_engine: httpx.Client) -> None:
    url = str(saver_engine.base_url).rstrip("/")
    nvml = StandinGpuInventory(lambda: [StandinOnCards(url, (1,))], cards=2)
    full = gpu(saver_engine)
    assert nvml.used_mib(0) == 0
    assert nvml.used_mib(1) == full["held_bytes_per_rank"][0] // MIB
    saver_engine.post(RELEASE, json=ALL)
    device = nvml.snapshot().device(1)
    assert device is not None and device.processes is not None and len(device.processes) == 1
    assert nvml.used_mib(1) == (CONTEXT_BYTES + full["region_bytes_per_rank"]["cuda_graph"]) // MIB
    saver_engine.post(RESUME, json=ALL)
    assert nvml.used_mib(1) == full["held_bytes_per_rank"][0] // MIB
    gone = StandinGpuInventory(lambda: [StandinOnCards("http://127.0.0.1:9", (0,))], cards=1)
    assert gone.used_mib(0) == 0
