"""The stand-in's memory saver, as a host process: SGLang's release/resume routes over its fake GPU ledger."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from servectl_ci.sglang_venv import is_built, venv_python

from servectl.adapters.gpu import MIB
from servectl.adapters.http import StandardHttp
from servectl.errors import ServectlError
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
    fresh = extract(root.parent, SAVER["version"], python=str(python))
    assert fresh == SAVER, "stale: python scripts/extract_sglang_catalogs.py"


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


# -- what kills SGLang kills the stand-in (issue 38) ------------------------------------------------------------
CRASH = SAVER["crash"]
SIGQUIT_HEAD = CRASH["sigquit"]["template"].split("{")[0]  # "SIGQUIT received. signum="


def _started(env: dict[str, str] | None = None, flags: tuple[str, ...] = ()) -> HostStandin:
    proc = HostStandin(
        ["--model-path", DEMO_MODEL, "--enable-memory-saver", "--enable-weights-cpu-backup", *flags],
        env={"STANDIN_TOKEN_RATE": "2000", "STANDIN_STARTUP_DELAY_S": "0", **(env or {})},
    )
    proc.start()
    proc.wait_ready()
    return proc


def _dies_without_answer(proc: HostStandin, path: str, body: dict[str, Any]) -> str:
    """POST ``body``; the server answers nothing and exits 137; its log from the call on."""
    before = len(proc.lines)
    with httpx.Client(base_url=proc.base_url, timeout=10) as client, pytest.raises(httpx.TransportError):
        client.post(path, json=body)
    assert proc.wait(10) == CRASH["exit_status"] == 137
    return "\n".join(proc.lines[before:])


def test_a_release_while_a_request_runs_kills_the_server_with_sglangs_lines() -> None:
    with _started({"STANDIN_TOKEN_RATE": "20"}) as proc:
        cut: list[BaseException] = []

        def ask_long() -> None:
            try:
                httpx.post(proc.base_url + "/v1/chat/completions", json={**ASK, "max_tokens": 200}, timeout=30)
            except httpx.TransportError as err:  # the server dies under it
                cut.append(err)

        slow = threading.Thread(target=ask_long, daemon=True)
        slow.start()
        time.sleep(0.5)
        log = _dies_without_answer(proc, RELEASE, ALL)
        slow.join(10)
    assert cut, "the running request was not cut"
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log
    assert f"AssertionError: {SAVER['release_requires_idle']['message']}" in log
    assert SIGQUIT_HEAD in log and "It usually means one child failed." in log


def test_a_second_release_ends_the_scheduler_as_torch_memory_saver_does() -> None:
    with _started() as proc:
        assert httpx.post(proc.base_url + RELEASE, json=ALL, timeout=10).status_code == 200
        log = _dies_without_answer(proc, RELEASE, {"tags": ["weights"]})
    assert SAVER["library"]["pause_paused"] in log
    assert "Subprocess scheduler_0 (pid=" in log and "crashed with exit code 1. Triggering SIGQUIT" in log
    assert SIGQUIT_HEAD in log


def test_a_resume_of_what_was_not_released_kills_the_server_with_a_keyerror() -> None:
    with _started() as proc:
        log = _dies_without_answer(proc, RESUME, ALL)
    assert "Scheduler hit an exception" in log and "KeyError: 'weights'" in log
    assert "self.offload_tags.remove(tag)" in log and SIGQUIT_HEAD in log


def test_bodies_fastapi_refuses_are_422_with_its_detail(saver_engine: httpx.Client) -> None:
    empty = saver_engine.post(RELEASE, content=b"")
    assert (empty.status_code, empty.json()) == (
        422,
        {"detail": [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": None}]},
    )
    wrong = saver_engine.post(RESUME, json={"tags": "weights"})
    assert wrong.status_code == 422
    assert [(e["type"], e["loc"][0], e["loc"][2:], e["input"]) for e in wrong.json()["detail"]] == [
        ("is_instance_of", "body", [], {"tags": "weights"}),
        ("list_type", "body", ["tags"], "weights"),
    ]
    number = saver_engine.post(RELEASE, json={"tags": ["weights", 7]}).json()["detail"]
    assert (number[1]["type"], number[1]["loc"][2:], number[1]["input"]) == ("string_type", ["tags", 1], 7)
    assert saver_engine.get(RELEASE).status_code == 422  # a GET without a body, too
    assert gpu(saver_engine)["released_tags"] == []  # nothing was released by any of them


def test_a_release_of_the_kv_cache_logs_that_the_cache_was_flushed() -> None:
    with _started() as proc:
        httpx.post(proc.base_url + RELEASE, json={"tags": ["weights"]}, timeout=10)
        assert not any("Cache flushed successfully!" in line for line in proc.lines)
        httpx.post(proc.base_url + RELEASE, json={"tags": ["kv_cache"]}, timeout=10)
        assert any(line.endswith("TP0] Cache flushed successfully!") for line in proc.lines)


@pytest.mark.parametrize("graph_env", [None, "1"])
def test_the_cuda_graph_tag_frees_graph_memory_only_with_sglangs_variable(graph_env: str | None) -> None:
    env = {} if graph_env is None else {"SGLANG_MEMORY_SAVER_CUDA_GRAPH": graph_env}
    with _started(env) as proc, httpx.Client(base_url=proc.base_url, timeout=10) as client:
        full = gpu(client)
        assert client.post(RELEASE, json={"tags": ["cuda_graph"]}).status_code == 200
        held = gpu(client)["held_bytes_per_rank"][0]
        graph = full["region_bytes_per_rank"]["cuda_graph"]
        assert graph > 0
        assert held == full["held_bytes_per_rank"][0] - (graph if graph_env else 0)
        assert client.post(RESUME, json={"tags": ["cuda_graph"]}).status_code == 200  # released either way


def test_a_release_with_the_cpu_copy_takes_time_in_proportion_to_the_weights() -> None:
    env = {"STANDIN_BACKUP_GBPS": "2", "STANDIN_RELEASE_S": "0", "STANDIN_RESUME_S": "0"}
    with _started(env) as proc, httpx.Client(base_url=proc.base_url, timeout=30) as client:
        weights = gpu(client)["region_bytes_per_rank"]["weights"]
        expected = weights / 2e9
        began = time.monotonic()
        client.post(RELEASE, json=ALL)
        took = time.monotonic() - began
        reported = gpu(client)["last_release_s"]
    assert expected > 0.05
    assert expected <= reported <= took and took < expected + 1.0


#: A warm engine with an API key and an admin key.
KEYED = ("--enable-memory-saver", "--enable-weights-cpu-backup", "--api-key", "sk-user", "--admin-api-key", "sk-adm")


@pytest.mark.parametrize("saver_engine", [(KEYED, {})], indirect=True)
def test_with_an_admin_key_the_memory_saver_routes_take_it_and_not_the_api_key(saver_engine: httpx.Client) -> None:
    """SGLang marks release/resume ADMIN_OPTIONAL (the catalog cites the decorator and decide_request_auth): with
    --admin-api-key only that key opens them, while the chat keeps taking the API key."""
    assert SAVER["endpoints"]["release"]["auth"]["level"] == "admin_optional"
    assert SAVER["endpoints"]["resume"]["auth"]["rule"].startswith("sglang/srt/utils/auth.py:")
    user, admin = {"Authorization": "Bearer sk-user"}, {"Authorization": "Bearer sk-adm"}
    assert saver_engine.post(RELEASE, json=ALL, headers=user).status_code == 401
    assert saver_engine.post("/v1/chat/completions", json=ASK, headers=admin).status_code == 401
    assert saver_engine.post("/v1/chat/completions", json=ASK, headers=user).status_code == 200
    assert saver_engine.post(RELEASE, json=ALL, headers=admin).status_code == 200
    assert saver_engine.post(RESUME, json=ALL, headers=admin).status_code == 200


@pytest.mark.parametrize("saver_engine", [(KEYED, {})], indirect=True)
def test_servectl_sends_the_admin_key_to_the_memory_saver_and_the_api_key_elsewhere(saver_engine: httpx.Client) -> None:
    """A warm profile whose engine has --admin-api-key: servectl's engine client releases and resumes with that key
    (serve.admin_api_key_env, read by EngineClient.of: tests/unit/test_admin_key.py) and reads the load and the
    fingerprint with the API key."""
    import time

    from servectl.service.standby_engine import EngineClient

    url = str(saver_engine.base_url).rstrip("/")
    user = {"Authorization": "Bearer sk-user"}
    engine = EngineClient(url, user, StandardHttp(), lambda s: None, "sk-adm")
    before = engine.fingerprint("w", time.monotonic)
    assert engine.running("w") == 0

    def held() -> int:
        info = saver_engine.get("/get_server_info", headers=user).json()
        return int(info["standin"]["gpu_memory"]["held_bytes_per_rank"][0])

    before_bytes = held()
    engine.call("release", "w", timeout_s=10)
    assert held() < before_bytes
    engine.call("resume", "w", timeout_s=10)
    assert engine.fingerprint("w", time.monotonic) == before
    plain = EngineClient(url, user, StandardHttp(), lambda s: None)  # the API key alone: SGLang refuses it there
    with pytest.raises(ServectlError, match="answered 401"):
        plain.call("release", "w", timeout_s=10)
