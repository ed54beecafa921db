"""The stand-in engine as a host process: startup log, health, models, chat completions, injected faults."""

from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from servectl.standin import READY_LINE, SPARSE_MLA_LINE
from servectl.standin.process import HostStandin
from servectl.standin.tokens import count_text_tokens

DEMO_MODEL = str(Path(__file__).parents[2] / "examples" / "demo-model")
CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "Hello, world!"}]  # 4 tokens + 4 template tokens
HELLO_PROMPT_TOKENS = 8


def started(*flags: str, **env: str) -> HostStandin:
    return HostStandin(["--model-path", DEMO_MODEL, *flags], env=env).start()


@pytest.fixture
def engine() -> Iterator[HostStandin]:
    with HostStandin(["--model-path", DEMO_MODEL], env={"STANDIN_TOKEN_RATE": "2000"}) as proc:
        proc.wait_ready()
        yield proc


def sse_events(response: httpx.Response) -> list[Any]:
    events: list[Any] = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


# -- startup -------------------------------------------------------------------------------------------------


def test_startup_log_walks_sglang_phases_in_order_then_ready_line() -> None:
    with HostStandin(["--model-path", DEMO_MODEL], env={"STANDIN_STARTUP_DELAY_S": "0.5"}) as proc:
        proc.wait_ready()
        lines = list(proc.lines)
    markers = [
        "] server_args=ServerArgs(model_path=",
        " TP0] Load weight begin. avail mem=",
        "Loading safetensors checkpoint shards:  50% Completed | 2/4 [",
        " TP0] Load weight end. elapsed=",
        " TP0] KV Cache is allocated. dtype: ",
        " TP0] Capture target decode CUDA graph begin.",
        " TP0] Capture target decode CUDA graph end. bs=",
        f"] INFO:     Uvicorn running on http://127.0.0.1:{proc.port} (Press CTRL+C to quit)",
        f"] {READY_LINE}",
    ]
    positions = [next(i for i, line in enumerate(lines) if marker in line) for marker in markers]
    assert positions == sorted(positions)
    assert lines[-1].endswith(READY_LINE)
    stamp = lines[0][: len("[2026-11-30 10:00:00]")]
    assert time.strptime(stamp, "[%Y-%m-%d %H:%M:%S]")


def test_health_is_503_while_starting_and_200_once_ready() -> None:
    with HostStandin(["--model-path", DEMO_MODEL], env={"STANDIN_STARTUP_DELAY_S": "1.5"}) as proc:
        proc.wait_for_line("Load weight begin")
        with httpx.Client(base_url=proc.base_url) as client:
            assert client.get("/health").status_code == 503
            assert client.get("/ready").json()["status"] == "starting"
            refused = client.post(CHAT, json={"messages": HELLO, "max_tokens": 1})
            assert refused.status_code == 503
            proc.wait_ready()
            assert client.get("/health").status_code == 200
            assert client.get("/health_generate").status_code == 200
            assert client.get("/ready").json() == {"status": "ready", "phase": "ready"}


def test_sparse_mla_decode_backend_is_logged() -> None:
    with started("--dsa-decode-backend", "flashinfer_sparse_mla") as proc:
        proc.wait_ready()
        line = proc.wait_for_line("Set DSA backends for GLM FP8 KV Cache")
        assert "decode=flashinfer_sparse_mla." in line
        assert line.endswith(SPARSE_MLA_LINE)
        assert line.index(SPARSE_MLA_LINE) > 0  # after SGLang's timestamp prefix, as the gate reads it


def test_extra_log_lines_come_just_before_the_ready_line() -> None:
    with started(STANDIN_EXTRA_LOG="custom one|custom two") as proc:
        proc.wait_ready()
        lines = list(proc.lines)
    ready = next(i for i, line in enumerate(lines) if READY_LINE in line)
    assert lines[ready - 2 : ready] == ["custom one", "custom two"]


def test_listen_at_uvicorn_refuses_connections_until_the_uvicorn_line() -> None:
    with started(STANDIN_LISTEN_AT="uvicorn", STANDIN_STARTUP_DELAY_S="1.0") as proc:
        proc.wait_for_line("Load weight begin")
        with pytest.raises(httpx.ConnectError):
            httpx.get(proc.base_url + "/health")
        proc.wait_ready()
        assert httpx.get(proc.base_url + "/health").status_code == 200


def test_port_in_use_exits_1_with_uvicorn_bind_error() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = HostStandin(["--model-path", DEMO_MODEL], port=port).start()
        try:
            assert proc.wait(10) == 1
            assert "ERROR:    [Errno 98] error while attempting to bind on address" in "\n".join(proc.lines)
        finally:
            proc.stop()


# -- injected startup faults ---------------------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["weights", "kv_cache", "cuda_graph", "warmup"])
def test_crash_at_phase_exits_with_the_configured_code_after_a_traceback(phase: str) -> None:
    with started(STANDIN_CRASH_AT=phase, STANDIN_CRASH_EXIT_CODE="7") as proc:
        assert proc.wait(10) == 7
        log = "\n".join(proc.lines)
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log
    assert f"RuntimeError: stand-in crash injected at startup phase '{phase}'" in log
    assert READY_LINE not in log


def test_stall_stops_printing_and_health_stays_503() -> None:
    with started(STANDIN_STALL_AT="cuda_graph") as proc:
        proc.wait_for_line("Capture target decode CUDA graph begin")
        count = len(proc.lines)
        time.sleep(0.6)
        assert len(proc.lines) == count
        assert httpx.get(proc.base_url + "/health").status_code == 503


def test_fatal_line_is_printed_and_the_engine_hangs() -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    with started(STANDIN_FATAL_LINE=oom) as proc:
        proc.wait_for_line(oom)
        time.sleep(0.4)
        assert httpx.get(proc.base_url + "/health").status_code == 503
        assert not any("KV Cache is allocated" in line for line in proc.lines)


def test_never_ready_keeps_printing_progress_every_second() -> None:
    with started(STANDIN_NEVER_READY="1") as proc:
        proc.wait_for_line("Capture target decode CUDA graph begin")
        proc.wait_for_line(": 2it [", timeout_s=5)
        assert httpx.get(proc.base_url + "/health").status_code == 503
        assert READY_LINE not in "\n".join(proc.lines)


def test_sigterm_exits_0_within_a_second() -> None:
    proc = started()
    try:
        proc.wait_ready()
        begin = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 0
        assert time.monotonic() - begin < 1.0
        assert proc.lines[-1].endswith(f"INFO:     Finished server process [{proc.pid}]")
    finally:
        proc.stop()


def test_ignore_sigterm_needs_a_kill() -> None:
    proc = started(STANDIN_IGNORE_SIGTERM="1")
    try:
        proc.wait_ready()
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert httpx.get(proc.base_url + "/health").status_code == 200
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(5) == -signal.SIGKILL
    finally:
        proc.stop()


# -- HTTP API ------------------------------------------------------------------------------------------------


def test_models_report_served_name_and_context_length() -> None:
    with started("--served-model-name", "glm-demo", "--context-length", "393216") as proc:
        proc.wait_ready()
        data = httpx.get(proc.base_url + "/v1/models").json()["data"]
    assert [(m["id"], m["max_model_len"]) for m in data] == [("glm-demo", 393216)]


def test_models_default_to_model_path_and_config_context(engine: HostStandin) -> None:
    data = httpx.get(engine.base_url + "/v1/models").json()["data"]
    assert [(m["id"], m["max_model_len"]) for m in data] == [(DEMO_MODEL, 202752)]


def test_chat_completion_returns_exactly_max_tokens_with_counted_usage(engine: HostStandin) -> None:
    body = httpx.post(engine.base_url + CHAT, json={"messages": HELLO, "max_tokens": 12}).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    assert count_text_tokens(choice["message"]["content"]) == 12
    assert body["object"] == "chat.completion"
    assert body["usage"]["prompt_tokens"] == HELLO_PROMPT_TOKENS
    assert body["usage"]["completion_tokens"] == 12
    assert body["usage"]["total_tokens"] == HELLO_PROMPT_TOKENS + 12
    assert "spec_accept_length" not in body["usage"]


def test_chat_without_max_tokens_stops_at_eos_after_min_tokens(engine: HostStandin) -> None:
    plain = httpx.post(engine.base_url + CHAT, json={"messages": HELLO}).json()
    longer = httpx.post(engine.base_url + CHAT, json={"messages": HELLO, "min_tokens": 20}).json()
    assert (plain["usage"]["completion_tokens"], plain["choices"][0]["finish_reason"]) == (16, "stop")
    assert plain["choices"][0]["matched_stop"] == 151329
    assert longer["usage"]["completion_tokens"] == 20


def test_streaming_chat_sends_role_chunk_tokens_finish_usage_and_done(engine: HostStandin) -> None:
    request = {"messages": HELLO, "max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", engine.base_url + CHAT, json=request) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    contents = [c["choices"][0]["delta"]["content"] for c in chunks[1:6]]
    assert [count_text_tokens(c) for c in contents] == [1] * 5
    assert chunks[6]["choices"][0]["finish_reason"] == "length"
    assert chunks[7]["choices"] == []
    assert chunks[7]["usage"]["completion_tokens"] == 5
    assert chunks[7]["usage"]["prompt_tokens"] == HELLO_PROMPT_TOKENS
    assert all(c["usage"] is None for c in chunks[:7])


def test_continuous_usage_stats_count_up_in_every_chunk(engine: HostStandin) -> None:
    request = {
        "messages": HELLO,
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    with httpx.stream("POST", engine.base_url + CHAT, json=request) as response:
        events = sse_events(response)
    counts = [e["usage"]["completion_tokens"] for e in events[:-1]]
    assert counts == [0, 1, 2, 3, 3, 3]


def test_chunks_of_several_tokens_report_speculative_accept_length() -> None:
    with started(STANDIN_CHUNK_TOKENS="4", STANDIN_ACCEPT_LENGTH="3.5", STANDIN_TOKEN_RATE="2000") as proc:
        proc.wait_ready()
        request = {
            "messages": HELLO,
            "max_tokens": 10,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        with httpx.stream("POST", proc.base_url + CHAT, json=request) as response:
            events = sse_events(response)
        generated = httpx.post(
            proc.base_url + "/generate", json={"text": "Hi", "sampling_params": {"max_new_tokens": 7}}
        ).json()
    sizes = [count_text_tokens(e["choices"][0]["delta"].get("content") or "") for e in events[1:-3]]
    assert sizes == [4, 4, 2]
    usage = events[-2]["usage"]
    assert usage["spec_accept_length"] == 3.5
    assert usage["spec_verify_ct"] == 3
    assert usage["completion_tokens_details"]["accepted_prediction_tokens"] == 7
    assert generated["meta_info"]["spec_accept_length"] == 3.5
    assert generated["meta_info"]["completion_tokens"] == 7
    assert generated["meta_info"]["finish_reason"] == {"type": "length", "length": 7}


def test_prompt_longer_than_context_is_a_400_like_sglang() -> None:
    with started("--context-length", "20") as proc:
        proc.wait_ready()
        words = " ".join(["word"] * 30)
        response = httpx.post(proc.base_url + CHAT, json={"messages": [{"role": "user", "content": words}]})
        too_many = httpx.post(proc.base_url + CHAT, json={"messages": HELLO, "max_tokens": 100})
    assert response.status_code == 400
    assert response.json()["message"] == "The input (34 tokens) is longer than the model's context length (20 tokens)."
    assert response.json()["object"] == "error"
    assert too_many.status_code == 400
    assert too_many.json()["message"].startswith(
        "Requested token count exceeds the model's maximum context length of 20 tokens. "
        "You requested a total of 108 tokens"
    )


def test_api_key_guards_everything_but_health() -> None:
    with started("--api-key", "sk-test") as proc:
        proc.wait_ready()
        with httpx.Client(base_url=proc.base_url) as client:
            assert client.get("/health").status_code == 200
            assert client.get("/v1/models").status_code == 401
            assert client.get("/v1/models", headers={"Authorization": "Bearer wrong"}).json() == {
                "error": "Unauthorized"
            }
            auth = {"Authorization": "Bearer sk-test"}
            ok = client.post(CHAT, json={"messages": HELLO, "max_tokens": 1}, headers=auth)
            assert ok.status_code == 200


def test_completion_shortfall_returns_fewer_tokens_than_asked() -> None:
    with started(STANDIN_COMPLETION_SHORTFALL="3", STANDIN_TOKEN_RATE="2000") as proc:
        proc.wait_ready()
        body = httpx.post(proc.base_url + CHAT, json={"messages": HELLO, "max_tokens": 10}).json()
    assert body["usage"]["completion_tokens"] == 7
    assert count_text_tokens(body["choices"][0]["message"]["content"]) == 7
    assert body["choices"][0]["finish_reason"] == "stop"


def test_die_after_tokens_cuts_the_stream_without_done() -> None:
    with started(STANDIN_DIE_AFTER_TOKENS="3", STANDIN_TOKEN_RATE="2000") as proc:
        proc.wait_ready()
        received: list[str] = []
        request = {"messages": HELLO, "max_tokens": 10, "stream": True}
        with (
            pytest.raises(httpx.RemoteProtocolError),
            httpx.stream("POST", proc.base_url + CHAT, json=request) as r,
        ):
            for line in r.iter_lines():
                received.append(line)
        assert httpx.get(proc.base_url + "/health").status_code == 200  # the process lives on
    data = [line for line in received if line.startswith("data: ")]
    assert "data: [DONE]" not in data
    assert len(data) == 1 + 3  # role chunk + three tokens


def test_text_completions_and_unknown_routes(engine: HostStandin) -> None:
    body = httpx.post(engine.base_url + "/v1/completions", json={"prompt": "Say hi", "max_tokens": 4}).json()
    assert body["object"] == "text_completion"
    assert count_text_tokens(body["choices"][0]["text"]) == 4
    assert body["usage"]["prompt_tokens"] == 2
    assert httpx.get(engine.base_url + "/nope").status_code == 404
    assert httpx.get(engine.base_url + CHAT).status_code == 405
    bad = httpx.post(engine.base_url + CHAT, content=b"{oops", headers={"Content-Type": "application/json"})
    assert bad.status_code == 400


def test_server_info_echoes_the_parsed_flags() -> None:
    with started("--tp-size", "2", "--kv-cache-dtype", "fp8_e4m3") as proc:
        proc.wait_ready()
        info = httpx.get(proc.base_url + "/get_server_info").json()
    assert info["tp_size"] == 2
    assert info["kv_cache_dtype"] == "fp8_e4m3"
    assert info["version"] == "0.5.23"


def test_decode_batch_lines_report_accept_length_every_log_interval() -> None:
    env = {"STANDIN_CHUNK_TOKENS": "3", "STANDIN_TOKEN_RATE": "2000"}
    with started("--decode-log-interval", "2", **env) as proc:
        proc.wait_ready()
        httpx.post(proc.base_url + CHAT, json={"messages": HELLO, "max_tokens": 12})
        line = proc.wait_for_line("Decode batch,")
        proc.wait_for_line('"POST /v1/chat/completions HTTP/1.1" 200 OK')
        decode_lines = [entry for entry in proc.lines if "Decode batch," in entry]
    assert " TP0] Decode batch, #running-req: 1, #token: 14, " in line  # 8 prompt + 2 chunks of 3
    assert "accept len: 3.00, " in line
    assert len(decode_lines) == 2  # 4 chunks, one line every 2


# -- speculative decoding checks at startup ------------------------------------------------------------------


def test_adaptive_speculation_accepts_num_steps_on_the_configured_ladder(tmp_path: Path) -> None:
    ladder = tmp_path / "adaptive.json"
    ladder.write_text(json.dumps({"1": {"candidate_steps": [3, 5]}}))
    flags = [
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-steps",
        "3",
    ]
    flags += ["--speculative-adaptive", "--speculative-adaptive-config", str(ladder)]
    with started(*flags) as proc:
        proc.wait_ready()
        assert proc.wait_for_line("AdaptiveSpeculativeParams initialized: steps=3, candidate_steps=[3, 5]")


def test_adaptive_speculation_fails_startup_when_num_steps_is_off_the_ladder(tmp_path: Path) -> None:
    ladder = tmp_path / "adaptive.json"
    ladder.write_text(json.dumps({"1": {"candidate_steps": [3, 5]}}))
    flags = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "4", "--speculative-adaptive"]
    flags += ["--speculative-adaptive-config", str(ladder)]
    proc = started(*flags)
    try:
        assert proc.wait(10) == 1
        assert proc.stderr_text.rstrip().endswith(
            "ValueError: speculative_num_steps=4 is not one of the adaptive candidate steps [3, 5]"
        )
    finally:
        proc.stop()


def test_adaptive_speculation_with_a_missing_config_file_fails_startup(tmp_path: Path) -> None:
    flags = ["--speculative-algorithm", "EAGLE3", "--speculative-adaptive"]
    flags += ["--speculative-adaptive-config", str(tmp_path / "absent.json")]
    proc = started(*flags)
    try:
        assert proc.wait(10) == 1
        assert "FileNotFoundError: speculative adaptive config" in proc.stderr_text
    finally:
        proc.stop()


def test_adaptive_speculation_without_eagle_falls_back_with_a_warning() -> None:
    with started("--speculative-algorithm", "NGRAM", "--speculative-adaptive") as proc:
        proc.wait_ready()
        warning = proc.wait_for_line("speculative_adaptive disabled: only EAGLE/EAGLE3")
    assert warning.endswith("Falling back to static speculative params.")
