"""A real headless Chromium for tests, driven through chromedriver's W3C WebDriver protocol (plain HTTP).

Debian's ``chromium`` and ``chromium-driver`` packages (``apt-get install -y chromium chromium-driver``); no
browser download, no npm, no selenium: the few WebDriver calls a test needs are made with httpx. Chromium
gets a fresh profile folder and the flags that keep it off the network (no sync, no component updates, no
background fetches)::

    with HeadlessChromium(tmp_path / "profile") as browser:
        browser.open("http://127.0.0.1:8080/ui")
        browser.type("#key", key)
        browser.screenshot(tmp_path / "ui.png")
"""

from __future__ import annotations

import base64
import contextlib
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from servectl.standin.process import free_port

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1300",
)
_ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference


def chromium_missing() -> str | None:
    """Why no browser test can run here (None: Chromium and chromedriver are installed)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(p) is None]
    return f"{' and '.join(missing)} not installed: apt-get install -y chromium chromium-driver" if missing else None


class HeadlessChromium:
    """One chromedriver and one browser session; leaving the block ends both."""

    def __init__(self, profile_dir: Path, *, timeout_s: float = 30.0) -> None:
        self.profile_dir = Path(profile_dir)
        self.timeout_s = timeout_s
        self.port = free_port()
        self._driver: subprocess.Popen[bytes] | None = None
        self._http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=60)
        self._session = ""

    def __enter__(self) -> HeadlessChromium:
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        log = self.profile_dir.parent / "chromedriver.log"
        with log.open("wb") as out:  # the driver keeps its own copy of the descriptor
            self._driver = subprocess.Popen(
                [CHROMEDRIVER, f"--port={self.port}", "--allowed-ips=127.0.0.1"], stdout=out, stderr=out
            )
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                if self._http.get("/status").json()["value"]["ready"]:
                    break
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            if self._driver.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError(f"chromedriver did not start (see {log})")
            time.sleep(0.1)
        options = {"binary": CHROMIUM, "args": [*FLAGS, f"--user-data-dir={self.profile_dir}"]}
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}}
        self._session = self._call("POST", "/session", caps)["sessionId"]
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._session:
            with contextlib.suppress(httpx.HTTPError):
                self._http.delete(f"/session/{self._session}")
            self._session = ""
        if self._driver is not None and self._driver.poll() is None:
            self._driver.terminate()
            try:
                self._driver.wait(10)
            except subprocess.TimeoutExpired:
                self._driver.kill()
        self._http.close()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        answer = self._http.request(method, path, json=body if body is not None else ({} if method == "POST" else None))
        value = answer.json().get("value")
        if answer.status_code != 200:
            raise RuntimeError(f"WebDriver {method} {path}: {answer.status_code} {value}")
        return value

    def _s(self, path: str) -> str:
        return f"/session/{self._session}{path}"

    def open(self, url: str) -> None:
        self._call("POST", self._s("/url"), {"url": url})

    def find(self, css: str) -> str:
        """The element reference of the first match of ``css``."""
        found = self._call("POST", self._s("/element"), {"using": "css selector", "value": css})
        return str(found[_ELEMENT])

    def type(self, css: str, text: str) -> None:
        self._call("POST", self._s(f"/element/{self.find(css)}/value"), {"text": text})

    def click(self, css: str) -> None:
        self._call("POST", self._s(f"/element/{self.find(css)}/click"))

    def run(self, script: str, *args: Any) -> Any:
        """Run ``script`` (a function body; ``arguments`` holds ``args``) in the page; its return value."""
        return self._call("POST", self._s("/execute/sync"), {"script": script, "args": list(args)})

    def wait_for(self, script: str, *, what: str, timeout_s: float | None = None) -> Any:
        """Poll ``script`` until it returns something truthy; that value.

        Raises:
            AssertionError: still falsy after ``timeout_s`` (names ``what``).
        """
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            value = self.run(script)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"the page never showed {what} within {timeout_s or self.timeout_s:g} s")
            time.sleep(0.2)

    def text(self, css: str) -> str:
        return str(self.run("const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", css))

    def rows(self, table_id: str) -> list[list[str]]:
        """The text of each body row's cells of the table ``#table_id``."""
        script = (
            "return Array.from(document.querySelectorAll('#' + arguments[0] + ' tbody tr'))"
            ".map(r => Array.from(r.cells).map(c => c.innerText));"
        )
        return [list(map(str, r)) for r in self.run(script, table_id)]

    def screenshot(self, path: Path) -> Path:
        """A PNG of the window, written to ``path``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self._call("GET", self._s("/screenshot"))))
        return path

    def page_source(self) -> str:
        return str(self._call("GET", self._s("/source")))


def until(check: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    """Poll ``check`` until it is true (AssertionError naming ``what`` after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout_s:g} s")
        time.sleep(0.2)
