"""servectl's state folder: the lock that serialises service changes, and the history of what ran.

Docker is the source of truth for what runs *now*; the history only remembers what ran *before* (which
profile ran when, what a swap replaced), for ``swap`` and ``rollback``. Each write replaces the history file
atomically (temporary file, fsync, ``os.replace``), so a crash never leaves half a record.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from servectl.errors import LockTimeout, ServectlError

LOCK_FILE = "servectl.lock"
HISTORY_FILE = "history.json"
#: The history keeps this many events (older ones are dropped when a new one is written).
HISTORY_LIMIT = 1000
#: Events that mean "this profile started serving"; their ``profile`` key names it.
RUN_EVENTS = frozenset({"up", "swap", "rollback"})


def atomic_write_text(path: Path, text: str, *, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` so that readers see the old or the new content, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


# -- the lock -------------------------------------------------------------------------------------------
# Held locks of this process by path: re-entering (swap calls up while it holds the lock) must not wait
# on itself, which flock on a second descriptor would do.
_held: dict[Path, int] = {}
_held_guard = threading.Lock()


class StateLock:
    """An exclusive, re-entrant (within the process) lock on the state folder.

    Only one servectl process at a time changes services. A second one waits up to ``timeout_s`` and then
    raises :class:`LockTimeout` naming the process that holds the lock and what it is doing.

    Args:
        state_dir: servectl's state folder (created if missing).
        timeout_s: how long to wait for another process to finish.
        purpose: what this process is doing (shown to a process that waits), e.g. "up demo".
        poll_s: how often to retry while waiting.
    """

    def __init__(self, state_dir: Path, timeout_s: float, *, purpose: str = "", poll_s: float = 0.05) -> None:
        self.path = Path(state_dir) / LOCK_FILE
        self.timeout_s = timeout_s
        self.purpose = purpose or " ".join(Path(sys.argv[0]).name.split() + sys.argv[1:])
        self.poll_s = poll_s
        self._fd: int | None = None
        self._key: Path | None = None

    def __enter__(self) -> StateLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lock, waiting at most ``timeout_s``.

        Raises:
            LockTimeout: another process held it all that time.
            ServectlError: the state folder cannot be written.
        """
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ServectlError(
                f"cannot create the state folder {self.path.parent}: {e.strerror}; "
                "set SERVECTL_HOME to a writable folder"
            ) from e
        key = self.path.resolve()
        with _held_guard:
            if key in _held:
                _held[key] += 1
                self._key = key
                return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise ServectlError(f"cannot open the lock file {self.path}: {e.strerror}") from e
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    os.close(fd)
                    raise ServectlError(f"cannot lock {self.path}: {e.strerror}") from e
            if time.monotonic() >= deadline:
                holder = _read_holder(fd)
                os.close(fd)
                raise LockTimeout(
                    f"another servectl process, {holder}, is changing services (lock {self.path}); "
                    f"waited {self.timeout_s:g} s: let it finish, then try again"
                )
            time.sleep(self.poll_s)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "purpose": self.purpose, "since": time.time()}).encode(), 0)
        with _held_guard:
            _held[key] = 1
        self._fd, self._key = fd, key

    def release(self) -> None:
        """Give the lock back (the outermost release of this process unlocks the file)."""
        key = self._key
        if key is None:
            return
        self._key = None
        with _held_guard:
            _held[key] -= 1
            if _held[key] > 0:
                return
            del _held[key]
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _read_holder(fd: int) -> str:
    try:
        raw = os.pread(fd, 4096, 0).decode("utf-8", errors="replace")
        info = json.loads(raw)
        since = time.strftime("%H:%M:%S", time.localtime(float(info["since"])))
        purpose = f" ({info['purpose']}, since {since})" if info.get("purpose") else f" (since {since})"
        return f"pid {int(info['pid'])}{purpose}"
    except (OSError, ValueError, KeyError, TypeError):
        return "pid unknown"


# -- history --------------------------------------------------------------------------------------------
class History:
    """The record of what ran: one JSON list of events, oldest first, replaced atomically on each write.

    An event is a JSON object with at least ``event`` (e.g. "up", "down", "swap", "failed") and ``t``
    (epoch seconds, added when missing); run events ("up", "swap", "rollback") carry ``profile``.
    """

    def __init__(self, state_dir: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(state_dir) / HISTORY_FILE
        self._clock = clock

    def record(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """Append ``event`` (a copy with ``t`` set) and return what was stored."""
        if "event" not in event:
            raise ValueError("a history event needs an 'event' key")
        stored = {"t": self._clock(), **event}
        json.dumps(stored)  # fail here, not halfway through a write, if it is not JSON
        with self._write_lock():
            events = self.events()
            events.append(stored)
            atomic_write_text(self.path, json.dumps(events[-HISTORY_LIMIT:], indent=1) + "\n")
        return stored

    def events(self) -> list[dict[str, Any]]:
        """All events, oldest first (an unreadable file is an error naming it)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ServectlError(f"{self.path}: not valid JSON ({e}); move it aside to start a new history") from e
        if not isinstance(data, list):
            raise ServectlError(f"{self.path}: expected a list of events; move it aside to start a new history")
        return [e for e in data if isinstance(e, dict)]

    def last_run(self) -> dict[str, Any] | None:
        """The latest run event (a profile that started serving), or None."""
        return next((e for e in reversed(self.events()) if e.get("event") in RUN_EVENTS), None)

    def previous_profile(self) -> str | None:
        """The profile that served before the latest one (the rollback target), or None.

        A run event's ``replaced`` key (the profile it took over from) wins; else the run before it with
        another profile name.
        """
        runs = [e for e in self.events() if e.get("event") in RUN_EVENTS and e.get("profile")]
        if not runs:
            return None
        last = runs[-1]
        replaced = last.get("replaced")
        if isinstance(replaced, str) and replaced:
            return replaced
        return next((str(e["profile"]) for e in reversed(runs[:-1]) if e["profile"] != last["profile"]), None)

    def ready_container_ids(self) -> set[str]:
        """Ids of containers that passed the health gate (so a later failing probe means "unhealthy")."""
        return {str(e["container_id"]) for e in self.events() if e.get("event") in RUN_EVENTS and e.get("container_id")}

    @contextlib.contextmanager
    def _write_lock(self) -> Iterator[None]:
        # Separate from StateLock: history writes are short, and `status` may record without the big lock.
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_name(HISTORY_FILE + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
