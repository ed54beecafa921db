"""The health gate: what "up" means, and failing fast when it will not be.

A service is up only when all of these hold:

1. ``GET /health`` answers 200;
2. SGLang's ready line (``The server is fired up and ready to roll!``) appeared in the log;
3. ``GET /v1/models`` lists the profile's served name;
4. one real chat completion of one token succeeds;
5. every ``health.expect_log`` pattern of the profile was seen in the log.

Until then the gate follows the log and reports the phase (loading weights with its percentage, KV cache
allocated, capturing CUDA graphs, warming up). It fails fast, with the last log lines, when the container
exits (exit code, OOM flag), a fatal line appears, the log stalls for ``stall_timeout_s`` or
``startup_timeout_s`` passes. It polls every ``poll_s`` (0.25 s) with one HTTP probe in flight at a time,
and reacts at once to a new log line.

:class:`LogWatcher` is the pure part (log lines in, phase and verdicts out); :func:`wait_until_serving`
adds the clock, the log stream, the container state and the HTTP probes.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from servectl.errors import StartupFailed
from servectl.redact import redact

if TYPE_CHECKING:
    import httpx

    from servectl.adapters.docker import DockerEngine, LogLines
    from servectl.plan.compile import LaunchPlan

READY_LINE = "The server is fired up and ready to roll!"

# Phases in the order SGLang goes through them.
STARTING = "starting"
LOADING_WEIGHTS = "loading weights"
KV_CACHE = "KV cache allocated"
CUDA_GRAPHS = "capturing CUDA graphs"
WARMING_UP = "warming up"
VERIFYING = "verifying"
READY = "ready"
PHASES: tuple[str, ...] = (STARTING, LOADING_WEIGHTS, KV_CACHE, CUDA_GRAPHS, WARMING_UP, VERIFYING, READY)

#: (pattern, phase, whether the first group is a percentage)
_PHASE_RULES: tuple[tuple[re.Pattern[str], str, bool], ...] = (
    (re.compile(r"Load weight begin"), LOADING_WEIGHTS, False),
    (re.compile(r"Loading \w+ checkpoint shards:\s*(\d+)% Completed"), LOADING_WEIGHTS, True),
    (re.compile(r"Load weight end"), LOADING_WEIGHTS, False),
    (re.compile(r"KV Cache is allocated"), KV_CACHE, False),
    (re.compile(r"Memory pool end"), KV_CACHE, False),
    # "Capture cuda graph begin" before 0.5.23; "Capture decode CUDA graph begin. ..." from 0.5.23 on.
    (re.compile(r"Capture (?:.+ )?(?:cuda|CUDA) graph begin"), CUDA_GRAPHS, False),
    (re.compile(r"Capturing batches \([^)]*\):\s*(\d+)%"), CUDA_GRAPHS, True),
    (re.compile(r"Capture (?:.+ )?(?:cuda|CUDA) graph end"), CUDA_GRAPHS, False),
    (re.compile(r"Uvicorn running on|Application startup complete"), WARMING_UP, False),
)
_KV_TOKENS = re.compile(r"KV Cache is allocated\.(?: dtype: [^,]*,)? #tokens: (\d+)")  # 0.5.23 adds the dtype

#: Lines that mean startup has failed, by what they mean.
FATAL_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "CUDA out of memory",
        re.compile(r"CUDA out of memory|torch\.OutOfMemoryError|CUDA error: out of memory"),
    ),
    ("NCCL error", re.compile(r"NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError")),
    ("address already in use", re.compile(r"address already in use", re.IGNORECASE)),
    (
        "scheduler exception",
        re.compile(
            r"(Scheduler|TpModelWorkerClient|DataParallelController|Detokenizer\w*) "
            r"hit an exception"
        ),
    ),
    ("child process failed", re.compile(r"Received sigquit from a child process")),
)

#: uvicorn access lines (our own probes) are not progress: they must not hide a stalled engine.
_ACCESS_LINE = re.compile(r'"(GET|POST|HEAD|PUT|DELETE|OPTIONS) \S+ HTTP/[\d.]+" \d{3}')
#: servectl's own readiness probes: kept out of the log tail, which is for the engine's lines.
_PROBE_LINE = re.compile(r'"(GET|HEAD) /(health|health_generate|v1/models)\S* HTTP/[\d.]+" \d{3}')
_TRACEBACK_HEAD = "Traceback (most recent call last):"
#: The line a Python traceback ends with: ``SomeError: message`` (module-qualified names included).
_EXCEPTION_LINE = re.compile(r"^\s*[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Failure)\b.*")


@dataclass(frozen=True)
class Progress:
    """Where startup is: the phase, a detail, the percentage when the log gives one, seconds so far."""

    phase: str
    detail: str = ""
    percent: int | None = None
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class GateResult:
    """A service that passed the gate: how long it took and when each phase began (seconds from start)."""

    startup_s: float
    phases: list[tuple[str, float]]
    kv_tokens: int | None = None


@dataclass(frozen=True)
class FatalLine:
    reason: str
    line: str


@dataclass
class LogWatcher:
    """Reads startup log lines: phase, progress, ready line, fatal lines, expected patterns. Pure.

    Args:
        expect_log: regexes that must appear before the service counts as up.
        tail_lines: how many recent lines to keep for error reports.
    """

    expect_log: Sequence[str] = ()
    tail_lines: int = 30
    phase: str = STARTING
    percent: int | None = None
    detail: str = ""
    ready_line_seen: bool = False
    fatal: FatalLine | None = None
    kv_tokens: int | None = None
    tail: deque[str] = field(init=False)
    _expect: list[tuple[str, re.Pattern[str]]] = field(init=False)
    _seen: set[str] = field(init=False)

    def __post_init__(self) -> None:
        self.tail = deque(maxlen=self.tail_lines)
        self._expect = [(p, re.compile(p)) for p in self.expect_log]
        self._seen = set()

    @property
    def missing_expect(self) -> list[str]:
        """``expect_log`` patterns not seen yet, in profile order."""
        return [p for p, _ in self._expect if p not in self._seen]

    def feed(self, line: str) -> tuple[bool, bool]:
        """Read one line. Returns (counts as engine progress, progress display changed)."""
        if not _PROBE_LINE.search(line):
            self.tail.append(redact(line))
        # A fatal line that only opens a traceback: the exception line at its end says what went wrong.
        if self.fatal is not None and self.fatal.line.endswith(_TRACEBACK_HEAD) and _EXCEPTION_LINE.match(line):
            head = self.fatal.line[: -len(_TRACEBACK_HEAD)].rstrip().rstrip(":")
            self.fatal = FatalLine(self.fatal.reason, f"{head}: {redact(line.strip())}")
        for pattern, regex in self._expect:
            if pattern not in self._seen and regex.search(line):
                self._seen.add(pattern)
        if _ACCESS_LINE.search(line):
            return False, False
        if self.fatal is None:
            for reason, regex in FATAL_PATTERNS:
                if regex.search(line):
                    self.fatal = FatalLine(reason, redact(line.strip()))
                    break
        if READY_LINE in line:
            self.ready_line_seen = True
            return True, self._move(VERIFYING, None, "ready line seen; checking the API")
        match = _KV_TOKENS.search(line)
        if match:
            self.kv_tokens = int(match.group(1))
        for regex, phase, has_percent in _PHASE_RULES:
            m = regex.search(line)
            if m:
                percent = int(m.group(1)) if has_percent else None
                detail = f"#tokens {self.kv_tokens}" if phase == KV_CACHE and self.kv_tokens else ""
                return True, self._move(phase, percent, detail)
        return True, False

    def _move(self, phase: str, percent: int | None, detail: str) -> bool:
        """Phases only move forward; within a phase the percentage and detail may change."""
        if PHASES.index(phase) < PHASES.index(self.phase):
            return False
        if phase != self.phase:
            self.phase, self.percent, self.detail = phase, percent, detail
            return True
        changed = (percent is not None and percent != self.percent) or (detail and detail != self.detail)
        if percent is not None:
            self.percent = percent
        if detail:
            self.detail = detail
        return bool(changed)


@dataclass
class _Checks:
    health: bool = False
    models: bool = False
    chat: bool = False

    def missing(self, watcher: LogWatcher, served_name: str) -> list[str]:
        out = []
        if not self.health:
            out.append("/health 200")
        if not watcher.ready_line_seen:
            out.append("the ready line")
        if not self.models:
            out.append(f"/v1/models listing {served_name!r}")
        if not self.chat:
            out.append("a one-token chat completion")
        out += [f"expect_log {p!r}" for p in watcher.missing_expect]
        return out


_END = object()


# over 80 lines: four closures around one log-reader thread; splitting it into a pure state machine fed by
# log lines and probe results plus a thin driver is issue 10's remaining step (not done yet).
def wait_until_serving(
    *,
    plan: LaunchPlan,
    container_id: str,
    docker: DockerEngine,
    http: httpx.Client | None = None,
    on_phase: Callable[[Progress], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    api_key: str | None = None,
    started_at: float | None = None,
    poll_s: float = 0.25,
    inspect_every_s: float = 1.0,
    fatal_grace_s: float = 0.5,
    expect_grace_s: float = 1.0,
) -> GateResult:
    """Wait until the container of ``plan`` serves, or fail fast.

    Args:
        plan: the launch plan (URL, served name, timeouts, expect_log).
        container_id: the started container.
        docker: the engine (log stream and container state).
        http: HTTP client for the probes (a short-lived one when None).
        on_phase: called with each phase change and progress update.
        clock: monotonic seconds.
        api_key: the server's API key, for ``/v1/models`` and the chat completion (never logged).
        started_at: ``clock()`` when the container was created (default: now).
        poll_s: probe period; at most 0.25 s so that the gate adds no noticeable delay.
        inspect_every_s: how often the container's state is read besides when its log ends.
        fatal_grace_s: after a fatal line, how long to keep reading (the traceback, the exit) before failing.
        expect_grace_s: after everything else holds, how long to wait for missing expect_log lines.

    Returns:
        How long startup took and when each phase began.

    Raises:
        StartupFailed: with the last log lines, the container's exit code and OOM flag where it exited.
            The container is left as it is; the caller removes it.
    """
    import httpx

    t0 = clock() if started_at is None else started_at
    watcher = LogWatcher(expect_log=plan.expect_log)
    checks = _Checks()
    phases: list[tuple[str, float]] = [(STARTING, 0.0)]
    lines: queue.Queue[object] = queue.Queue()
    own_http = http is None
    client = httpx.Client(timeout=5.0) if http is None else http
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def report(detail_override: str | None = None, at: float | None = None) -> None:
        elapsed = (clock() if at is None else at) - t0
        if phases[-1][0] != watcher.phase:
            phases.append((watcher.phase, elapsed))
        if on_phase is not None:
            detail = watcher.detail if detail_override is None else detail_override
            on_phase(Progress(watcher.phase, detail, watcher.percent, elapsed))

    def fail(message: str, state: Any = None) -> StartupFailed:
        return StartupFailed(
            f"{plan.profile}: {message}",
            last_log_lines=list(watcher.tail),
            exit_code_of_container=None if state is None else state.exit_code,
            oom_killed=False if state is None else bool(state.oom_killed),
        )

    streams: list[LogLines] = []
    stop_pump = threading.Event()

    def pump(since: float | None) -> None:
        stream: LogLines | None = None
        try:
            stream = docker.logs(container_id, follow=True, since=since)
            streams.append(stream)
            if stop_pump.is_set():  # the gate ended before the stream was listed: it may not close it
                return
            for line in stream:
                if stop_pump.is_set():
                    break
                lines.put((clock(), line))
        except Exception as e:  # the engine went away: the state check below says what happened
            lines.put((clock(), e))
        finally:
            if stream is not None:
                stream.close()
            lines.put(_END)

    def start_pump(since: float | None) -> threading.Thread:
        thread = threading.Thread(target=pump, args=(since,), name="servectl-log-follow", daemon=True)
        thread.start()
        return thread

    pump_thread = start_pump(None)
    last_line_t = clock()
    next_poll = clock()
    next_inspect = clock() + inspect_every_s
    fatal_at: float | None = None
    all_ok_at: float | None = None
    stream_ended = False
    report("container started")
    try:
        while True:
            wait = max(0.0, min(next_poll, next_inspect) - clock())
            if fatal_at is not None:
                wait = min(wait, max(0.0, fatal_at + fatal_grace_s - clock()))
            items: list[object] = []
            if not stream_ended:
                try:
                    items.append(lines.get(timeout=wait))
                    while True:
                        items.append(lines.get_nowait())
                except queue.Empty:
                    pass
            elif wait > 0:
                time.sleep(min(wait, poll_s))
            changed = False
            for item in items:
                if item is _END:
                    stream_ended = True
                    continue
                assert isinstance(item, tuple)
                arrived, line = item
                if isinstance(line, Exception):
                    continue
                progress, moved = watcher.feed(str(line))
                if progress:
                    last_line_t = arrived
                if moved:
                    changed = True
                    report(at=arrived)
            now = clock()

            if stream_ended or now >= next_inspect:
                state = docker.inspect(container_id)
                next_inspect = now + inspect_every_s
                if state is None:
                    raise fail(f"the container was removed while {watcher.phase} (after {now - t0:.1f} s)")
                if not state.running:
                    state = _final_state(docker, container_id, state)
                    oom = " (OOM-killed)" if state.oom_killed else ""
                    cause = f": {watcher.fatal.line}" if watcher.fatal else ""
                    raise fail(
                        f"the engine exited with code {state.exit_code}{oom} while {watcher.phase} "
                        f"(after {now - t0:.1f} s){cause}",
                        state,
                    )
                if stream_ended:  # the log stream broke but the container runs: follow again
                    stream_ended = False
                    pump_thread = start_pump(time.time())

            if watcher.fatal is not None:
                if fatal_at is None:
                    fatal_at = now
                if now - fatal_at >= fatal_grace_s:
                    raise fail(f"fatal log line while {watcher.phase} ({watcher.fatal.reason}): {watcher.fatal.line}")
                continue

            if now - t0 > plan.startup_timeout_s:
                missing = ", ".join(checks.missing(watcher, plan.served_name))
                raise fail(
                    f"not ready after {plan.startup_timeout_s:g} s (health.startup_timeout_s) while "
                    f"{watcher.phase}; still missing: {missing}"
                )
            if not watcher.ready_line_seen and now - last_line_t > plan.stall_timeout_s:
                raise fail(
                    f"no new log line for {plan.stall_timeout_s:g} s while {watcher.phase} "
                    f"(health.stall_timeout_s); the engine looks hung"
                )

            if now >= next_poll or (changed and watcher.ready_line_seen):
                _probe(plan, client, headers, checks, watcher, fail, report)
                next_poll = clock() + poll_s

            if checks.health and checks.models and checks.chat and watcher.ready_line_seen:
                missing_expect = watcher.missing_expect
                if not missing_expect:
                    watcher.phase, watcher.percent, watcher.detail = READY, None, ""
                    report("serving")
                    return GateResult(startup_s=clock() - t0, phases=phases, kv_tokens=watcher.kv_tokens)
                if all_ok_at is None:
                    all_ok_at = now
                elif now - all_ok_at >= expect_grace_s:
                    shown = ", ".join(repr(p) for p in missing_expect)
                    raise fail(
                        f"the engine serves, but its log never showed health.expect_log pattern(s) {shown}; "
                        "the expected code path is not active"
                    )
    finally:
        stop_pump.set()
        for stream in streams:
            stream.close()
        pump_thread.join(timeout=0.5)
        if own_http:
            client.close()


def _final_state(docker: DockerEngine, container_id: str, state: Any) -> Any:
    """The state after exit; Docker may need a moment to record the exit code and OOM flag."""
    for _ in range(10):
        if state is None or state.exit_code is not None:
            break
        time.sleep(0.05)
        state = docker.inspect(container_id) or state
    return state


def _probe(
    plan: LaunchPlan,
    client: httpx.Client,
    headers: dict[str, str],
    checks: _Checks,
    watcher: LogWatcher,
    fail: Callable[..., StartupFailed],
    report: Callable[..., None],
) -> None:
    """One round of HTTP checks, in order, one request in flight; stops at the first that is not met."""
    import httpx

    base = plan.url
    try:
        if not checks.health:
            response = client.get(f"{base}/health", timeout=2.0)
            if response.status_code != 200:
                return
            checks.health = True
        if not checks.models:
            response = client.get(f"{base}/v1/models", headers=headers, timeout=5.0)
            if response.status_code in (401, 403):
                raise fail(f"GET /v1/models answered {response.status_code}: the server rejects the API key")
            if response.status_code != 200:
                return
            served = [str(m.get("id")) for m in response.json().get("data") or [] if isinstance(m, dict)]
            if plan.served_name not in served:
                raise fail(
                    f"GET /v1/models lists {served}, not the profile's served name {plan.served_name!r} "
                    "(model.served_name)"
                )
            checks.models = True
        if not watcher.ready_line_seen:
            return
        if not checks.chat:
            report("one-token chat completion")
            body = {
                "model": plan.served_name,
                "messages": [{"role": "user", "content": "Reply with one word."}],
                "max_tokens": 1,
                "temperature": 0,
            }
            response = client.post(f"{base}/v1/chat/completions", json=body, headers=headers, timeout=60.0)
            if response.status_code == 503:
                return
            if response.status_code != 200:
                raise fail(f"the one-token chat completion answered {response.status_code}: {response.text[:200]}")
            choices = response.json().get("choices")
            if not choices:
                raise fail(f"the one-token chat completion returned no choices: {response.text[:200]}")
            checks.chat = True
    except (httpx.TransportError, ValueError):
        return  # not listening yet, or a half-written answer: the next poll tries again


def log_patterns() -> dict[str, re.Pattern[str]]:
    """Every pattern the gate reads the engine log with, by role; tests check each against the log catalog."""
    out = {"ready": re.compile(re.escape(READY_LINE)), "kv tokens": _KV_TOKENS}
    out.update({f"phase {phase}: {regex.pattern}": regex for regex, phase, _ in _PHASE_RULES})
    out.update({f"fatal {reason}": regex for reason, regex in FATAL_PATTERNS})
    return out
