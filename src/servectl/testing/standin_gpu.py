"""A GPU inventory over the stand-in engines' fake memory ledgers: NVML as the stand-ins would make it read.

The stand-in (:mod:`servectl.standin.memory`) keeps, per tensor-parallel rank, the bytes its weights, KV cache
and CUDA graphs would hold, and gives them up and takes them back through SGLang's memory-saver endpoints.
:class:`StandinGpuInventory` asks each engine (``GET /get_server_info``, ``standin.gpu_memory``) and adds up,
per card, what the engines placed on it hold; an engine that does not answer holds nothing (its container is
gone). So the release, the verification against NVML and the resume run through the same
:class:`~servectl.adapters.gpu.GpuInventory` interface as on a GPU host.
"""

from __future__ import annotations

import json
import urllib.request
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from servectl.adapters.gpu import MIB, GpuDevice, GpuProcess, GpuSnapshot
from servectl.testing.fakes import DRIVER_RESERVED_MIB, RTX_PRO_6000_TOTAL_MIB, make_device


@dataclass(frozen=True)
class StandinOnCards:
    """A stand-in engine and the cards its ranks are on (rank i on ``cards[i]``).

    ``pid`` is the process NVML lists for it: give the container's main pid (``State.Pid``) so that servectl
    finds its container from ``/proc/<pid>/cgroup`` as it does for a real engine; default a stable fake one.
    """

    base_url: str
    cards: tuple[int, ...]
    pid: int | None = None


def held_bytes_per_rank(base_url: str, *, timeout_s: float = 2.0) -> list[int] | None:
    """What a stand-in reports its ranks hold (None: it does not answer, or is no stand-in)."""
    try:
        with urllib.request.urlopen(f"{base_url}/get_server_info", timeout=timeout_s) as response:
            info = json.loads(response.read())
    except (OSError, ValueError):
        return None
    memory = (info.get("standin") or {}).get("gpu_memory") if isinstance(info, dict) else None
    if not isinstance(memory, dict):
        return None
    return [int(b) for b in memory.get("held_bytes_per_rank") or []]


class StandinGpuInventory:
    """A :class:`~servectl.adapters.gpu.GpuInventory` whose cards hold what the stand-ins on them report.

    Args:
        engines: called at each snapshot: the stand-ins to ask and their cards.
        cards: how many cards the host has (indices 0..cards-1).
        total_mib, reserved_mib: each card's size and the driver's own share, as NVML reports them.
    """

    def __init__(
        self,
        engines: Callable[[], Iterable[StandinOnCards]],
        *,
        cards: int = 2,
        total_mib: int = RTX_PRO_6000_TOTAL_MIB,
        reserved_mib: int = DRIVER_RESERVED_MIB,
    ) -> None:
        self._engines = engines
        self._cards = cards
        self._total_mib = total_mib
        self._reserved_mib = reserved_mib
        self.calls = 0

    def snapshot(self) -> GpuSnapshot:
        """Every card now: memory used and one process per stand-in rank on it."""
        self.calls += 1
        processes: dict[int, list[GpuProcess]] = {i: [] for i in range(self._cards)}
        for engine in self._engines():
            held = held_bytes_per_rank(engine.base_url)
            for rank, card in enumerate(engine.cards):
                if held is None or rank >= len(held) or card not in processes:
                    continue
                pid = engine.pid or 100_000 + zlib.crc32(engine.base_url.encode()) % 800_000
                processes[card].append(GpuProcess(pid=pid, used_memory_bytes=held[rank]))
        devices: Sequence[GpuDevice] = [
            make_device(i, total_mib=self._total_mib, reserved_mib=self._reserved_mib, processes=processes[i])
            for i in range(self._cards)
        ]
        return GpuSnapshot(driver_version="580.95.05", cuda_driver_version=(13, 0), devices=tuple(devices))

    def used_mib(self, card: int) -> int:
        """MiB in use on ``card`` now (for assertions)."""
        device = self.snapshot().device(card)
        assert device is not None and device.memory_used_bytes is not None
        return device.memory_used_bytes // MIB


__all__ = ["StandinGpuInventory", "StandinOnCards", "held_bytes_per_rank"]
