"""The stand-in engine's behaviour knobs, read from ``STANDIN_*`` environment variables.

Each variable is documented in :mod:`servectl.standin`. Parsing is strict: a value that cannot be read is an
error naming the variable, so that a typo in a test does not silently fall back to a default.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servectl.profile.catalog import DEFAULT_CATALOG

#: Startup phases, in order. ``STANDIN_CRASH_AT``/``STANDIN_STALL_AT``/``STANDIN_FATAL_AT`` name one of them.
PHASES: tuple[str, ...] = ("weights", "kv_cache", "cuda_graph", "warmup")

#: Share of ``STANDIN_STARTUP_DELAY_S`` that each phase takes (they add up to 1).
PHASE_SHARES: Mapping[str, float] = {"weights": 0.45, "kv_cache": 0.10, "cuda_graph": 0.30, "warmup": 0.15}

#: ``STANDIN_TOOL_FAULT`` values (see :mod:`servectl.standin.behaviour`).
TOOL_FAULTS: tuple[str, ...] = ("wrong_function", "malformed_args", "schema_args", "stream_mismatch", "no_continue")


class SettingsError(ValueError):
    """A ``STANDIN_*`` variable holds a value the stand-in cannot use."""


@dataclass(frozen=True)
class StandinSettings:
    """How the stand-in behaves; every field comes from one ``STANDIN_*`` variable."""

    startup_delay_s: float = 2.0
    token_rate_per_s: float = 50.0
    chunk_tokens: int = 1
    prefill_rate_per_s: float = 0.0
    crash_at: str | None = None
    crash_exit_code: int = 1
    never_ready: bool = False
    stall_at: str | None = None
    fatal_line: str | None = None
    fatal_at: str = "kv_cache"
    ignore_sigterm: bool = False
    extra_log_lines: tuple[str, ...] = ()
    completion_shortfall_tokens: int = 0
    die_after_tokens: int | None = None
    accept_length: float | None = None
    catalog_name: str = DEFAULT_CATALOG
    catalog_extension: Mapping[str, Any] | None = None
    listen_at: str = "start"
    tool_fault: str | None = None
    json_fault: str | None = None
    reasoning_fault: str | None = None
    needle_max_tokens: int | None = None
    error_every: int | None = None
    usage_skew_tokens: int = 0
    image_fault: str | None = None
    code_answer: str = "right"
    code_solutions: str | None = None
    taper: tuple[tuple[int, float], ...] = ()
    batch_rates: tuple[tuple[int, float], ...] = ()
    rate_noise: float = 0.0
    noise_seed: int | None = None
    release_s: float = 0.2
    resume_s: float = 0.5
    release_fault: str | None = None
    resume_fault: str | None = None
    backup_gbps: float = 0.0
    graph_memory_saver: bool = False
    retain_backup: bool = False
    read_weights: bool = False

    def decode_rate_for(self, prompt_tokens: int, running_requests: int = 1) -> float:
        """Decode tok/s of a request with ``prompt_tokens`` while ``running_requests`` run (itself included):
        ``STANDIN_TAPER`` by prompt length, ``STANDIN_BATCH_RATES`` by running requests (at most one of the
        two is set), else ``STANDIN_TOKEN_RATE``.

        Between two points the rate is linear in log(prompt tokens), or log(running requests); before the
        first and after the last it stays at that point's rate.
        """
        if self.batch_rates:
            return _log_linear(self.batch_rates, max(1, running_requests))
        if not self.taper:
            return self.token_rate_per_s
        return _log_linear(self.taper, prompt_tokens)

    @property
    def reports_accept_length(self) -> bool:
        """Whether responses carry speculative-decoding figures (chunks of more than one token)."""
        return self.chunk_tokens > 1 or self.accept_length is not None

    @property
    def effective_accept_length(self) -> float:
        """The accept length reported to clients: ``STANDIN_ACCEPT_LENGTH``, else the chunk size."""
        return self.accept_length if self.accept_length is not None else float(self.chunk_tokens)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> StandinSettings:
        """Read the settings from an environment mapping.

        Raises:
            SettingsError: a variable is set to a value that cannot be used (the message names it).
        """
        reader = _Reader(environ)
        settings = cls(
            startup_delay_s=reader.number("STANDIN_STARTUP_DELAY_S", 2.0, minimum=0.0),
            token_rate_per_s=reader.number("STANDIN_TOKEN_RATE", 50.0, minimum=1e-3),
            chunk_tokens=reader.integer("STANDIN_CHUNK_TOKENS", 1, minimum=1),
            prefill_rate_per_s=reader.number("STANDIN_PREFILL_RATE", 0.0, minimum=0.0),
            crash_at=reader.phase("STANDIN_CRASH_AT"),
            crash_exit_code=reader.integer("STANDIN_CRASH_EXIT_CODE", 1, minimum=0, maximum=255),
            never_ready=reader.flag("STANDIN_NEVER_READY"),
            stall_at=reader.phase("STANDIN_STALL_AT"),
            fatal_line=reader.text("STANDIN_FATAL_LINE"),
            fatal_at=reader.phase("STANDIN_FATAL_AT") or "kv_cache",
            ignore_sigterm=reader.flag("STANDIN_IGNORE_SIGTERM"),
            extra_log_lines=tuple(line for line in (reader.text("STANDIN_EXTRA_LOG") or "").split("|") if line),
            completion_shortfall_tokens=reader.integer("STANDIN_COMPLETION_SHORTFALL", 0, minimum=0),
            die_after_tokens=reader.optional_integer("STANDIN_DIE_AFTER_TOKENS", minimum=0),
            accept_length=reader.optional_number("STANDIN_ACCEPT_LENGTH", minimum=1.0),
            catalog_name=reader.text("STANDIN_CATALOG") or DEFAULT_CATALOG,
            catalog_extension=reader.json_object("STANDIN_CATALOG_EXTEND"),
            listen_at=reader.choice("STANDIN_LISTEN_AT", ("start", "uvicorn"), "start"),
            tool_fault=reader.optional_choice("STANDIN_TOOL_FAULT", TOOL_FAULTS),
            json_fault=reader.optional_choice("STANDIN_JSON_FAULT", ("invalid", "schema")),
            reasoning_fault=reader.optional_choice("STANDIN_REASONING_FAULT", ("leak",)),
            needle_max_tokens=reader.optional_integer("STANDIN_NEEDLE_MAX_TOKENS", minimum=0),
            error_every=reader.optional_integer("STANDIN_ERROR_EVERY", minimum=1),
            usage_skew_tokens=reader.integer("STANDIN_USAGE_SKEW", 0, minimum=0),
            image_fault=reader.optional_choice("STANDIN_IMAGE_FAULT", ("wrong", "length")),
            code_answer=reader.choice("STANDIN_CODE_ANSWER", ("right", "wrong", "slow", "loop", "none"), "right"),
            code_solutions=reader.text("STANDIN_CODE_SOLUTIONS"),
            taper=reader.taper("STANDIN_TAPER"),
            batch_rates=reader.taper("STANDIN_BATCH_RATES", what="RUNNING_REQUESTS", example="1:208,4:188"),
            rate_noise=reader.number("STANDIN_RATE_NOISE", 0.0, minimum=0.0),
            noise_seed=reader.optional_integer("STANDIN_RATE_NOISE_SEED", minimum=0),
            release_s=reader.number("STANDIN_RELEASE_S", 0.2, minimum=0.0),
            resume_s=reader.number("STANDIN_RESUME_S", 0.5, minimum=0.0),
            release_fault=reader.optional_choice("STANDIN_RELEASE_FAULT", ("keep", "die")),
            resume_fault=reader.optional_choice("STANDIN_RESUME_FAULT", ("fail", "wrong", "die")),
            backup_gbps=reader.number("STANDIN_BACKUP_GBPS", 0.0, minimum=0.0),
            graph_memory_saver=_graph_memory_saver(environ),
            retain_backup=environ.get("TMS_RETAIN_CPU_BACKUP", "") not in ("", "0"),
            read_weights=reader.flag("STANDIN_READ_WEIGHTS"),
        )
        if settings.taper and settings.batch_rates:
            raise SettingsError(
                "STANDIN_TAPER and STANDIN_BATCH_RATES are both set; the decode rate follows one of them: unset one"
            )
        if settings.rate_noise >= 1:
            raise SettingsError(f"STANDIN_RATE_NOISE={settings.rate_noise:g} must be below 1 (e.g. 0.03 for 3 %)")
        return settings


def _log_linear(points: tuple[tuple[int, float], ...], at: int) -> float:
    """The rate at ``at``: linear in log(at) between two points, flat before the first and after the last."""
    if at <= points[0][0]:
        return points[0][1]
    for (t0, r0), (t1, r1) in itertools.pairwise(points):
        if at <= t1:
            share = (math.log(at) - math.log(t0)) / (math.log(t1) - math.log(t0))
            return r0 + share * (r1 - r0)
    return points[-1][1]


def _graph_memory_saver(environ: Mapping[str, str]) -> bool:
    """SGLang's own variable: whether CUDA-graph memory sits in the memory saver's ``cuda_graph`` region
    (``get_bool_env_var``: "true" or "1", any case; default off), as the memory-saver catalog cites."""
    from servectl.profile.memory_saver import load_memory_saver

    graph = load_memory_saver()["graph_memory"]
    return environ.get(str(graph["env"]), "false").lower() in graph["truthy"]


class _Reader:
    def __init__(self, environ: Mapping[str, str]) -> None:
        self._env = environ

    def _raw(self, name: str) -> str | None:
        value = self._env.get(name)
        if value is None or value.strip() == "":
            return None
        return value

    def text(self, name: str) -> str | None:
        return self._raw(name)

    def number(self, name: str, default: float, *, minimum: float) -> float:
        value = self.optional_number(name, minimum=minimum)
        return default if value is None else value

    def optional_number(self, name: str, *, minimum: float) -> float | None:
        raw = self._raw(name)
        if raw is None:
            return None
        try:
            value = float(raw)
        except ValueError:
            raise SettingsError(f"{name}={raw!r} is not a number") from None
        if not value >= minimum or value != value or value == float("inf"):
            raise SettingsError(f"{name}={raw!r} must be a finite number >= {minimum:g}")
        return value

    def integer(self, name: str, default: int, *, minimum: int, maximum: int | None = None) -> int:
        value = self.optional_integer(name, minimum=minimum, maximum=maximum)
        return default if value is None else value

    def optional_integer(self, name: str, *, minimum: int, maximum: int | None = None) -> int | None:
        raw = self._raw(name)
        if raw is None:
            return None
        try:
            value = int(raw)
        except ValueError:
            raise SettingsError(f"{name}={raw!r} is not an integer") from None
        if value < minimum or (maximum is not None and value > maximum):
            upper = f" and <= {maximum}" if maximum is not None else ""
            raise SettingsError(f"{name}={raw!r} must be >= {minimum}{upper}")
        return value

    def flag(self, name: str) -> bool:
        raw = self._raw(name)
        if raw is None:
            return False
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise SettingsError(f"{name}={raw!r} must be 1 or 0")

    def phase(self, name: str) -> str | None:
        raw = self._raw(name)
        if raw is None:
            return None
        if raw.strip() not in PHASES:
            raise SettingsError(f"{name}={raw!r} is not a startup phase (one of {', '.join(PHASES)})")
        return raw.strip()

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        raw = self._raw(name)
        if raw is None:
            return default
        if raw.strip() not in choices:
            raise SettingsError(f"{name}={raw!r} must be one of {', '.join(choices)}")
        return raw.strip()

    def optional_choice(self, name: str, choices: tuple[str, ...]) -> str | None:
        raw = self._raw(name)
        if raw is None or raw.strip() == "none":
            return None
        return self.choice(name, choices, "")

    def taper(
        self, name: str, *, what: str = "PROMPT_TOKENS", example: str = "4096:160,65536:253,200000:160"
    ) -> tuple[tuple[int, float], ...]:
        """``PROMPT_TOKENS:TOK_S`` (``what``) pairs, comma-separated, the first number strictly increasing."""
        raw = self._raw(name)
        if raw is None:
            return ()
        rising = what.lower().replace("_", " ")
        fix = f"give {what}:TOK_S pairs with rising {rising}, e.g. {example}"
        points: list[tuple[int, float]] = []
        for pair in raw.split(","):
            tokens, sep, rate = pair.strip().partition(":")
            try:
                point = (int(tokens), float(rate))
            except ValueError:
                raise SettingsError(f"{name}={raw!r}: {pair.strip()!r} is not {what}:TOK_S; {fix}") from None
            if not sep or point[0] < 1 or not (math.isfinite(point[1]) and point[1] >= 1e-3):
                unit = "tokens" if what == "PROMPT_TOKENS" else rising
                raise SettingsError(f"{name}={raw!r}: {pair.strip()!r} needs {unit} >= 1 and tok/s >= 0.001; {fix}")
            if points and point[0] <= points[-1][0]:
                raise SettingsError(f"{name}={raw!r}: {rising} must rise from pair to pair; {fix}")
            points.append(point)
        return tuple(points)

    def json_object(self, name: str) -> Mapping[str, Any] | None:
        raw = self._raw(name)
        if raw is None:
            return None
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as err:
            raise SettingsError(f"{name} is not valid JSON: {err}") from None
        if not isinstance(value, dict):
            raise SettingsError(f"{name} must be a JSON object with 'choices' and/or 'options'")
        return value
