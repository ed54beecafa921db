"""Peak VRAM per card while a benchmark point runs: :class:`VramWatch` and the sampler it starts per point.

The bench context supplies a reader (``BenchContext.used_vram``: each card the service uses, with its used
memory, e.g. from :class:`servectl.adapters.gpu.GpuInventory` snapshots). For every (prompt length,
concurrency) point, :meth:`VramWatch.point` starts a background thread that calls the reader every
:data:`VRAM_SAMPLE_INTERVAL_S` seconds (plus once when the point starts and once when it ends, so that even a
short point has two samples) and keeps the highest used memory per card.

A reader that fails (no NVML on this host, a driver that went away) makes the readings unknown, never the run:
the first failure turns the watch off for the rest of the run and leaves one note, :attr:`VramWatch.note`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

#: Pause between two readings of the cards while a point runs (NVML answers in milliseconds).
VRAM_SAMPLE_INTERVAL_S = 0.25
MIB = 2**20


class CardUsage(Protocol):
    """One card's used memory as the GPU inventory reports it (``servectl.adapters.gpu.GpuDevice`` fits)."""

    @property
    def index(self) -> int: ...

    @property
    def memory_used_bytes(self) -> int | None: ...


UsedVramReader = Callable[[], Sequence[CardUsage]]


@dataclass(frozen=True)
class CardPeak:
    """The highest used memory seen on one card during a point; ``None`` where the driver could not tell."""

    index: int
    peak_used_bytes: int | None

    @property
    def peak_used_mib(self) -> int | None:
        """The peak in whole MiB (rounded up: a peak is never shown lower than it was)."""
        return None if self.peak_used_bytes is None else -(-self.peak_used_bytes // MIB)


@dataclass(frozen=True)
class PeakVram:
    """What the sampler saw during one point: the peak per card and how many readings it took."""

    cards: tuple[CardPeak, ...]
    samples: int

    @property
    def highest_mib(self) -> int | None:
        """The peak of the fullest card, in MiB (None when no card's use is known)."""
        known = [c.peak_used_mib for c in self.cards if c.peak_used_mib is not None]
        return max(known) if known else None

    @property
    def total_bytes(self) -> int | None:
        """The sum of the per-card peaks (None unless every card's peak is known)."""
        if not self.cards or any(c.peak_used_bytes is None for c in self.cards):
            return None
        return sum(c.peak_used_bytes or 0 for c in self.cards)


class _Sampler:
    """One point's background reader; :meth:`stop` joins it and returns the peaks."""

    def __init__(self, watch: VramWatch) -> None:
        self._watch = watch
        self._peaks: dict[int, int | None] = {}
        self._samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-vram", daemon=True)

    def start(self) -> _Sampler:
        self._read()
        self._thread.start()
        return self

    def _read(self) -> None:
        cards = self._watch.read_once()
        if cards is None:
            return
        self._samples += 1
        for card in cards:
            used = card.memory_used_bytes
            before = self._peaks.get(card.index)
            first = card.index not in self._peaks  # an unknown first reading stays unknown until a known one
            if first or (used is not None and (before is None or used > before)):
                self._peaks[card.index] = used

    def _loop(self) -> None:
        while not self._stop.wait(self._watch.interval_s):
            if self._watch.broken:
                return
            self._read()

    def stop(self) -> PeakVram | None:
        self._stop.set()
        self._thread.join()
        self._read()
        if self._samples == 0:
            return None
        cards = tuple(CardPeak(index=i, peak_used_bytes=self._peaks[i]) for i in sorted(self._peaks))
        return PeakVram(cards=cards, samples=self._samples)


class VramWatch:
    """Peak VRAM per point for a whole run, through one reader; off for good after its first failure.

    Args:
        read: each card the service uses, with its used memory; ``None``: nothing to read (all unknown).
        interval_s: pause between readings while a point runs.
    """

    def __init__(self, read: UsedVramReader | None, *, interval_s: float = VRAM_SAMPLE_INTERVAL_S) -> None:
        self._read = read
        self.interval_s = interval_s
        self.note = ""
        self._lock = threading.Lock()

    @property
    def broken(self) -> bool:
        """Whether the reader failed (or there is none): the readings are unknown from here on."""
        return self._read is None

    def read_once(self) -> Sequence[CardUsage] | None:
        """One reading, or None once the reader has failed; the first failure becomes :attr:`note`."""
        with self._lock:
            read = self._read
        if read is None:
            return None
        try:
            return read()
        except Exception as err:  # NVML fails in many ways (no driver, card lost); the run goes on without it
            with self._lock:
                if self._read is not None:
                    self._read = None
                    self.note = f"peak VRAM unknown: the cards could not be read ({err})"
            return None

    def point(self) -> _Sampler | None:
        """A started sampler for one point (None when the watch is off)."""
        return None if self.broken else _Sampler(self).start()


def stop_sampler(sampler: _Sampler | None) -> PeakVram | None:
    """The peaks of a point's sampler (None for none, or when no reading succeeded)."""
    return None if sampler is None else sampler.stop()
