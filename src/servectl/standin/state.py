"""What the stand-in's HTTP side shares with its startup sequence, and how it refuses a request."""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from servectl.standin.logs import EngineLog
from servectl.standin.memory import EngineDeath, MemoryLedger
from servectl.standin.settings import StandinSettings


@dataclass
class EngineState:
    """What the HTTP side shares with the startup sequence."""

    settings: StandinSettings
    args: dict[str, Any]
    log: EngineLog
    context_length: int
    architecture: str = "LlamaForCausalLM"
    eos_token_id: int | None = None
    kv_tokens: int = 0
    hidden_size: int = 4096  # the model config's; an embedding model's vectors are this long
    phase: str = "init"
    memory: MemoryLedger | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    dead: threading.Event = field(default_factory=threading.Event)
    gone: threading.Event = field(default_factory=threading.Event)
    death: EngineDeath | None = None
    created: int = field(default_factory=lambda: int(time.time()))
    _running: int = 0
    _generations: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _noise: random.Random | None = None
    _prefixes: set[int] = field(default_factory=set)

    def die(self, death: EngineDeath) -> None:
        """A call killed the server: the main thread logs SGLang's way down and exits (137); this waits
        (a few seconds at most) until it has, so the caller's connection closes with the process."""
        with self._lock:
            if self.death is None:
                self.death = death
        self.dead.set()
        self.gone.wait(5.0)

    @property
    def served_model_name(self) -> str:
        return str(self.args.get("served_model_name") or self.args["model_path"])

    @property
    def api_key(self) -> str | None:
        key = self.args.get("api_key")
        return str(key) if key else None

    @property
    def admin_api_key(self) -> str | None:
        key = self.args.get("admin_api_key")
        return str(key) if key else None

    def request_started(self) -> int:
        with self._lock:
            self._running += 1
            return self._running

    def next_generation(self) -> int:
        """Count a generation request; its 1-based number (for ``STANDIN_ERROR_EVERY``)."""
        with self._lock:
            self._generations += 1
            return self._generations

    def request_finished(self) -> None:
        with self._lock:
            self._running -= 1

    def prefix_hit(self, keys: Sequence[str]) -> int:
        """The prefix cache as a client sees it: how many leading tokens of this prompt an earlier prompt had
        (never the whole prompt: its last token is computed), and this prompt's prefixes cached in turn; none
        with ``--disable-radix-cache``. A stand-in's simplification of SGLang's radix cache: token-exact
        prefixes, everything dropped at once when more are held than the KV pool's tokens."""
        if self.args.get("disable_radix_cache") or not keys:
            return 0
        chain, hit, hashes = 0, 0, []
        with self._lock:
            for index, key in enumerate(keys):
                chain = hash((chain, key))
                hashes.append(chain)
                if hit == index and chain in self._prefixes:
                    hit = index + 1
            if len(self._prefixes) + len(hashes) > max(self.kv_tokens, len(hashes)):
                self._prefixes.clear()
            self._prefixes.update(hashes)
        return min(hit, len(keys) - 1)

    def rate_factor(self) -> float:
        """``STANDIN_RATE_NOISE``: one request's decode-rate factor, log-normal with that spread (1.0 without),
        drawn from a generator seeded with ``STANDIN_RATE_NOISE_SEED`` (unseeded when unset)."""
        spread = self.settings.rate_noise
        if not spread:
            return 1.0
        with self._lock:
            if self._noise is None:
                self._noise = random.Random(self.settings.noise_seed)
            return math.exp(self._noise.gauss(0.0, spread))

    @property
    def running_requests(self) -> int:
        with self._lock:
            return self._running


class RequestError(Exception):
    """A request SGLang would refuse: HTTP status and message."""

    def __init__(self, status: int, message: str, error_type: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type

    def body(self) -> dict[str, Any]:
        return {
            "object": "error",
            "message": self.message,
            "type": self.error_type,
            "param": None,
            "code": self.status,
        }


__all__ = ["EngineState", "RequestError"]
