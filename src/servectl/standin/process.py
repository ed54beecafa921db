"""Run the stand-in engine as a host subprocess (``python -m servectl.standin``), for tests and benchmarks.

::

    with HostStandin(["--model-path", "examples/demo-model"], env={"STANDIN_TOKEN_RATE": "500"}) as engine:
        engine.wait_ready()
        urllib.request.urlopen(engine.base_url + "/health")
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from servectl.standin.engine import READY_LINE

_SRC_DIR = Path(__file__).resolve().parents[2]  # the folder that holds the ``servectl`` package


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (bind to port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class HostStandin:
    """A stand-in engine in a child process on a free port; its log lines are collected as they come.

    ``--host``/``--port`` are added unless ``argv`` has them. ``env`` is added to a copy of this process's
    environment (``STANDIN_STARTUP_DELAY_S`` defaults to 0.2 s here). Leaving the ``with`` block stops it.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
    ) -> None:
        self.host = host
        self.port = free_port(host) if port is None else port
        self.argv = list(argv)
        if "--host" not in self.argv:
            self.argv += ["--host", host]
        if "--port" not in self.argv:
            self.argv += ["--port", str(self.port)]
        self.env = {**os.environ, "STANDIN_STARTUP_DELAY_S": "0.2", **(env or {})}
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_SRC_DIR), os.environ.get("PYTHONPATH")]))
        self.env["PYTHONUNBUFFERED"] = "1"
        self.lines: list[str] = []
        self.stderr_text = ""
        self._cond = threading.Condition()
        self._proc: subprocess.Popen[str] | None = None
        self._readers: list[threading.Thread] = []

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self._proc is not None, "not started"
        return self._proc.pid

    def start(self) -> HostStandin:
        """Start the child process (returns at once; see :meth:`wait_for_line` and :meth:`wait_ready`).

        Entering the ``with`` block starts it too, unless it was started already.
        """
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "servectl.standin", *self.argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
        )
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()
        return self

    def _read_stdout(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        self.stderr_text = self._proc.stderr.read()

    def wait_for_line(self, text: str, timeout_s: float = 10.0) -> str:
        """The first log line containing ``text``, waiting for it.

        Raises:
            TimeoutError: not seen within ``timeout_s``, or the process ended without printing it.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for line in self.lines:
                    if text in line:
                        return line
                exited = self._proc is not None and self._proc.poll() is not None
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (exited and not self._readers[0].is_alive()):
                    tail = "\n".join(line[:300] for line in self.lines[-10:])
                    raise TimeoutError(f"no log line containing {text!r}; last lines:\n{tail}\n{self.stderr_text}")
                self._cond.wait(min(remaining, 0.1))

    def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Wait for ``The server is fired up and ready to roll!``."""
        self.wait_for_line(READY_LINE, timeout_s)

    def send_signal(self, signum: int) -> None:
        assert self._proc is not None
        self._proc.send_signal(signum)

    def wait(self, timeout_s: float = 10.0) -> int:
        """Wait for the process to end; its exit status."""
        assert self._proc is not None
        code = self._proc.wait(timeout_s)
        for reader in self._readers:
            reader.join(timeout_s)
        return code

    def stop(self) -> None:
        """Terminate (then kill) the process and close its pipes."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
        for reader in self._readers:
            reader.join(5)
        for pipe in (self._proc.stdout, self._proc.stderr):
            if pipe is not None:
                pipe.close()

    def __enter__(self) -> HostStandin:
        return self if self._proc is not None else self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
