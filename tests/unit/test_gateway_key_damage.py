"""Issue 39 (8): a damaged key file is said - one log line, ``gateway status`` - and the gateway answers in its
own shape (401/503 ``keys_unreadable``), never 500 with a traceback."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from servectl.adapters.gateway_admin import gateway_status
from servectl.cli.views.gateway import gateway_lines
from servectl.gateway.config import GatewayConfig
from servectl.gateway.keys import KeyRing, create_key
from servectl.standin.process import free_port
from servectl.testing.gateway import GatewayThread


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:20])


def _not_utf8(path: Path) -> None:
    path.write_bytes(b'{"keys": [\xff\xfe]}')


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _loop(path: Path) -> None:
    path.unlink()
    path.symlink_to(path)


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "truncated": (_truncate, "not valid JSON"),
    "not utf-8": (_not_utf8, "not text"),
    "fifo": (_fifo, "FIFO"),
    "folder": (_folder, "folder"),
    "link loop": (_loop, "symbolic link loop"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_key_file_is_said_once_and_only_the_keys_read_before_pass(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "keys.json"
    key, _ = create_key(path, name="a", clock=time.time)
    ring = KeyRing(path, recheck_s=0, clock=time.time)
    assert ring.check(key) is not None
    spoil, said = DAMAGE[damage]
    spoil(path)
    with caplog.at_level(logging.WARNING, logger="servectl.gateway"):
        assert ring.check(key) is not None  # read before: still in force
        assert ring.check("sk-servectl-unknown") is None and ring.check("sk-servectl-other") is None
    assert ring.error is not None and said in ring.error and str(path) in ring.error
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and said in warnings[0] and "1 keys read before stay in force" in warnings[0]


@pytest.mark.parametrize("damage", ["link loop", "truncated"])
def test_a_gateway_whose_key_file_is_damaged_answers_503_in_its_own_shape_and_says_why(
    tmp_path: Path, damage: str
) -> None:
    keys = tmp_path / "keys.json"
    key, _ = create_key(keys, name="a", clock=time.time)
    DAMAGE[damage][0](keys)
    config = GatewayConfig.model_validate(
        {"listen": f"127.0.0.1:{free_port()}", "aliases": {"chat": ["demo"]}, "keys_file": str(keys)}
    )
    with GatewayThread(config, upstreams=lambda: [], state_dir=tmp_path) as gw:
        body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
        answer = httpx.post(
            gw.base_url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=10
        )
        ui = httpx.get(gw.base_url + "/ui/api/overview", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        bare = httpx.post(gw.base_url + "/v1/chat/completions", json=body, timeout=10)
        status = gateway_status(tmp_path)
    assert answer.status_code == 503 and answer.headers["X-Servectl-Reason"] == "keys_unreadable"
    assert answer.json()["error"]["code"] == "keys_unreadable" and "gateway status" in answer.json()["error"]["message"]
    assert ui.status_code == 503 and ui.json()["error"]["code"] == "keys_unreadable"
    assert bare.status_code == 401
    assert status is not None and str(keys) in status["keys_error"]
    said = "  key file unreadable (only the keys read before pass): "
    assert any(line.startswith(said) for line in gateway_lines(status))


def test_gateway_status_says_how_to_start_a_killed_gateway_container_again() -> None:
    """Issue 39 (14): after ``docker kill`` the container stays exited and status gave no hint."""
    from servectl.cli.views.gateway import container_line

    assert container_line("c0ffee" * 4, "servectl-gateway:1", "running") == [
        "gateway container c0ffeec0ffee (servectl-gateway:1) running"
    ]
    assert container_line("c0ffee" * 4, "servectl-gateway:1", "exited") == [
        "gateway container c0ffeec0ffee (servectl-gateway:1) exited",
        "  the gateway container is exited, not serving; start it again: servectl gateway up",
    ]
