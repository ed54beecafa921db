"""SGLang-style log lines: ``[2026-11-30 10:00:00 TP0] message``, one flushed write per line."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TextIO

TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S"


class EngineLog:
    """Writes whole lines to a stream from any thread, flushing each one (the log is followed live)."""

    def __init__(self, stream: TextIO, *, clock: Callable[[], float] = time.time) -> None:
        self._stream = stream
        self._clock = clock
        # Re-entrant: a signal handler may raise while the main thread holds it and then log on the way out.
        self._lock = threading.RLock()

    def timestamp(self) -> str:
        return time.strftime(TIMESTAMP_FORMAT, time.localtime(self._clock()))

    def raw(self, text: str) -> None:
        """Write ``text`` as it is, as one or more lines."""
        with self._lock:
            try:
                self._stream.write(text + "\n")
                self._stream.flush()
            except (BrokenPipeError, ValueError):
                pass  # the reader went away (or the stream is closed); the engine keeps running like SGLang

    def info(self, message: str) -> None:
        """A main-process line: ``[ts] message``."""
        self.raw(f"[{self.timestamp()}] {message}")

    def tp(self, message: str, rank: int = 0) -> None:
        """A scheduler (tensor-parallel rank) line: ``[ts TP0] message``."""
        self.raw(f"[{self.timestamp()} TP{rank}] {message}")

    def uvicorn(self, message: str, level: str = "INFO") -> None:
        """A uvicorn line as SGLang configures it: ``[ts] INFO:     message``."""
        self.raw(f"[{self.timestamp()}] {(level + ':').ljust(9)} {message}")

    def access(self, client: str, request_line: str, status: int, phrase: str) -> None:
        """A uvicorn access line: ``[ts] INFO:     127.0.0.1:5000 - "GET /health HTTP/1.1" 200 OK``."""
        self.uvicorn(f'{client} - "{request_line}" {status} {phrase}')
