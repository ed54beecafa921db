"""The gateway in front of a warm standby pair: clients keep their alias and no request fails while swap goes
b -> a -> b with ``a`` released to standby and resumed (its container never restarts).

The gateway world of ``test_gateway_docker`` (its container, key and CLI helpers), with its two profiles
rewritten: ``a`` keeps a warm standby, each has its own port (the standby keeps its own), and both are on
card 0 by their ``servectl.gpus`` label (no GPU request reaches Docker), so each swap replaces the other.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from test_gateway_docker import Rounds, World, _chat

from servectl.standin.process import free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, docker_client: Any, standin_image: str,
         test_session_id: str) -> Iterator[World]:  # fmt: skip
    w = World(tmp_path_factory.mktemp("standby-gateway"), docker_client, standin_image, test_session_id)
    for name, warm in ((w.a, True), (w.b, False)):
        path = w.profiles / f"{name}.yaml"
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        doc["serve"] = {"port": free_port()}
        doc["container"]["labels"] = {**doc["container"]["labels"], "servectl.gpus": "0"}  # one (fake) card
        if warm:
            doc["swap"] = {"standby": "warm"}
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    try:
        w.start()
        yield w
    finally:
        w.cleanup()


def test_no_request_fails_while_a_warm_standby_is_released_and_resumed_behind_the_gateway(pair: World) -> None:
    a_id = pair.client.containers.get(f"gwtest-{pair.tid}-{pair.a}").id
    sdk = pair.sdk()

    def chat_round(n: int) -> None:
        text = _chat(sdk, stream=n % 2 == 0)
        assert "!" not in text, f"answer {text!r}: released weights answered"  # never an answer of released weights

    with Rounds(chat_round) as chat:
        time.sleep(1.0)
        for target, a_state in ((pair.b, "standby"), (pair.a, "ready"), (pair.b, "standby")):
            status = pair.swap(target)[2]
            assert any(line.split()[:2] == [pair.a, a_state] for line in status.splitlines()), status
            time.sleep(0.5)
    assert chat.failures == []
    assert len(chat.done) > 20
    assert pair.client.containers.get(f"gwtest-{pair.tid}-{pair.a}").id == a_id  # released and resumed, never restarted
