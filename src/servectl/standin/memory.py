"""The stand-in's memory saver: SGLang's release/resume endpoints over a fake GPU (and host) memory ledger.

The routes, their body (``{"tags": [...]}``, empty or absent meaning every tag), the success answer (200,
JSON ``null``), the refusal (``{"error": {"message": ...}}``, 400) and the idle precondition come from SGLang
0.5.23's source through the memory-saver catalog (:mod:`servectl.profile.memory_saver`, which cites file and
line). The semantics follow ``weight_updater.py`` and ``torch_memory_saver_adapter.py``:

* without ``--enable-memory-saver`` the adapter is a no-op: release answers 200 and frees nothing;
* releasing ``weights`` without ``--enable-weights-cpu-backup`` drops them: a resume re-takes the memory
  but the weights are garbage (every completion comes out wrong) until the engine restarts;
* with the CPU backup, released weights are copied to host RAM and back on resume.

The ledger holds, per tensor-parallel rank, the bytes of each tag (the startup log's figures) plus a CUDA
context that never goes; ``GET /get_server_info`` reports it under ``standin.gpu_memory``, which
:class:`servectl.testing.standin_gpu.StandinGpuInventory` turns into an NVML-like snapshot.

What kills SGLang kills the stand-in (:class:`EngineDeath`, the catalog's ``crash``, ``tag_state`` and
``library`` entries): a release while a request runs (the scheduler's idle assertion), a resume of a tag that
was not released (``offload_tags.remove``: KeyError), each a "Scheduler hit an exception"; a second release
of a region the memory saver holds (torch_memory_saver's ``exit(1)``, seen by SGLang's subprocess watchdog).
Then the server's SIGQUIT handler kills the process tree: exit status 137, no answer. A body that does not
validate is FastAPI's 422 ``{"detail": [...]}`` with the errors pydantic gives for SGLang's schema
(``body_validation``); a release of ``kv_cache`` logs "Cache flushed successfully!"; the ``cuda_graph`` tag
frees graph memory only with ``SGLANG_MEMORY_SAVER_CUDA_GRAPH`` on (``graph_memory``).

Knobs (``STANDIN_*``, see :mod:`servectl.standin`): ``STANDIN_RELEASE_S`` / ``STANDIN_RESUME_S`` (how long
each call takes), ``STANDIN_BACKUP_GBPS`` (the CPU copy's rate: a weights release and resume take one rank's
weights over it), ``STANDIN_RELEASE_FAULT=keep`` (answers 200 but frees nothing), ``STANDIN_RESUME_FAULT=fail``
(resume is refused, memory stays released) or ``=wrong`` (resume succeeds, output is wrong); ``=die`` on either
(the call kills the server as on a busy release or an unreleased resume).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from servectl.profile.memory_saver import load_memory_saver

#: What a CUDA context, NCCL and the allocator keep on each card while the engine lives (fake figure).
CONTEXT_BYTES = 600 * 1024 * 1024

_CATALOG = load_memory_saver()
TAGS: tuple[str, ...] = tuple(_CATALOG["tags"]["all"])
RELEASE_PATH = str(_CATALOG["endpoints"]["release"]["path"])
RESUME_PATH = str(_CATALOG["endpoints"]["resume"]["path"])
#: Routes SGLang marks ``@auth_level(AuthLevel.ADMIN_OPTIONAL)``: with ``--admin-api-key`` only that key opens
#: them (the ``--api-key`` does not), else the ``--api-key`` (sglang/srt/utils/auth.py decide_request_auth).
ADMIN_OPTIONAL_PATHS = frozenset(
    str(e["path"]) for e in _CATALOG["endpoints"].values() if (e.get("auth") or {}).get("level") == "admin_optional"
)
LOADS_PATH = str(_CATALOG["load"]["path"])
ROUTE_METHODS: tuple[str, ...] = tuple(_CATALOG["endpoints"]["release"]["methods"])
IDLE_MESSAGE = str(_CATALOG["release_requires_idle"]["message"])
FLUSHED_LINE = str(_CATALOG["tag_state"]["flushed"]["template"])
_BODY = _CATALOG["body_validation"]
_LIBRARY = _CATALOG["library"]
#: The order SGLang's release and resume handlers act on the tags (weight_updater.py).
_RELEASE_ORDER = ("kv_cache", "weights", "cuda_graph")
_RESUME_ORDER = ("cuda_graph", "weights", "kv_cache")


class BodyInvalid(Exception):
    """A body FastAPI refuses before SGLang sees it: 422 ``{"detail": errors}``."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(errors)
        self.errors = errors

    status = int(_BODY["status"])

    def body(self) -> dict[str, Any]:
        return {str(_BODY["envelope"]): self.errors}


class EngineDeath(Exception):
    """A call that ends the SGLang server: the lines its scheduler (or library) prints before it goes.

    Attributes:
        scheduler_lines: what the scheduler prints (traceback, or the library's line).
        exception: True: an exception in the scheduler; False: the scheduler process exited (the library).
    """

    def __init__(self, scheduler_lines: list[str], *, exception: bool) -> None:
        super().__init__(scheduler_lines[-1])
        self.scheduler_lines = scheduler_lines
        self.exception = exception


def _traceback(function: str, line: int, text: str, error: str) -> list[str]:
    where = "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler_components/weight_updater.py"
    return [
        "Traceback (most recent call last):",
        f'  File "{where}", line {line}, in {function}',
        f"    {text}",
        error,
    ]


def _line_of(source: str) -> int:
    return int(source.rsplit(":", 1)[1])


def body_errors(raw: bytes, request_type: str) -> list[dict[str, Any]] | None:
    """FastAPI's validation errors for a memory-saver body (None: it validates); ``raw`` is the request body,
    already valid JSON or empty. The error shapes are pydantic's for SGLang's schema, from the catalog."""
    import json

    if not raw.strip():
        return [dict(e) for e in _BODY["missing_body"]]
    body = json.loads(raw)
    samples = _BODY["errors"][request_type]
    prefix = str(_BODY["loc_prefix"])

    def shaped(template: dict[str, Any], value: Any, loc_tail: list[Any] | None = None) -> dict[str, Any]:
        loc = list(template["loc"])
        if loc_tail is not None:
            loc = [loc[0], *loc_tail]
        return {**template, "loc": [prefix, *loc], "input": value}

    if not isinstance(body, dict):
        case = samples["not_object"]
        return [shaped(case[0], body), shaped(case[1], body)]
    tags = body.get("tags")
    if tags is None:
        return None
    if not isinstance(tags, list):
        case = samples["tags_not_list"]
        return [shaped(case[0], body), shaped(case[1], tags)]
    bad = [(i, t) for i, t in enumerate(tags) if not isinstance(t, str)]
    if not bad:
        return None
    case = samples["tag_not_string"]
    return [shaped(case[0], body), *(shaped(case[1], t, ["tags", i]) for i, t in bad)]


class MemoryCallError(Exception):
    """A release or resume SGLang would refuse; answered as ``_create_error_response`` does (400)."""

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self)}}


@dataclass
class MemoryLedger:
    """Bytes per rank of each tag, what is released, and the host copy of the weights.

    ``released`` is SGLang's ``offload_tags`` (every tag a release named, also where nothing was freed);
    ``paused`` the regions the memory saver holds paused (what a second pause ends the process on).
    """

    tp: int
    region_bytes: dict[str, int]
    enabled: bool
    cpu_backup: bool
    release_s: float = 0.0
    resume_s: float = 0.0
    backup_gbps: float = 0.0
    graph_pausable: bool = False
    retain_backup: bool = False
    backup_held: bool = False
    release_fault: str | None = None
    resume_fault: str | None = None
    released: set[str] = field(default_factory=set)
    paused: set[str] = field(default_factory=set)
    weights_garbage: bool = False
    last_resume_s: float | None = None
    last_release_s: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def tags_of(self, body: dict[str, Any]) -> list[str]:
        """The tags a (validated) request names; none or empty: all (weight_updater.py)."""
        raw = body.get("tags")
        if raw is None or raw == []:
            return list(TAGS)
        return [str(t) for t in raw]

    def _has_region(self, tag: str) -> bool:
        """Whether the memory saver holds allocations of ``tag`` (graph memory only with its variable on)."""
        return self.frees_memory and (tag != "cuda_graph" or self.graph_pausable)

    def _copy_s(self, tags: list[str]) -> float:
        """The CPU copy of one rank's weights at ``backup_gbps`` (0: none); with torch_memory_saver's
        ``TMS_RETAIN_CPU_BACKUP`` only the first release pays it (the pinned buffer is kept, the copy itself
        is ~20x faster: 0.32 s vs 6.5 s for 16 GiB on an H100, benchmarks/results/gpu-h100-issue38)."""
        if not (self.backup_gbps and self.cpu_backup and "weights" in tags and self._has_region("weights")):
            return 0.0
        full = self.region_bytes.get("weights", 0) / (self.backup_gbps * 1e9)
        if self.retain_backup and self.backup_held:
            return full / 20
        self.backup_held = self.retain_backup
        return full

    def release(self, tags: list[str], *, running_requests: int, log: Any = None) -> None:
        """Free ``tags`` (a no-op without the memory saver, or with ``STANDIN_RELEASE_FAULT=keep``).

        Raises:
            EngineDeath: a request runs, or a region of ``tags`` is paused already.
        """
        began = time.monotonic()
        if running_requests > 0 or self.release_fault == "die":
            source = str(_CATALOG["release_requires_idle"]["source"])
            raise EngineDeath(
                _traceback(
                    "release_memory_occupation",
                    _line_of(source),
                    "assert self.is_fully_idle(",
                    f"AssertionError: {IDLE_MESSAGE}",
                ),
                exception=True,
            )
        with self._lock:
            self.released.update(tags)
            for tag in _RELEASE_ORDER:
                if tag not in tags or not self._has_region(tag):
                    continue
                if tag in self.paused:
                    raise EngineDeath([str(_LIBRARY["pause_paused"])], exception=False)
                self.paused.add(tag)
        if "kv_cache" in tags and log is not None:
            log.tp(FLUSHED_LINE)
        time.sleep(self.release_s + self._copy_s(tags))
        self.last_release_s = time.monotonic() - began

    def resume(self, tags: list[str]) -> None:
        """Take ``tags`` back; without a CPU copy, released weights come back as garbage.

        Raises:
            EngineDeath: a tag of ``tags`` was not released (SGLang's ``offload_tags.remove``).
            MemoryCallError: ``STANDIN_RESUME_FAULT=fail``.
        """
        began = time.monotonic()
        with self._lock:
            for tag in tags:
                if tag not in self.released or self.resume_fault == "die":
                    source = str(_CATALOG["tag_state"]["resume_removes"])
                    raise EngineDeath(
                        _traceback(
                            "resume_memory_occupation",
                            _line_of(source),
                            "self.offload_tags.remove(tag)",
                            f"KeyError: {tag!r}",
                        ),
                        exception=True,
                    )
        time.sleep(self.resume_s + self._copy_s(tags))
        if self.resume_fault == "fail":
            raise MemoryCallError("resume_memory_occupation failed (STANDIN_RESUME_FAULT=fail)")
        with self._lock:
            if "weights" in tags and "weights" in self.paused and not self.cpu_backup:
                self.weights_garbage = True
            if self.resume_fault == "wrong":
                self.weights_garbage = True
            self.released.difference_update(tags)
            self.paused.difference_update(tags)
            self.last_resume_s = time.monotonic() - began

    @property
    def frees_memory(self) -> bool:
        return self.enabled and self.release_fault != "keep"

    def loads(self, running_requests: int) -> dict[str, Any]:
        """``GET /v1/loads`` (the catalog's ``load``): one DP rank's core numbers, the running requests in it."""
        load = dict(_CATALOG["load"]["core_defaults"])
        load.update({"timestamp": time.time(), str(_CATALOG["load"]["running"]): running_requests})
        return {"version": "0.5.23", "accelerator": None, "num_accelerators": self.tp, "loads": [load]}

    @property
    def output_is_wrong(self) -> bool:
        """Whether completions come out wrong: weights dropped (released, or resumed without their copy)."""
        with self._lock:
            return self.weights_garbage or "weights" in self.paused

    def report(self) -> dict[str, Any]:
        """What ``/get_server_info`` shows under ``standin.gpu_memory``."""
        with self._lock:
            gone = self.paused
            held = CONTEXT_BYTES + sum(b for tag, b in self.region_bytes.items() if tag not in gone)
            backup = self.region_bytes.get("weights", 0) * self.tp if self.cpu_backup and "weights" in gone else 0
            return {
                "memory_saver": self.enabled,
                "weights_cpu_backup": self.cpu_backup,
                "released_tags": sorted(self.released),
                "held_bytes_per_rank": [held] * self.tp,
                "region_bytes_per_rank": dict(self.region_bytes),
                "host_backup_bytes": backup,
                "last_resume_s": self.last_resume_s,
                "last_release_s": self.last_release_s,
            }


def ledger_for(args: dict[str, Any], weights_gb: float, kv_gb: float, graph_gb: float, settings: Any) -> MemoryLedger:
    """The ledger of an engine started with ``args``, from the startup log's per-GPU figures."""
    return MemoryLedger(
        tp=max(1, int(args.get("tp_size") or 1)),
        region_bytes={
            "weights": int(weights_gb * 1e9),
            "kv_cache": int(kv_gb * 1e9),
            "cuda_graph": int(graph_gb * 1e9),
        },
        enabled=bool(args.get("enable_memory_saver")),
        cpu_backup=bool(args.get("enable_weights_cpu_backup")),
        release_s=settings.release_s,
        resume_s=settings.resume_s,
        backup_gbps=settings.backup_gbps,
        graph_pausable=settings.graph_memory_saver,
        retain_backup=settings.retain_backup,
        release_fault=settings.release_fault,
        resume_fault=settings.resume_fault,
    )


__all__ = [
    "ADMIN_OPTIONAL_PATHS",
    "CONTEXT_BYTES",
    "FLUSHED_LINE",
    "IDLE_MESSAGE",
    "LOADS_PATH",
    "RELEASE_PATH",
    "RESUME_PATH",
    "ROUTE_METHODS",
    "TAGS",
    "BodyInvalid",
    "EngineDeath",
    "MemoryCallError",
    "MemoryLedger",
    "body_errors",
    "ledger_for",
]
