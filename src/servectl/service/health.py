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
from typing import TYPE_CHECKING

from servectl.errors import StartupFailed
from servectl.redact import redact

if TYPE_CHECKING:
    import httpx

    from servectl.adapters.docker import ContainerState, DockerEngine, LogLines
    from servectl.adapters.http import HttpAdapter
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
class GatePassage:
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
        secrets: values taken out of the kept lines besides the key spellings and token shapes (the secrets
            the profile references).
    """

    expect_log: Sequence[str] = ()
    tail_lines: int = 30
    secrets: Sequence[str] = ()
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
            self.tail.append(redact(line, self.secrets))
        # A fatal line that only opens a traceback: the exception line at its end says what went wrong.
        if self.fatal is not None and self.fatal.line.endswith(_TRACEBACK_HEAD) and _EXCEPTION_LINE.match(line):
            head = self.fatal.line[: -len(_TRACEBACK_HEAD)].rstrip().rstrip(":")
            self.fatal = FatalLine(self.fatal.reason, f"{head}: {redact(line.strip(), self.secrets)}")
        for pattern, regex in self._expect:
            if pattern not in self._seen and regex.search(line):
                self._seen.add(pattern)
        if _ACCESS_LINE.search(line):
            return False, False
        if self.fatal is None:
            for reason, regex in FATAL_PATTERNS:
                if regex.search(line):
                    self.fatal = FatalLine(reason, redact(line.strip(), self.secrets))
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


@dataclass
class GateMachine:
    """The gate's decisions, pure: fed log lines, container states and probe results, each with its time.

    The driver (:func:`wait_until_serving`) only moves data in and out: it reads the log stream and the
    container, runs the probes and sleeps. Every verdict - a fatal line past its grace, the startup or stall
    timeout, an exit, a missing ``expect_log`` line, or passing - is taken here, so tests drive it without
    threads or clocks.

    Args:
        plan: the launch plan (profile, served name, timeouts, expect_log).
        t0: the clock reading when the container was created.
        fatal_grace_s: after a fatal line, how long to keep reading (the traceback, the exit) before failing.
        expect_grace_s: after everything else holds, how long to wait for missing expect_log lines.
    """

    plan: LaunchPlan
    t0: float
    fatal_grace_s: float = 0.5
    expect_grace_s: float = 1.0
    watcher: LogWatcher = field(init=False)
    checks: _Checks = field(default_factory=_Checks)
    phases: list[tuple[str, float]] = field(default_factory=lambda: [(STARTING, 0.0)])
    last_line_t: float = field(init=False)
    fatal_at: float | None = None
    all_ok_at: float | None = None

    def __post_init__(self) -> None:
        self.watcher = LogWatcher(expect_log=self.plan.expect_log)
        self.last_line_t = self.t0

    def feed(self, arrived: float, line: str) -> bool:
        """One log line that arrived at ``arrived``; whether the phase or progress moved."""
        progress, moved = self.watcher.feed(line)
        if progress:
            self.last_line_t = arrived
        if moved:
            self.note_phase(arrived)
        return moved

    def note_phase(self, at: float) -> None:
        if self.phases[-1][0] != self.watcher.phase:
            self.phases.append((self.watcher.phase, at - self.t0))

    def fail(self, message: str, state: ContainerState | None = None) -> StartupFailed:
        return StartupFailed(
            f"{self.plan.profile}: {message}",
            last_log_lines=list(self.watcher.tail),
            exit_code_of_container=None if state is None else state.exit_code,
            oom_killed=False if state is None else bool(state.oom_killed),
        )

    def container_gone(self, now: float) -> StartupFailed:
        return self.fail(f"the container was removed while {self.watcher.phase} (after {now - self.t0:.1f} s)")

    def container_exited(self, state: ContainerState, now: float) -> StartupFailed:
        oom = " (OOM-killed)" if state.oom_killed else ""
        cause = f": {self.watcher.fatal.line}" if self.watcher.fatal else ""
        return self.fail(
            f"the engine exited with code {state.exit_code}{oom} while {self.watcher.phase} "
            f"(after {now - self.t0:.1f} s){cause}",
            state,
        )

    @property
    def fatal_pending(self) -> bool:
        """A fatal line was seen: keep reading until its grace ends (no probes meanwhile)."""
        return self.watcher.fatal is not None

    def check(self, now: float) -> None:
        """Raise :class:`StartupFailed` when the gate must fail at ``now``: fatal line, startup or stall timeout."""
        fatal = self.watcher.fatal
        if fatal is not None:
            self.fatal_at = now if self.fatal_at is None else self.fatal_at
            if now - self.fatal_at >= self.fatal_grace_s:
                raise self.fail(f"fatal log line while {self.watcher.phase} ({fatal.reason}): {fatal.line}")
            return
        plan = self.plan
        if now - self.t0 > plan.startup_timeout_s:
            missing = ", ".join(self.checks.missing(self.watcher, plan.served_name))
            raise self.fail(
                f"not ready after {plan.startup_timeout_s:g} s (health.startup_timeout_s) while "
                f"{self.watcher.phase}; still missing: {missing}"
            )
        if not self.watcher.ready_line_seen and now - self.last_line_t > plan.stall_timeout_s:
            raise self.fail(
                f"no new log line for {plan.stall_timeout_s:g} s while {self.watcher.phase} "
                f"(health.stall_timeout_s); the engine looks hung"
            )

    def passed(self, now: float) -> GatePassage | None:
        """The result once every probe, the ready line and every expect_log pattern hold; else None."""
        if not (self.checks.health and self.checks.models and self.checks.chat and self.watcher.ready_line_seen):
            return None
        missing_expect = self.watcher.missing_expect
        if not missing_expect:
            self.watcher.phase, self.watcher.percent, self.watcher.detail = READY, None, ""
            self.note_phase(now)
            return GatePassage(startup_s=now - self.t0, phases=self.phases, kv_tokens=self.watcher.kv_tokens)
        if self.all_ok_at is None:
            self.all_ok_at = now
        elif now - self.all_ok_at >= self.expect_grace_s:
            shown = ", ".join(repr(p) for p in missing_expect)
            raise self.fail(
                f"the engine serves, but its log never showed health.expect_log pattern(s) {shown}; "
                "the expected code path is not active"
            )
        return None


class _LogPump:
    """Follows the container's log in a thread and queues ``(arrival time, line)``, then ``_END``."""

    def __init__(self, docker: DockerEngine, container_id: str, clock: Callable[[], float]) -> None:
        self.docker, self.container_id, self.clock = docker, container_id, clock
        self.lines: queue.Queue[object] = queue.Queue()
        self.streams: list[LogLines] = []
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self, since: float | None) -> None:
        """Follow from ``since`` (epoch seconds, Docker's notion; None: from the start)."""
        self.thread = threading.Thread(target=self._run, args=(since,), name="servectl-log-follow", daemon=True)
        self.thread.start()

    def _run(self, since: float | None) -> None:
        stream: LogLines | None = None
        try:
            stream = self.docker.logs(self.container_id, follow=True, since=since)
            self.streams.append(stream)
            if self.stop.is_set():  # the gate ended before the stream was listed: it may not close it
                return
            for line in stream:
                if self.stop.is_set():
                    break
                self.lines.put((self.clock(), line))
        except Exception as e:  # the engine went away: the state check says what happened
            self.lines.put((self.clock(), e))
        finally:
            if stream is not None:
                stream.close()
            self.lines.put(_END)

    def take(self, wait_s: float) -> list[object]:
        """What arrived within ``wait_s`` (waiting for the first item only)."""
        items: list[object] = []
        try:
            items.append(self.lines.get(timeout=wait_s))
            while True:
                items.append(self.lines.get_nowait())
        except queue.Empty:
            pass
        return items

    def close(self) -> None:
        self.stop.set()
        for stream in self.streams:
            stream.close()
        if self.thread is not None:
            self.thread.join(timeout=0.5)


@dataclass(frozen=True)
class GateOptions:
    """The gate's pace and clocks (servectl's defaults; tests pass a fake clock).

    Attributes:
        clock, sleep: monotonic seconds and the pause between polls once the log stream has ended.
        poll_s: probe period (at most 0.25 s: the gate adds no noticeable delay).
        inspect_every_s: how often the container's state is read besides when its log ends.
        fatal_grace_s, expect_grace_s: see :class:`GateMachine`.
        secrets: the secret values the profile references, taken out of the last lines a failure shows.
    """

    clock: Callable[[], float]
    sleep: Callable[[float], None]
    poll_s: float = 0.25
    inspect_every_s: float = 1.0
    fatal_grace_s: float = 0.5
    expect_grace_s: float = 1.0
    secrets: tuple[str, ...] = ()


def wait_until_serving(
    *,
    plan: LaunchPlan,
    container_id: str,
    docker: DockerEngine,
    http: HttpAdapter,
    on_phase: Callable[[Progress], None] | None = None,
    api_key: str | None = None,
    started_at: float | None = None,
    opts: GateOptions,
) -> GatePassage:
    """Wait until the container of ``plan`` serves, or fail fast (the decisions: :class:`GateMachine`).

    Args:
        plan, container_id, docker: the launch plan, the started container, the engine (logs and state).
        http, on_phase: the HTTP adapter whose client (for ``plan.url``) probes; gets each phase and progress.
        api_key: the server's API key, for ``/v1/models`` and the chat completion (never logged).
        started_at: ``opts.clock()`` when the container was created (default: now).
        opts: :class:`GateOptions`.

    Raises:
        StartupFailed: with the last log lines, the container's exit code and OOM flag where it exited.
            The container is left as it is; the caller removes it.
    """
    clock, sleep, poll_s, inspect_every_s = opts.clock, opts.sleep, opts.poll_s, opts.inspect_every_s
    fatal_grace_s, expect_grace_s = opts.fatal_grace_s, opts.expect_grace_s
    gate = GateMachine(plan, clock() if started_at is None else started_at, fatal_grace_s, expect_grace_s)
    gate.watcher.secrets = opts.secrets
    gate.last_line_t = clock()  # the stall timeout counts from when the gate starts reading
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def report(detail: str | None = None, at: float | None = None) -> None:
        w = gate.watcher
        if on_phase is not None:
            elapsed = (clock() if at is None else at) - gate.t0
            on_phase(Progress(w.phase, w.detail if detail is None else detail, w.percent, elapsed))

    pump = _LogPump(docker, container_id, clock)
    pump.start(None)
    next_poll, next_inspect = clock(), clock() + inspect_every_s
    stream_ended = False
    report("container started")
    try:
        with http.client(plan.url) as client:
            while True:
                wait = max(0.0, min(next_poll, next_inspect) - clock())
                if gate.fatal_at is not None:
                    wait = min(wait, max(0.0, gate.fatal_at + fatal_grace_s - clock()))
                items = [] if stream_ended else pump.take(wait)
                if stream_ended and wait > 0:
                    sleep(min(wait, poll_s))
                changed, stream_ended = _feed(gate, items, report, stream_ended)
                now = clock()
                if stream_ended or now >= next_inspect:
                    next_inspect = now + inspect_every_s
                    _raise_unless_running(gate, docker, container_id, now, sleep)
                    if stream_ended:  # the log stream broke but the container runs: follow again
                        stream_ended = False
                        pump.start(time.time())  # Docker's `since` is wall-clock time
                gate.check(now)
                if gate.fatal_pending:
                    continue
                if now >= next_poll or (changed and gate.watcher.ready_line_seen):
                    _probe(plan, client, headers, gate.checks, gate.watcher, gate.fail, report)
                    next_poll = clock() + poll_s
                result = gate.passed(clock())
                if result is not None:
                    report("serving")
                    return result
    finally:
        pump.close()


def _feed(gate: GateMachine, items: list[object], report: Callable[..., None], stream_ended: bool) -> tuple[bool, bool]:
    """Hand the pumped lines to the gate: (whether the phase moved, whether the stream ended)."""
    changed = False
    for item in items:
        if item is _END:
            stream_ended = True
        elif isinstance(item, tuple) and not isinstance(item[1], Exception) and gate.feed(item[0], str(item[1])):
            changed = True
            report(at=item[0])
    return changed, stream_ended


def _raise_unless_running(
    gate: GateMachine, docker: DockerEngine, container_id: str, now: float, sleep: Callable[[float], None]
) -> None:
    state = docker.inspect(container_id)
    if state is None:
        raise gate.container_gone(now)
    if not state.running:
        raise gate.container_exited(_final_state(docker, container_id, state, sleep), now)


def _final_state(
    docker: DockerEngine, container_id: str, state: ContainerState, sleep: Callable[[float], None]
) -> ContainerState:
    """The state after exit; Docker may need a moment to record the exit code and OOM flag."""
    for _ in range(10):
        if state.exit_code is not None:
            break
        sleep(0.05)
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
