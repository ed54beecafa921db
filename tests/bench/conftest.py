"""Run the stand-in engine as a host subprocess (no Docker) for bench tests."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO

import httpx
import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
StartStandin = Callable[..., str]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def start_standin(tmp_path: Path) -> Iterator[StartStandin]:
    """``start_standin(STANDIN_TOKEN_RATE="500", ...)``: URL of a ready stand-in, stopped after the test."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "hidden_size": 512,
                "num_hidden_layers": 4,
                "num_attention_heads": 8,
                "vocab_size": 32000,
                "max_position_embeddings": 400000,
                "torch_dtype": "bfloat16",
            }
        )
    )
    started: list[subprocess.Popen[bytes]] = []
    logs: list[IO[bytes]] = []

    def start(**standin_env: str) -> str:
        port = _free_port()
        env: Mapping[str, str] = {
            **os.environ,
            "PYTHONPATH": str(SRC),
            "STANDIN_STARTUP_DELAY_S": "0",
            **standin_env,
        }
        log = (tmp_path / f"standin-{port}.log").open("wb")
        logs.append(log)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "servectl.standin",
                "--model-path",
                str(model_dir),
                "--served-model-name",
                "standin-model",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--context-length",
                "400000",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        started.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"stand-in exited with {proc.returncode}: {log.name}")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    return url
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"stand-in on port {port} did not become healthy; see {log.name}")

    yield start
    for proc in started:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for log in logs:
        log.close()
