"""The gateway's /ui dashboard in a real headless Chromium (Debian's package), in front of stand-in services
on the real Docker engine: `servectl up`, `servectl gateway run`, requests, a `servectl swap`; the browser
loads /ui, takes the key in its form, and must show the aliases, services, cards, requests, swap history and
the engine's (redacted) log. The key, the engine's key and the prompt must appear nowhere: not in the page,
not in the gateway's log. A screenshot goes to the test's folder and, when ``SERVECTL_TEST_ARTIFACTS`` is set
(scripts/test.sh sets it), into that folder.

Without Chromium the test skips, unless ``CI`` or ``SERVECTL_REQUIRE_BROWSER`` is set.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from servectl.standin.process import free_port
from servectl.testing.browser import HeadlessChromium, chromium_missing
from servectl.testing.docker import write_test_profile

pytestmark = pytest.mark.integration

SRC = str(Path(__file__).resolve().parents[2] / "src")
PROMPT = "tell nobody about the violet harbour"
ENGINE_KEY = "engine-only-key-5f1e2d9c"


@pytest.fixture(scope="module")
def chromium() -> None:
    why = chromium_missing()
    if why is not None:
        if os.environ.get("CI") or os.environ.get("SERVECTL_REQUIRE_BROWSER"):
            pytest.fail(why)
        pytest.skip(why)


class Stand:
    """Two stand-in profiles on one port (alias ``chat`` spans both), their state folder and a gateway."""

    def __init__(self, tmp: Path, image: str, session: str) -> None:
        self.tmp, self.folder, self.home = tmp, tmp / "profiles", tmp / "home"
        self.home.mkdir()
        tid = os.urandom(3).hex()
        self.a, self.b = f"ui{tid}-a", f"ui{tid}-b"
        port = free_port()
        for name in (self.a, self.b):
            write_test_profile(
                self.folder, name, port=port, session=session, image={"ref": image},
                model={"served_name": name}, serve={"port": port, "api_key_env": "UI_ENGINE_KEY"},
                engine={"env": {"STANDIN_STARTUP_DELAY_S": "0", "STANDIN_TOKEN_RATE": "2000"}},
                container={"name": f"servectl-{name}", "stop_grace_s": 2},
            )  # fmt: skip
        self.listen = f"127.0.0.1:{free_port()}"
        self.url = f"http://{self.listen}"
        (self.home / "gateway.yaml").write_text(f"listen: '{self.listen}'\naliases: {{chat: [{self.a}, {self.b}]}}\n")
        self.env = {**os.environ, "PYTHONPATH": SRC, "SERVECTL_HOME": str(self.home),
                    "SERVECTL_PROFILES": str(self.folder), "UI_ENGINE_KEY": ENGINE_KEY}  # fmt: skip
        self.gateway: subprocess.Popen[bytes] | None = None
        self.gateway_log = tmp / "gateway.log"

    def servectl(self, *args: str, timeout: float = 240) -> str:
        done = subprocess.run([sys.executable, "-m", "servectl", *args], capture_output=True, text=True,
                              env=self.env, cwd=self.tmp, timeout=timeout, check=False)  # fmt: skip
        assert done.returncode == 0, f"servectl {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout

    def start_gateway(self) -> None:
        with self.gateway_log.open("wb") as log:
            self.gateway = subprocess.Popen([sys.executable, "-m", "servectl", "gateway", "run"], env=self.env,
                                            cwd=self.tmp, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        deadline = time.monotonic() + 30
        while not _answers(self.url + "/healthz"):
            assert self.gateway.poll() is None, self.gateway_log.read_text()
            assert time.monotonic() < deadline, "the gateway did not answer in 30 s"
            time.sleep(0.2)

    def chat(self, key: str) -> httpx.Response:
        body = {"model": "chat", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 7}
        return httpx.post(self.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"},
                          timeout=30)  # fmt: skip

    def stop(self) -> None:
        if self.gateway is not None and self.gateway.poll() is None:
            self.gateway.terminate()
            self.gateway.wait(timeout=30)
        for name in (self.a, self.b):
            subprocess.run([sys.executable, "-m", "servectl", "down", name], capture_output=True, env=self.env,
                           cwd=self.tmp, timeout=120, check=False)  # fmt: skip


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def stand(tmp_path: Path, docker_client: Any, standin_image: str, test_session_id: str) -> Iterator[Stand]:
    s = Stand(tmp_path, standin_image, test_session_id)
    try:
        yield s
    finally:
        s.stop()


def _save(shot: Path) -> Path:
    folder = os.environ.get("SERVECTL_TEST_ARTIFACTS")
    if not folder:
        return shot
    Path(folder).mkdir(parents=True, exist_ok=True)
    kept = Path(folder) / shot.name
    shutil.copyfile(shot, kept)
    return kept


def test_the_dashboard_in_chromium_shows_services_aliases_requests_swaps_and_the_log(
    chromium: None, stand: Stand, tmp_path: Path
) -> None:
    stand.servectl("up", stand.a)
    key = stand.servectl("gateway", "keys", "create", "laptop").strip()
    watcher = stand.servectl("gateway", "keys", "create", "watch", "--read-only").strip()  # the dashboard's key
    stand.start_gateway()
    for _ in range(3):
        assert stand.chat(key).status_code == 200
    stand.servectl("swap", stand.b)
    assert stand.chat(key).status_code == 200
    assert stand.chat("sk-servectl-not-a-key").status_code == 401

    with HeadlessChromium(tmp_path / "chromium-profile") as browser:
        browser.open(stand.url + "/ui")
        browser.wait_for("return !document.getElementById('signin').hidden", what="the key form")
        browser.type("#key", "sk-servectl-wrong")
        browser.click("#keysubmit")
        browser.wait_for("return document.getElementById('signin-error').innerText", what="the refusal")
        assert "unknown key" in browser.text("#signin-error")
        browser.type("#key", watcher)
        browser.click("#keysubmit")
        browser.wait_for(
            "return document.querySelector('#log').innerText.includes('fired up')", what="the engine log", timeout_s=60
        )
        time.sleep(3.5)  # one more refresh: the page polls every 3 s
        shot = _save(browser.screenshot(tmp_path / "gateway-dashboard.png"))
        print(f"dashboard screenshot: {shot}")
        aliases, services = browser.rows("aliases"), browser.rows("services")
        requests, history, gpus = browser.rows("requests"), browser.rows("history"), browser.rows("gpus")
        log, who, source = browser.text("#log"), browser.text("#who"), browser.page_source()

    (tmp_path / "dashboard-log.txt").write_text(log)
    assert aliases == [["chat", f"{stand.a} | {stand.b}", stand.b, "ready", "0", "0"]]
    assert [r[0] for r in services] == [stand.b] and services[0][1] == stand.b and services[0][3] == "ready"
    assert who == "key: watch"
    assert [(r[1], r[2], r[4]) for r in requests] == [("-", "-", "401")] + [("chat", "laptop", "200")] * 4
    assert all(r[3] == "/v1/chat/completions" and r[5].endswith(" ms") for r in requests)
    assert [r[7] for r in requests[1:]] == ["7"] * 4  # tokens from the engine's usage
    events = [(r[1], r[2], r[3]) for r in history]
    assert events[0] == ("swap", stand.b, stand.a) and ("up", stand.a, "-") in events
    assert gpus and all(len(r) in (2, 5) for r in gpus)  # a card per row, or "unknown" and why without NVML
    if gpus[0][0] == "unknown":
        assert gpus[0][1].startswith("NVML unavailable")
    assert "Uvicorn running on" in log and "api_key='***'" in log
    gateway_log = stand.gateway_log.read_text()
    for secret in (key, watcher, ENGINE_KEY, PROMPT):
        assert secret not in source and secret not in log and secret not in gateway_log
    assert "alias=chat key=laptop status=200" in gateway_log
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
