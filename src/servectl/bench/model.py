"""What a benchmark run measures and what it found: provenance and the measurements (settings: `settings.py`).

Plain frozen dataclasses, no I/O. Units are in the field names (``ttft_s``, ``decode_tok_s``,
``memory_free_bytes``). The API key is held in :class:`~servectl.bench.settings.ApiKey`, whose repr is ``***``;
artifacts record only the name of the environment variable it came from.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from servectl.bench.settings import ApiKey, BenchSettings
from servectl.bench.vram import CardUsage, PeakVram

#: Why a request is flagged and left out of the aggregates.
FailureKind = Literal[
    "http_error",  # the server answered with a status >= 400
    "transport_error",  # connection refused or broken before any token arrived
    "timeout",  # no byte within the read timeout
    "server_error",  # the stream carried an error object
    "incomplete_stream",  # the stream ended (or broke) without ``data: [DONE]``
    "no_usage",  # the stream ended without a ``usage`` object, so token counts are unknown
    "short_completion",  # fewer completion tokens than asked although a fixed length was requested
]

#: Which requests a measurement belongs to.
RequestRole = Literal["probe", "warmup", "measure"]


def prompt_tolerance_tokens(target_tokens: int) -> int:
    """How far the actual prompt length may be from its target: 1 % of the target, at least 64 tokens.

    Prompts are sized from a two-probe fit of the server's tokens per word and corrected after every batch
    (see :mod:`servectl.bench.prompts`), so they normally land within a few tokens; this bound is what the
    run checks and reports.
    """
    return max(64, math.ceil(target_tokens * 0.01))


def pick_model(url: str, served: Mapping[str, Any], wanted: str | None) -> str:
    """The model to measure among those ``url`` serves: ``wanted`` (``--model``), else the only one.

    Raises:
        BenchFailed: several models and none named, or the named one is not served.
    """
    from servectl.errors import BenchFailed

    if wanted is None:
        if len(served) != 1:
            raise BenchFailed(f"{url}: serves {len(served)} models {sorted(served)}; pick one with --model")
        return next(iter(served))
    if wanted not in served:
        raise BenchFailed(f"{url}: model {wanted!r} is not served; served: {sorted(served)}")
    return wanted


def read_api_key(variable: str | None, environ: Mapping[str, str], *, key_file: str | None = None) -> ApiKey | None:
    """The key in environment variable ``variable`` (``--api-key-env``, or the profile's ``serve.api_key_env``),
    else in ``key_file`` (the profile's ``serve.api_key_file``); None when neither is named.

    Read by the one key reader, :func:`servectl.service.host_files.read_key` (the service's own key too).

    Raises:
        UsageError: the variable is not set or empty, or the file cannot be read or is empty.
    """
    from servectl.service.host_files import read_key

    if variable:
        return ApiKey(read_key("env", variable, environ, setting=f"--api-key-env {variable}"))
    if key_file:
        return ApiKey(read_key("file", key_file, environ, setting="serve.api_key_file"))
    return None


def run_folder(environ: Mapping[str, str], kind: str) -> Path:
    """Where a run of ``kind`` (bench, qualify) writes by default: ``STATE/<kind>/<UTC start time>``."""
    import datetime as _dt

    from servectl.paths import state_dir

    return state_dir(environ) / kind / _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")


class CardMemory(Protocol):
    """One card's free memory as the GPU inventory reports it (``servectl.adapters.gpu.GpuDevice`` fits)."""

    @property
    def index(self) -> int: ...

    @property
    def memory_free_bytes(self) -> int | None: ...


@dataclass(frozen=True)
class CardFreeMemory:
    """Free memory of one card, read after the run; ``None`` where the driver cannot tell."""

    index: int
    memory_free_bytes: int | None


def read_free_vram(read: Callable[[], Iterable[Any]] | None) -> tuple[tuple[CardFreeMemory, ...] | None, str]:
    """Free memory per card through ``read`` (None: no GPU inventory): ``(cards, "")``, or ``(None, why)``
    when the read failed, so that a failed read never loses the run it follows."""
    if read is None:
        return None, ""
    try:
        cards = read()
    except Exception as err:  # NVML can fail in many ways after a long run; the caller says so
        return None, f"free VRAM after the run could not be read: {err}"
    return tuple(CardFreeMemory(index=c.index, memory_free_bytes=c.memory_free_bytes) for c in cards), ""


@dataclass(frozen=True)
class BenchContext:
    """Where the measured service came from, so that a result goes stale when the profile changes.

    Attributes:
        profile_name: The servectl profile, when servectl manages the service.
        plan_hash: Hash of the resolved launch plan the service runs.
        image_digest: ``sha256:...`` of the engine image.
        model_revision: Commit of the model weights.
        free_vram_after: Called once after the run; returns each card's free memory, e.g.
            ``lambda: inventory.snapshot().devices`` with a :class:`servectl.adapters.gpu.GpuInventory`.
        host_facts: Called once when the artifacts are written; returns the host facts the artifact manifest
            records (:func:`servectl.bench.manifest.host_facts`: driver, cards, power cap).
        used_vram: Called in the background while each point runs (:mod:`servectl.bench.vram`); returns the
            used memory of each card the service uses, for the peak per card. None: peak VRAM unknown.
    """

    profile_name: str | None = None
    plan_hash: str | None = None
    image_digest: str | None = None
    model_revision: str | None = None
    free_vram_after: Callable[[], Sequence[CardMemory]] | None = field(default=None, repr=False, compare=False)
    host_facts: Callable[[], Mapping[str, Any]] | None = field(default=None, repr=False, compare=False)
    used_vram: Callable[[], Sequence[CardUsage]] | None = field(default=None, repr=False, compare=False)


def output_tokens_per_minute(tokens: int, seconds: float | None) -> float | None:
    """Completion tokens per minute over ``seconds`` of wall time (None without a positive time or a token)."""
    if seconds is None or seconds <= 0 or tokens <= 0:
        return None
    return 60.0 * tokens / seconds


@dataclass(frozen=True)
class Stat:
    """p50, min and max of one metric over the requests (or rounds) of a point."""

    p50: float
    min: float
    max: float
    n: int

    @staticmethod
    def of(values: Iterable[float | None]) -> Stat | None:
        """The statistic of the known values, or ``None`` when there is none."""
        known = [v for v in values if v is not None]
        if not known:
            return None
        return Stat(p50=statistics.median(known), min=min(known), max=max(known), n=len(known))


@dataclass(frozen=True)
class RequestMeasurement:
    """One streamed request, measured from the server's ``usage`` and the arrival times of chunks.

    TTFT runs from sending the request to the first chunk that carries a token (content, reasoning, tool
    call, or a rise of the streamed ``usage.completion_tokens``). Decode tok/s is (completion tokens minus
    the tokens of the first token chunk) divided by (last token chunk time minus first token chunk time).
    """

    role: RequestRole
    prompt_tokens_target: int
    prompt_words: int
    completion_tokens_requested: int
    round_index: int = 0
    stream_index: int = 0
    prompt_tokens_actual: int | None = None
    completion_tokens_produced: int | None = None
    ttft_s: float | None = None
    prefill_tok_s: float | None = None
    decode_tok_s: float | None = None
    decode_window_s: float | None = None
    e2e_s: float | None = None
    sent_offset_s: float = 0.0
    token_chunks: int = 0
    first_chunk_tokens: int | None = None
    first_chunk_tokens_source: Literal["usage", "estimated"] | None = None
    accept_length: float | None = None
    finish_reason: str | None = None
    client_cpu_s: float = 0.0
    complete: bool = False
    failure: FailureKind | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether this request counts in the aggregates."""
        return self.complete and self.failure is None


@dataclass(frozen=True)
class PointResult:
    """All requests at one (prompt length target, concurrency) and their p50/min/max.

    Only requests that are :attr:`RequestMeasurement.ok` count; flagged ones are listed in
    :attr:`requests` with their failure and left out of every statistic.

    ``output_tokens`` sums the completion tokens of the good requests and ``measured_s`` is the wall time of
    the point's rounds (first request sent to last request ended, on the run's clock), so that
    :attr:`output_tok_per_min` is what the service delivered at this concurrency. ``peak_vram`` is the
    highest used memory per card while the point ran (None when the cards could not be read).
    """

    prompt_tokens_target: int
    concurrency: int
    repeats: int
    prompt_words: int
    requests: tuple[RequestMeasurement, ...] = ()
    warmup: RequestMeasurement | None = None
    prompt_tokens_actual: Stat | None = None
    ttft_s: Stat | None = None
    prefill_tok_s: Stat | None = None
    decode_tok_s: Stat | None = None
    round_output_tok_s: Stat | None = None
    accept_length: Stat | None = None
    server_accept_length: float | None = None
    prompt_tokens_within_tolerance: bool | None = None
    client_cpu_s: float = 0.0
    wall_s: float = 0.0
    chunks: int = 0
    started_at: str = ""
    finished_at: str = ""
    skipped: str | None = None
    warnings: tuple[str, ...] = ()
    output_tokens: int = 0
    measured_s: float | None = None
    peak_vram: PeakVram | None = None

    @property
    def output_tok_per_min(self) -> float | None:
        """Completion tokens of the good requests per minute of the point's wall time."""
        return output_tokens_per_minute(self.output_tokens, self.measured_s)

    @property
    def flagged(self) -> tuple[RequestMeasurement, ...]:
        """Measured requests left out of the statistics, with their failure."""
        return tuple(r for r in self.requests if not r.ok)

    @property
    def ok_count(self) -> int:
        """How many measured requests count."""
        return sum(1 for r in self.requests if r.ok)

    @property
    def client_cpu_fraction(self) -> float | None:
        """Client CPU seconds per wall second during the point (1.0 = one core busy)."""
        return self.client_cpu_s / self.wall_s if self.wall_s > 0 else None

    @property
    def client_cpu_ms_per_1000_chunks(self) -> float | None:
        """Client CPU milliseconds per 1,000 stream chunks received."""
        return 1e6 * self.client_cpu_s / self.chunks if self.chunks else None


@dataclass(frozen=True)
class Calibration:
    """The server's prompt tokens as a line in words: ``tokens = overhead_tokens + tokens_per_word * words``.

    Fitted from two ``max_tokens=1`` probes of different sizes; the overhead is the chat template and the
    nonce.
    """

    probe_words: tuple[int, ...]
    probe_prompt_tokens: tuple[int, ...]
    tokens_per_word: float
    overhead_tokens: float

    def words_for(self, target_tokens: int) -> int:
        """Words that should give ``target_tokens`` prompt tokens."""
        return max(1, round((target_tokens - self.overhead_tokens) / self.tokens_per_word))


@dataclass(frozen=True)
class ClientInfo:
    """The measuring client, so that a slow client can be told apart from a slow server."""

    servectl_version: str
    python_version: str
    httpx_version: str
    cpu_count: int | None
    run_client_cpu_s: float
    run_wall_s: float


@dataclass(frozen=True)
class BenchReport:
    """The result of :func:`servectl.bench.run_bench`."""

    settings: BenchSettings
    context: BenchContext | None
    run_id: str
    model: str
    max_model_len: int | None
    calibration: Calibration
    points: tuple[PointResult, ...]
    client: ClientInfo
    started_at: str
    finished_at: str
    free_vram_after: tuple[CardFreeMemory, ...] | None = None
    warnings: tuple[str, ...] = ()

    @property
    def flagged_requests(self) -> tuple[RequestMeasurement, ...]:
        """Every measured request left out of the statistics."""
        return tuple(r for p in self.points for r in p.flagged)

    @property
    def measured_requests(self) -> int:
        """How many measured requests the run sent."""
        return sum(len(p.requests) for p in self.points)


@dataclass(frozen=True)
class BenchProgressEvent:
    """Sent to the progress callback after each request (or round of concurrent requests)."""

    done: int
    total: int
    role: RequestRole
    prompt_tokens_target: int | None = None
    concurrency: int | None = None
    round_index: int | None = None
