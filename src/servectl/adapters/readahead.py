"""Read a model's weight files ahead into the page cache, so that the engine that starts next reads them from RAM.

A swap's downtime is the old service's stop plus the new engine's start, and most of a cold start is reading the
weights from disk. Read before the stop (while the old service still serves), the same files come from the
page cache when the engine opens them: the kernel's cache is shared by the host and its containers. Reading
is plain sequential ``readinto`` of a reused buffer (what fills the cache for certain, unlike
``POSIX_FADV_WILLNEED``, which the kernel may cut short), bounded by a byte budget the caller takes from free
host RAM: more than that would only push the first files out of the cache again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from servectl.adapters.host import WeightFile
from servectl.errors import ServectlError

#: One read: large enough that syscalls cost nothing next to the copy, small enough to stay in the CPU caches.
CHUNK_BYTES = 8 * 2**20
#: How often progress is told, at most (bytes read between two calls).
PROGRESS_EVERY_BYTES = 256 * 2**20


@dataclass(frozen=True)
class ReadAhead:
    """What :func:`read_ahead` read: files and bytes, against all there were and the budget it had."""

    files_read: int
    files_total: int
    bytes_read: int
    bytes_total: int
    budget_bytes: int
    seconds: float

    @property
    def bounded(self) -> bool:
        """Whether the budget stopped the reading before the last file's end."""
        return self.bytes_read < self.bytes_total

    @property
    def rate_bytes_per_s(self) -> float | None:
        return self.bytes_read / self.seconds if self.seconds > 0 else None


def read_ahead(
    files: Sequence[WeightFile],
    *,
    budget_bytes: int,
    on_progress: Callable[[int, int], None] | None = None,
    clock: Callable[[], float],
    chunk_bytes: int = CHUNK_BYTES,
) -> ReadAhead:
    """Read ``files`` in order, at most ``budget_bytes`` in all, so that the page cache holds them.

    Args:
        files: what to read (see :func:`weight_files`).
        budget_bytes: stop after this many bytes (the rest of a file, and later files, stay unread).
        on_progress: ``(bytes_read, bytes_to_read)`` every :data:`PROGRESS_EVERY_BYTES` and at the end.
        clock: monotonic seconds.
        chunk_bytes: size of one read.

    Raises:
        ServectlError: a file cannot be opened or read (the message names it).
    """
    total = sum(f.size_bytes for f in files)
    target = max(0, min(total, budget_bytes))
    buffer = memoryview(bytearray(chunk_bytes))
    began = clock()
    count = [0, 0]  # bytes read, bytes read when progress was last told

    def tick(got: int) -> None:
        count[0] += got
        if on_progress is not None and count[0] - count[1] >= PROGRESS_EVERY_BYTES:
            count[1] = count[0]
            on_progress(count[0], target)

    files_read = 0
    for weight in files:
        if count[0] >= target:
            break
        _read_file(weight.path, min(weight.size_bytes, target - count[0]), buffer, tick)
        files_read += 1
    if on_progress is not None and count[1] != count[0]:
        on_progress(count[0], target)
    return ReadAhead(
        files_read=files_read,
        files_total=len(files),
        bytes_read=count[0],
        bytes_total=total,
        budget_bytes=budget_bytes,
        seconds=clock() - began,
    )


def _read_file(path: str, limit: int, buffer: memoryview, tick: Callable[[int], None]) -> int:
    """Read the first ``limit`` bytes of ``path`` (sequentially, so the kernel reads ahead too)."""
    read = 0
    try:
        with open(path, "rb", buffering=0) as handle:
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(handle.fileno(), 0, limit, os.POSIX_FADV_SEQUENTIAL)
            while read < limit:
                got = handle.readinto(buffer[: min(len(buffer), limit - read)])
                if not got:  # the file shrank since it was listed
                    break
                read += got
                tick(got)
    except OSError as err:
        raise ServectlError(
            f"reading {path} ahead: {err.strerror or err}; check the model folder, or swap with --no-stage"
        ) from err
    return read


__all__ = ["CHUNK_BYTES", "PROGRESS_EVERY_BYTES", "ReadAhead", "read_ahead"]
