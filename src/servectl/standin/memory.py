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

Knobs (``STANDIN_*``, see :mod:`servectl.standin`): ``STANDIN_RELEASE_S`` / ``STANDIN_RESUME_S`` (how long
each call takes), ``STANDIN_RELEASE_FAULT=keep`` (answers 200 but frees nothing), ``STANDIN_RESUME_FAULT=fail``
(resume is refused, memory stays released) or ``=wrong`` (resume succeeds, output is wrong).
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
ROUTE_METHODS: tuple[str, ...] = tuple(_CATALOG["endpoints"]["release"]["methods"])
IDLE_MESSAGE = str(_CATALOG["release_requires_idle"]["message"])


class MemoryCallError(Exception):
    """A release or resume SGLang would refuse; answered as ``_create_error_response`` does (400)."""

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self)}}


@dataclass
class MemoryLedger:
    """Bytes per rank of each tag, what is released, and the host copy of the weights."""

    tp: int
    region_bytes: dict[str, int]
    enabled: bool
    cpu_backup: bool
    release_s: float = 0.0
    resume_s: float = 0.0
    release_fault: str | None = None
    resume_fault: str | None = None
    released: set[str] = field(default_factory=set)
    weights_garbage: bool = False
    last_resume_s: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def tags_of(self, body: dict[str, Any]) -> list[str]:
        """The tags a request names (none or empty: all); an unknown one is refused as SGLang's set does."""
        raw = body.get("tags")
        if raw is None or raw == []:
            return list(TAGS)
        if not isinstance(raw, list) or not all(isinstance(t, str) for t in raw):
            raise MemoryCallError("tags must be a list of strings")
        return list(raw)

    def release(self, tags: list[str], *, running_requests: int) -> None:
        """Free ``tags`` (a no-op without the memory saver, or with ``STANDIN_RELEASE_FAULT=keep``)."""
        if running_requests > 0:
            raise MemoryCallError(IDLE_MESSAGE)
        time.sleep(self.release_s)
        with self._lock:
            self.released.update(tags)  # SGLang records the tags even when its adapter is a no-op

    def resume(self, tags: list[str]) -> None:
        """Take ``tags`` back; without a CPU copy, released weights come back as garbage."""
        began = time.monotonic()
        time.sleep(self.resume_s)
        if self.resume_fault == "fail":
            raise MemoryCallError("resume_memory_occupation failed (STANDIN_RESUME_FAULT=fail)")
        with self._lock:
            if "weights" in tags and self.frees_memory and not self.cpu_backup:
                self.weights_garbage = True
            if self.resume_fault == "wrong":
                self.weights_garbage = True
            self.released.difference_update(tags)
            self.last_resume_s = time.monotonic() - began

    @property
    def frees_memory(self) -> bool:
        return self.enabled and self.release_fault != "keep"

    @property
    def output_is_wrong(self) -> bool:
        """Whether completions come out wrong: weights dropped (released, or resumed without their copy)."""
        with self._lock:
            return self.weights_garbage or (self.frees_memory and "weights" in self.released)

    def report(self) -> dict[str, Any]:
        """What ``/get_server_info`` shows under ``standin.gpu_memory``."""
        with self._lock:
            gone = self.released if self.frees_memory else set()
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
        release_fault=settings.release_fault,
        resume_fault=settings.resume_fault,
    )


__all__ = [
    "CONTEXT_BYTES",
    "IDLE_MESSAGE",
    "RELEASE_PATH",
    "RESUME_PATH",
    "ROUTE_METHODS",
    "TAGS",
    "MemoryCallError",
    "MemoryLedger",
    "ledger_for",
]
