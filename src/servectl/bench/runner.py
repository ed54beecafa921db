"""Run a benchmark against an OpenAI-compatible server: :func:`run_bench`.

One ``httpx.Client`` (HTTP/1.1, one connection per simultaneous stream) is shared by worker threads;
concurrency N means N streams started together behind a barrier. Each stream is read in network-sized
pieces, stamped with ``time.perf_counter`` on arrival and parsed by :class:`StreamAccumulator`. Client CPU is
measured with ``time.process_time`` per point (and ``time.thread_time`` per request) and reported, so a
client that cannot keep up shows in the result instead of silently lowering it.

Order of a run: model discovery (``/v1/models``), two calibration probes, then for each prompt-length target
one warm-up request and, for each concurrency level, ``repeats`` measured rounds (with the used VRAM of the
service's cards sampled in the background, :mod:`servectl.bench.vram`); then free VRAM per card when the
context can read it.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import random
import secrets
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from servectl.adapters.tls import verify_for
from servectl.bench.model import (
    BenchContext,
    BenchProgressEvent,
    BenchReport,
    Calibration,
    CardFreeMemory,
    ClientInfo,
    FailureKind,
    PointResult,
    RequestMeasurement,
    RequestRole,
    Stat,
    pick_model,
    prompt_tolerance_tokens,
    read_free_vram,
)
from servectl.bench.prompts import (
    build_prompt,
    corrected_words,
    fit_calibration,
    probe_word_counts,
)
from servectl.bench.settings import BenchSettings
from servectl.bench.stream import StreamAccumulator
from servectl.bench.vram import PeakVram, VramWatch, stop_sampler
from servectl.errors import BenchFailed, UsageError

ProgressCallback = Callable[[BenchProgressEvent], None]
Clock = Callable[[], float]

_CHAT_PATH = "/v1/chat/completions"
#: Client CPU per wall second above which a point carries a warning that the client may limit it.
CLIENT_CPU_WARNING_FRACTION = 0.5


def _now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class _Job:
    role: RequestRole
    target_tokens: int
    words: int
    max_tokens: int
    round_index: int = 0
    stream_index: int = 0


def _client(settings: BenchSettings, transport: httpx.BaseTransport | None) -> httpx.Client:
    """One HTTP/1.1 client for the run, with a connection per concurrent stream (plus the probes')."""
    headers = {"Authorization": f"Bearer {settings.api_key.reveal()}"} if settings.api_key else {}
    max_streams = max(settings.concurrency)
    return httpx.Client(
        base_url=settings.url,
        headers=headers,
        http1=True,
        http2=False,
        timeout=httpx.Timeout(settings.timeout_s, connect=10.0),
        limits=httpx.Limits(max_connections=max_streams + 2, max_keepalive_connections=max_streams + 2),
        transport=transport,
        verify=verify_for(settings.url),  # http://: no CA bundle loaded for nothing (~90 ms a client)
    )


def _measure_target(
    runner: _Runner, pool: ThreadPoolExecutor, target: int, calibration: Calibration
) -> list[PointResult]:
    """Every concurrency level at one prompt length: a warm-up request first (when asked), whose prompt length
    corrects the word count; each level starts from the word count the previous one ended with."""
    settings = runner.settings
    words = calibration.words_for(target)
    warmup: RequestMeasurement | None = None
    if settings.warmup:
        warmup = runner.single(_Job(role="warmup", target_tokens=target, words=words, max_tokens=settings.max_tokens))
        runner._report_progress(1, "warmup", prompt_tokens_target=target)
        if warmup.prompt_tokens_actual is not None:
            words = corrected_words(
                words=words,
                target_tokens=target,
                actual_tokens=warmup.prompt_tokens_actual,
                tokens_per_word=calibration.tokens_per_word,
            )
    points: list[PointResult] = []
    for concurrency in settings.concurrency:
        point, words = _measure_point(runner, pool, target, concurrency, words, warmup, calibration)
        points.append(point)
        warmup = None  # recorded once, with the first concurrency level of this target
    return points


def _measure_point(
    runner: _Runner,
    pool: ThreadPoolExecutor,
    target: int,
    concurrency: int,
    words: int,
    warmup: RequestMeasurement | None,
    calibration: Calibration,
) -> tuple[PointResult, int]:
    """``repeats`` rounds of ``concurrency`` streams, the prompt corrected after each round; the aggregated
    point and the word count it ended with."""
    settings = runner.settings
    started = _now_iso()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    requests: list[RequestMeasurement] = []
    sampler = runner.vram.point()
    try:
        point_words = _rounds(runner, pool, target, concurrency, words, calibration, requests)
    finally:  # the sampler's thread never outlives its point, even when a round raises
        peak_vram = stop_sampler(sampler)
    point = _aggregate(
        target=target,
        concurrency=concurrency,
        repeats=settings.repeats,
        words=requests[0].prompt_words if requests else words,
        requests=requests,
        warmup=warmup,
        server_accept_length=runner.server_accept_length(),
        cpu_s=time.process_time() - cpu0,
        wall_s=time.perf_counter() - wall0,
        started_at=started,
        finished_at=_now_iso(),
        peak_vram=peak_vram,
    )
    return point, point_words


def _rounds(
    runner: _Runner,
    pool: ThreadPoolExecutor,
    target: int,
    concurrency: int,
    point_words: int,
    calibration: Calibration,
    requests: list[RequestMeasurement],
) -> int:
    """The measured rounds of one point, appended to ``requests``; the word count they ended with."""
    settings = runner.settings
    for round_index in range(settings.repeats):
        jobs = [
            _Job(
                role="measure",
                target_tokens=target,
                words=point_words,
                max_tokens=settings.max_tokens,
                round_index=round_index,
                stream_index=i,
            )
            for i in range(concurrency)
        ]
        batch = runner.round(jobs, pool)
        requests.extend(batch)
        runner._report_progress(
            concurrency, "measure", prompt_tokens_target=target, concurrency=concurrency, round_index=round_index
        )
        actuals = [r.prompt_tokens_actual for r in batch if r.prompt_tokens_actual is not None]
        if actuals:
            point_words = corrected_words(
                words=point_words,
                target_tokens=target,
                actual_tokens=statistics.median(actuals),
                tokens_per_word=calibration.tokens_per_word,
            )
    return point_words


class _Runner:
    def __init__(
        self,
        *,
        settings: BenchSettings,
        client: httpx.Client,
        clock: Clock,
        progress: ProgressCallback | None,
        vram: VramWatch,
    ) -> None:
        self.settings = settings
        self.vram = vram
        self.client = client
        self.clock = clock
        self.progress = progress
        self.run_id = secrets.token_hex(4)
        self.rng = random.Random(settings.seed)
        self.rng_lock = threading.Lock()
        self.request_number = 0
        self.t0 = clock()
        self.model = ""
        self.done = 0
        self.total = 0

    # -- plumbing ---------------------------------------------------------------------------------------

    def _report_progress(self, count: int, role: RequestRole, **where: int | None) -> None:
        self.done += count
        if self.progress is not None:
            self.progress(BenchProgressEvent(done=self.done, total=self.total, role=role, **where))

    def _prompt(self, words: int) -> str:
        with self.rng_lock:
            self.request_number += 1
            shared = self.settings.shared_prefix
            return build_prompt(
                rng=random.Random(self.settings.seed) if shared else self.rng,
                words=words,
                run_id=self.run_id,
                request_number=self.request_number,
                shared_prefix=shared,
            )

    def _body(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "max_tokens": max_tokens,
        }
        if self.settings.fixed_length:
            body["ignore_eos"] = True
            body["min_tokens"] = max_tokens
        if self.settings.temperature is not None:
            body["temperature"] = self.settings.temperature
        body.update(self.settings.extra_body)
        return body

    # -- one request ------------------------------------------------------------------------------------

    def request(
        self, job: _Job, *, body: dict[str, Any], barrier: threading.Barrier | None = None
    ) -> RequestMeasurement:
        """Send one streaming request and measure it; never raises for server or network trouble."""
        if barrier is not None:
            barrier.wait()
        cpu0 = time.thread_time()
        sent_at = self.clock()
        acc = StreamAccumulator(sent_at=sent_at)
        failure: FailureKind | None = None
        error: str | None = None
        try:
            with self.client.stream("POST", _CHAT_PATH, json=body) as response:
                if response.status_code >= 400:
                    text = response.read().decode("utf-8", "replace").strip().replace("\n", " ")
                    failure = "http_error"
                    error = f"HTTP {response.status_code} from {_CHAT_PATH}: {text[:300]}"
                else:
                    pending = b""
                    clock = self.clock
                    for data in response.iter_bytes():
                        pending = acc.feed_bytes(data, clock(), pending)
                    if pending:
                        acc.feed_line(pending.rstrip(b"\r"), clock())
        except httpx.TimeoutException as err:
            failure, error = "timeout", f"no data within {self.settings.timeout_s:g} s ({type(err).__name__})"
        except httpx.HTTPError as err:
            failure, error = "transport_error", f"{type(err).__name__}: {err}"
        ended_at = self.clock()
        return acc.measurement(
            role=job.role,
            prompt_tokens_target=job.target_tokens,
            prompt_words=job.words,
            completion_tokens_requested=job.max_tokens,
            fixed_length=self.settings.fixed_length,
            ended_at=ended_at,
            sent_offset_s=sent_at - self.t0,
            round_index=job.round_index,
            stream_index=job.stream_index,
            client_cpu_s=time.thread_time() - cpu0,
            failure=failure,
            error=error,
        )

    def single(self, job: _Job) -> RequestMeasurement:
        return self.request(job, body=self._body(self._prompt(job.words), job.max_tokens))

    def round(self, jobs: Sequence[_Job], pool: ThreadPoolExecutor) -> list[RequestMeasurement]:
        """Start ``len(jobs)`` streams together and wait for all of them."""
        if len(jobs) == 1:
            return [self.single(jobs[0])]
        bodies = [self._body(self._prompt(job.words), job.max_tokens) for job in jobs]  # built before start
        barrier = threading.Barrier(len(jobs))
        futures = [
            pool.submit(self.request, job, body=body, barrier=barrier) for job, body in zip(jobs, bodies, strict=True)
        ]
        return [f.result() for f in futures]

    # -- server facts -----------------------------------------------------------------------------------

    def discover_model(self) -> tuple[str, int | None]:
        url = f"{self.settings.url}/v1/models"
        try:
            response = self.client.get("/v1/models", timeout=30.0)
        except httpx.HTTPError as err:
            raise BenchFailed(
                f"{url}: cannot reach the server ({type(err).__name__}: {err}); check --url and that it is up"
            ) from err
        if response.status_code in (401, 403):
            hint = "the key in --api-key-env was refused" if self.settings.api_key else "pass --api-key-env NAME"
            raise BenchFailed(f"{url}: HTTP {response.status_code}; {hint}")
        if response.status_code >= 400:
            raise BenchFailed(f"{url}: HTTP {response.status_code}: {response.text[:200]}")
        try:
            entries = response.json().get("data") or []
            models = {str(e["id"]): e for e in entries}
        except (ValueError, AttributeError, KeyError, TypeError) as err:
            raise BenchFailed(f"{url}: not an OpenAI model list: {response.text[:200]}") from err
        wanted = pick_model(url, models, self.settings.model)
        entry = models[wanted]
        max_len = entry.get("max_model_len") if isinstance(entry, dict) else None
        return wanted, max_len if isinstance(max_len, int) and max_len > 0 else None

    def server_accept_length(self) -> float | None:
        """SGLang's average speculative accept length from ``/get_server_info``, when it reports one."""
        try:
            response = self.client.get("/get_server_info", timeout=10.0)
            if response.status_code != 200:
                return None
            info = response.json()
        except (httpx.HTTPError, ValueError):
            return None
        if isinstance(info, dict) and isinstance(info.get("decode"), list) and info["decode"]:
            info = info["decode"][0]
        states = info.get("internal_states") if isinstance(info, dict) else None
        values: list[float] = []
        for state in states if isinstance(states, list) else []:
            if isinstance(state, dict):
                value = state.get("avg_spec_accept_length", state.get("spec_accept_length"))
                if isinstance(value, int | float) and value > 0:
                    values.append(float(value))
        return statistics.fmean(values) if values else None

    # -- phases -----------------------------------------------------------------------------------------

    def calibrate(self, *, max_model_len: int | None) -> Calibration:
        sizes = probe_word_counts(smallest_target_tokens=min(self.settings.prompt_tokens), max_model_len=max_model_len)
        tokens: list[int] = []
        for words in sizes:
            probe = self.single(_Job(role="probe", target_tokens=0, words=words, max_tokens=1))
            self._report_progress(1, "probe")
            if probe.prompt_tokens_actual is None or probe.failure in (
                "http_error",
                "transport_error",
                "timeout",
                "server_error",
            ):
                raise BenchFailed(
                    f"{self.settings.url}{_CHAT_PATH}: calibration probe of {words} words failed: "
                    f"{probe.error or 'no usage.prompt_tokens in the stream'}"
                )
            tokens.append(probe.prompt_tokens_actual)
        try:
            return fit_calibration(words=sizes, prompt_tokens=tokens)
        except ValueError as err:
            raise BenchFailed(f"{self.settings.url}{_CHAT_PATH}: calibration failed: {err}") from err


def _aggregate(
    *,
    target: int,
    concurrency: int,
    repeats: int,
    words: int,
    requests: Sequence[RequestMeasurement],
    warmup: RequestMeasurement | None,
    server_accept_length: float | None,
    cpu_s: float,
    wall_s: float,
    started_at: str,
    finished_at: str,
    peak_vram: PeakVram | None = None,
) -> PointResult:
    """Statistics of one point over its good requests only."""
    ok = [r for r in requests if r.ok]
    rounds: dict[int, list[RequestMeasurement]] = {}
    for r in requests:
        rounds.setdefault(r.round_index, []).append(r)
    round_rates: list[float] = []
    for members in rounds.values():
        if all(m.ok for m in members):
            span = max(m.sent_offset_s + (m.e2e_s or 0.0) for m in members) - min(m.sent_offset_s for m in members)
            produced = sum(m.completion_tokens_produced or 0 for m in members)
            if span > 0:
                round_rates.append(produced / span)
    actual = Stat.of(float(r.prompt_tokens_actual) for r in ok if r.prompt_tokens_actual is not None)
    tolerance = prompt_tolerance_tokens(target)
    within = (
        None
        if actual is None
        else all(abs(r.prompt_tokens_actual - target) <= tolerance for r in ok if r.prompt_tokens_actual is not None)
    )
    warnings: list[str] = []
    if within is False and actual is not None:
        warnings.append(
            f"prompt tokens {actual.min:,.0f}-{actual.max:,.0f} miss the {target:,} target by more than "
            f"{tolerance:,} tokens"
        )
    if wall_s > 0 and cpu_s / wall_s > CLIENT_CPU_WARNING_FRACTION:
        warnings.append(
            f"client CPU was {100 * cpu_s / wall_s:.0f} % of one core; the client may have limited the result"
        )
    if warmup is not None and not warmup.ok:
        warnings.append(f"warm-up request failed ({warmup.failure}): {warmup.error}")
    flagged = [r for r in requests if not r.ok]
    if flagged:
        kinds = sorted({str(r.failure) for r in flagged})
        warnings.append(f"{len(flagged)} of {len(requests)} requests flagged ({', '.join(kinds)}); left out")
    return PointResult(
        prompt_tokens_target=target,
        concurrency=concurrency,
        repeats=repeats,
        prompt_words=words,
        requests=tuple(requests),
        warmup=warmup,
        prompt_tokens_actual=actual,
        ttft_s=Stat.of(r.ttft_s for r in ok),
        prefill_tok_s=Stat.of(r.prefill_tok_s for r in ok),
        decode_tok_s=Stat.of(r.decode_tok_s for r in ok),
        round_output_tok_s=Stat.of(round_rates),
        accept_length=Stat.of(r.accept_length for r in ok),
        server_accept_length=server_accept_length,
        prompt_tokens_within_tolerance=within,
        client_cpu_s=cpu_s,
        wall_s=wall_s,
        chunks=sum(r.token_chunks for r in requests),
        started_at=started_at,
        finished_at=finished_at,
        warnings=tuple(warnings),
        output_tokens=sum(r.completion_tokens_produced or 0 for r in ok),
        measured_s=_measured_s(requests),
        peak_vram=peak_vram,
    )


def _measured_s(requests: Sequence[RequestMeasurement]) -> float | None:
    """Wall time of a point's rounds on the run's clock: first request sent to last request ended."""
    if not requests:
        return None
    end = max(r.sent_offset_s + (r.e2e_s or 0.0) for r in requests)
    return end - min(r.sent_offset_s for r in requests)


def _skipped(settings: BenchSettings, target: int, concurrency: int, reason: str) -> PointResult:
    now = _now_iso()
    return PointResult(
        prompt_tokens_target=target,
        concurrency=concurrency,
        repeats=settings.repeats,
        prompt_words=0,
        started_at=now,
        finished_at=now,
        skipped=reason,
        warnings=(reason,),
    )


def _free_vram(context: BenchContext | None, warnings: list[str]) -> tuple[CardFreeMemory, ...] | None:
    cards, unread = read_free_vram(context.free_vram_after if context is not None else None)
    if unread:  # a failed VRAM read must not lose the measurements
        warnings.append(unread)
    return cards


def run_bench(
    *,
    settings: BenchSettings,
    context: BenchContext | None = None,
    progress: ProgressCallback | None = None,
    transport: httpx.BaseTransport | None = None,
    clock: Clock = time.perf_counter,
) -> BenchReport:
    """Measure TTFT, prefill and decode speed at each prompt length and concurrency.

    Args:
        settings: What to measure.
        context: Provenance recorded in the report, and the free-VRAM reader called after the run.
        progress: Called after each request (or round) with counts for a progress bar.
        transport: httpx transport to use instead of the network (tests use ``httpx.MockTransport``).
        clock: Monotonic seconds for arrival times (tests use a scripted clock).

    Returns:
        The report; requests the server failed are in it, flagged, and left out of every statistic.

    Raises:
        UsageError: ``settings`` name no server (``url`` empty).
        BenchFailed: The server cannot be reached, serves no such model, or the calibration probes fail.
    """
    if not settings.url:
        raise UsageError("bench: no server to measure; give BenchSettings(url='http://HOST:PORT') or a profile NAME")
    started_at = _now_iso()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    max_streams = max(settings.concurrency)
    warnings: list[str] = []
    points: list[PointResult] = []
    with (
        _client(settings, transport) as client,
        ThreadPoolExecutor(max_workers=max_streams, thread_name_prefix="bench-stream") as pool,
    ):
        vram = VramWatch(context.used_vram if context is not None else None)
        runner = _Runner(settings=settings, client=client, clock=clock, progress=progress, vram=vram)
        runner.model, max_model_len = runner.discover_model()
        per_target = (1 if settings.warmup else 0) + settings.repeats * sum(settings.concurrency)
        runner.total = 2 + per_target * len(settings.prompt_tokens)
        calibration = runner.calibrate(max_model_len=max_model_len)
        for target in settings.prompt_tokens:
            if max_model_len is not None and target + settings.max_tokens > max_model_len:
                reason = (
                    f"{target:,} prompt + {settings.max_tokens:,} completion tokens exceed the served "
                    f"context of {max_model_len:,} tokens; skipped"
                )
                points.extend(_skipped(settings, target, c, reason) for c in settings.concurrency)
                runner._report_progress(per_target, "measure", prompt_tokens_target=target)
                continue
            points.extend(_measure_target(runner, pool, target, calibration))
    if vram.note:  # once per run, however many points could not read the cards
        warnings.append(vram.note)
    free_vram = _free_vram(context, warnings)
    from servectl.version import __version__

    client_info = ClientInfo(
        servectl_version=__version__,
        python_version=platform.python_version(),
        httpx_version=httpx.__version__,
        cpu_count=os.cpu_count(),
        run_client_cpu_s=time.process_time() - cpu0,
        run_wall_s=time.perf_counter() - wall0,
    )
    return BenchReport(
        settings=settings,
        context=context,
        run_id=runner.run_id,
        model=runner.model,
        max_model_len=max_model_len,
        calibration=calibration,
        points=tuple(points),
        client=client_info,
        started_at=started_at,
        finished_at=_now_iso(),
        free_vram_after=free_vram,
        warnings=tuple(warnings),
    )
