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
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, Protocol

from servectl.adapters.state_sharing import SHARED_GID, file_mode, make_folder, shared, with_group
from servectl.errors import LockTimeout, ServectlError, StateAccessDenied, StateDamaged
from servectl.files import FILE_MODE, FileRefused, kind_of, read_bounded, write_atomic

LOCK_FILE = "servectl.lock"
HISTORY_FILE = "history.json"
#: Containers that passed the health gate, one empty file per container id (see :class:`GateRecord`).
GATE_DIR = "gate-passed"
#: Under :data:`GATE_DIR`: containers servectl created whose gate has not passed yet.
PENDING_DIR = "pending"
#: A state file larger than this is damage, not data (the history keeps 1,000 small events).
MAX_STATE_BYTES = 64 * 2**20
#: The history keeps this many events (older ones are dropped when a new one is written).
HISTORY_LIMIT = 1000
#: Events that mean "this profile started serving"; their ``profile`` key names it.
RUN_EVENTS = frozenset({"up", "swap", "rollback"})


def atomic_write_text(path: Path, text: str, *, mode: int = FILE_MODE) -> None:
    """Write ``text`` to ``path`` so that readers see the old or the new content, never a mix.

    In a shared state folder (:func:`share_state_folder`) the group gets the owner's rights on the file.

    Raises:
        FileRefused: a FIFO, folder, socket or device is at ``path`` (:func:`servectl.files.write_atomic`)."""
    make_folder(path.parent)
    write_atomic(path, text.encode("utf-8"), mode=file_mode(path.parent, mode))


def read_state_json(path: Path, *, what: str, fix: str) -> Any:
    """The JSON in state file ``path``, or None when it does not exist.

    Every way the file can be damaged (a folder, unreadable, too big, not UTF-8, not JSON, nested too deep)
    is one :class:`StateDamaged` line: ``<path>: <what> <is damaged how>; <fix>``.
    """
    try:  # a FIFO, socket, device, folder or link loop is refused without blocking
        raw = read_bounded(path, limit_bytes=MAX_STATE_BYTES, what=what)
    except FileNotFoundError:
        return None
    except FileRefused as e:
        reason = e.reason.split(";")[0]
        damage = f"the {what} {reason}" if reason.startswith("is ") else f"{reason} (the {what})"
        raise StateDamaged(f"{path}: {damage}; {fix}", path=path) from None
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise StateDamaged(f"{path}: the {what} is not text (byte {e.start}); {fix}", path=path) from None
    except json.JSONDecodeError as e:
        raise StateDamaged(
            f"{path}: the {what} is not valid JSON ({e.msg}, line {e.lineno}); {fix}", path=path
        ) from None
    except (RecursionError, ValueError) as e:  # nested too deep; an integer too long to convert
        reason = "nested too deep" if isinstance(e, RecursionError) else "a number too long"
        raise StateDamaged(f"{path}: the {what} is not usable JSON ({reason}); {fix}", path=path) from None


def prove_writable(state_dir: Path, *, folders: Iterable[str] = (), files: Iterable[str] = ()) -> None:
    """Prove, before anything changes, that servectl can write what it keeps in ``state_dir``.

    The state folder and each of ``folders`` (relative, parents first) must be a writable folder, or absent
    under one; each of ``files`` a regular file, or absent. A command calls this before it stops or starts
    anything, so a damaged state folder stops it there instead of halfway (a service stopped, its successor
    unable to record its start).

    Raises:
        StateDamaged: one line naming the first entry that is not so, what it is, and the fix.
    """
    _writable_folder(Path(state_dir))
    for folder in folders:
        _writable_folder(Path(state_dir) / folder)
    for name in files:
        path = Path(state_dir) / name
        mode = _mode(path)
        if mode is not None and not stat.S_ISREG(mode):
            raise StateDamaged(
                f"{path}: is {kind_of(mode)} where servectl keeps a file; nothing was changed: "
                "move it aside, then run the command again",
                path=path,
            )


def _writable_folder(path: Path) -> None:
    mode = _mode(path)
    if mode is None:
        return  # created when needed; its parent was checked first
    if not stat.S_ISDIR(mode):
        raise StateDamaged(
            f"{path}: is {kind_of(mode)} where servectl keeps a folder; nothing was changed: move it aside "
            "(servectl creates the folder again), then run the command again",
            path=path,
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise StateDamaged(
            f"{path}: servectl cannot write in this folder; nothing was changed: make it writable for this user",
            path=path,
        )


def _mode(path: Path) -> int | None:
    """``st_mode`` of ``path`` (links followed), or None when it does not exist."""
    try:
        return os.stat(path).st_mode
    except FileNotFoundError:
        return None if not os.path.lexists(path) else _dangling(path)
    except OSError as e:
        raise StateDamaged(
            f"{path}: cannot be checked ({e.strerror or e}); nothing was changed: move it aside", path=path
        ) from None


def _dangling(path: Path) -> NoReturn:
    """A symbolic link to nothing: writing through it would create its target somewhere else."""
    raise StateDamaged(f"{path}: is a symbolic link to nothing; nothing was changed: remove it", path=path)


def set_aside(path: Path, *, clock: Callable[[], float]) -> Path:
    """Move a damaged state file out of the way (``<name>.damaged-<time>``) and return where it went."""
    target = path.with_name(f"{path.name}.damaged-{int(clock())}")
    n = 0
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.damaged-{int(clock())}-{n}")
    os.replace(path, target)
    return target


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
            make_folder(self.path.parent)
        except OSError as e:
            raise ServectlError(
                f"cannot create the state folder {self.path.parent}: {e.strerror}; "
                "set SERVECTL_HOME to a writable folder"
            ) from e
        key = self.path.parent.resolve() / self.path.name  # the file itself may be a link loop (refused below)
        with _held_guard:
            if key in _held:
                _held[key] += 1
                self._key = key
                return
        fd = _open_lock_file(self.path, "the lock file")
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


def _open_lock_file(path: Path, what: str) -> int:
    """A descriptor on lock file ``path`` (created if missing; in a shared state folder, writable by its group);
    it must be a regular file (a FIFO or device would take the lock but not its holder's note).

    Raises:
        StateAccessDenied: this user may not open it (who owns it, who we are, the fix).
        StateDamaged: it is not a file, or cannot be opened for another reason.
    """
    fix = "no servectl process uses it: remove it and try again"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except IsADirectoryError:
        raise StateDamaged(f"{path}: {what} is a folder; {fix}", path=path) from None
    except PermissionError as e:
        raise StateAccessDenied(_denied(path, what)) from e
    except OSError as e:
        raise StateDamaged(f"{path}: cannot open {what} ({e.strerror}); {fix}", path=path) from e
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise StateDamaged(f"{path}: {what} is {kind_of(st.st_mode)}, not a file; {fix}", path=path)
    wanted = with_group(stat.S_IMODE(st.st_mode))
    if st.st_uid == os.geteuid() and wanted != stat.S_IMODE(st.st_mode) and shared(path.parent):
        with contextlib.suppress(OSError):
            os.fchmod(fd, wanted)
    return fd


def _denied(path: Path, what: str) -> str:
    """One line for a state file this user may not open: not damage, a matter of owners."""
    try:
        st = os.stat(path)
        owner = f"owned by uid {st.st_uid}, gid {st.st_gid}, {stat.filemode(st.st_mode)}"
    except OSError:
        try:
            st = os.stat(path.parent)
        except OSError:
            return f"{path}: cannot open {what}: its folder cannot be read by uid {os.geteuid()}; fix its rights"
        owner = f"missing, and its folder is owned by uid {st.st_uid}, gid {st.st_gid}, {stat.filemode(st.st_mode)}"
    me = f"uid {os.geteuid()}, gid {os.getegid()}"
    if st.st_uid == 0 and os.geteuid() != 0:
        fix = (
            "if this is the gateway container, start it with `servectl gateway up` as root (which shares the "
            f"state folder with its group {SHARED_GID}); else run this as root, or chown the state folder to this user"
        )
    else:
        fix = f"run this as uid {st.st_uid}, or give this user write access (chown or chmod g+rw {path})"
    return f"{path}: {what} is {owner}, and servectl runs as {me}, which may not open it: {fix}"


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
class HistoryLog(Protocol):
    """What commands need of the history: append an event, read them all (:class:`History`, or a fake)."""

    def record(self, event: Mapping[str, Any]) -> object: ...

    def events(self) -> Sequence[Mapping[str, Any]]: ...

    def readable_events(self) -> tuple[Sequence[Mapping[str, Any]], str | None]:
        """The events and None, or no events and the one-line warning of why they cannot be read."""
        ...


class History:
    """The record of what ran: one JSON list of events, oldest first, replaced atomically on each write.

    An event is a JSON object with at least ``event`` (e.g. "up", "down", "swap", "failed") and ``t``
    (epoch seconds, added when missing); run events ("up", "swap", "rollback") carry ``profile``.

    The file is data that can be damaged. Reading a damaged history raises :class:`StateDamaged` (one
    line naming the file); entries of the wrong shape are skipped. Writing to a damaged history moves
    it aside (``history.json.damaged-<time>``) and starts a new one, so that recording what just happened
    never fails because of what happened before; ``warn`` is told where the old file went.
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        clock: Callable[[], float],
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.path = Path(state_dir) / HISTORY_FILE
        self._clock = clock
        self._warn = warn or _warn_stderr
        #: Entries of the wrong shape in the file as last read (not an event, or a field of the wrong type).
        self.malformed = 0

    def record(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """Append ``event`` (a copy with ``t`` set) and return what was stored."""
        if "event" not in event:
            raise ValueError("a history event needs an 'event' key")
        stored = {"t": self._clock(), **event}
        json.dumps(stored)  # fail here, not halfway through a write, if it is not JSON
        with self._write_lock():
            try:
                events = self.events()
            except StateDamaged as err:
                moved = set_aside(self.path, clock=self._clock)
                self._warn(f"{err.message.split(';')[0]}; moved it to {moved} and started a new history")
                events = []
            if self.malformed:
                self._warn(f"{self.malformed_note()}; rewriting the history without them")
            events.append(stored)
            try:
                atomic_write_text(self.path, json.dumps(events[-HISTORY_LIMIT:], indent=1) + "\n")
            except OSError as e:
                raise StateDamaged(
                    f"{self.path}: cannot write the history ({e.strerror}); make the state folder writable",
                    path=self.path,
                ) from e
        return stored

    def events(self) -> list[dict[str, Any]]:
        """All well-formed events, oldest first.

        Raises:
            StateDamaged: the file is not a JSON list (a folder, binary, truncated...).
        """
        fix = "move it aside (a new history starts on the next up/swap/down)"
        data = read_state_json(self.path, what="history", fix=fix)
        if data is None:
            return []
        if not isinstance(data, list):
            raise StateDamaged(f"{self.path}: the history is not a list of events; {fix}", path=self.path)
        events: list[dict[str, Any]] = []
        self.malformed = 0
        for entry in data:
            clean = _clean_event(entry)
            if clean is None or len(clean) != _fields(entry):
                self.malformed += 1  # not an event, or a field of the wrong type was dropped
            if clean is not None:
                events.append(clean)
        return events

    def malformed_note(self) -> str:
        """One line on the entries of the wrong shape the last read ignored ('' when there were none)."""
        n = self.malformed
        if not n:
            return ""
        entries = "entry" if n == 1 else "entries"
        return (
            f"{self.path}: {n} history {entries} of the wrong shape (not an event, or a field of a wrong type) ignored"
        )

    def last_run(self) -> dict[str, Any] | None:
        """The latest run event (a profile that started serving), or None."""
        return next((e for e in reversed(self.events()) if e.get("event") in RUN_EVENTS), None)

    def previous_profile(self) -> str | None:
        """The profile that served before the latest one (the rollback target), or None: :func:`previous_profile`
        of the newest run's profile."""
        events = self.events()
        last = next((e for e in reversed(events) if e.get("event") in RUN_EVENTS and e.get("profile")), None)
        return None if last is None else previous_profile(events, str(last["profile"]))

    def readable_events(self) -> tuple[list[dict[str, Any]], str | None]:
        """The events and None, or no events and the one-line warning of why the history is unreadable.

        For read-only commands: they go on with what Docker says and show the warning.
        """
        try:
            events = self.events()
        except StateDamaged as err:
            return [], err.message
        return events, self.malformed_note() or None

    @contextlib.contextmanager
    def _write_lock(self) -> Iterator[None]:
        # Separate from StateLock: history writes are short, and `status` may record without the big lock.
        make_folder(self.path.parent)
        fd = _open_lock_file(self.path.with_name(HISTORY_FILE + ".lock"), "the history lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


#: Keys of an event that must be text when present; an entry with another type there loses that key.
_TEXT_KEYS = ("profile", "replaced", "container_id", "container_name", "plan_hash", "reason")


def previous_profile(events: Sequence[Mapping[str, Any]], current: str) -> str | None:
    """The profile that ran before ``current``, from history events: the one home of that rule.

    The newest run event (``up``, ``swap``, ``rollback``) of ``current`` names what it ``replaced``; without
    that (or when it names ``current`` itself), the newest earlier run event of another profile. None when
    ``current`` never ran or nothing ran before it. A restore after a failed or interrupted transaction (an
    ``up`` with ``restored_after``) is no step of that chain: the service runs on from its own run, so what ran
    before it is what ran before that run. (:meth:`History.previous_profile` asks it for the newest run's
    profile, and rollback for the running one.)
    """
    runs = [e for e in events if e.get("event") in RUN_EVENTS and e.get("profile") and not e.get("restored_after")]
    for index in range(len(runs) - 1, -1, -1):
        if runs[index]["profile"] != current:
            continue
        replaced = runs[index].get("replaced")
        if isinstance(replaced, str) and replaced and replaced != current:
            return replaced
        return next((str(e["profile"]) for e in reversed(runs[:index]) if e["profile"] != current), None)
    return None


def _clean_event(entry: object) -> dict[str, Any] | None:
    """The event with keys of the wrong type dropped; None when it is not an event at all."""
    if not isinstance(entry, dict) or not isinstance(entry.get("event"), str):
        return None
    # a text field that is null (``replaced`` of a swap that replaced nothing) is absent, not of a wrong type
    event = {k: v for k, v in entry.items() if k not in _TEXT_KEYS or isinstance(v, str)}
    if not isinstance(event.get("t", 0.0), int | float) or isinstance(event.get("t"), bool):
        event.pop("t")
    return event


def _fields(entry: dict[str, Any]) -> int:
    """How many fields a well-formed event keeps of ``entry``: all but null text fields."""
    return sum(1 for k, v in entry.items() if not (k in _TEXT_KEYS and v is None))


def _warn_stderr(line: str) -> None:
    sys.stderr.write(f"warning: {line}\n")


# -- gate passage ---------------------------------------------------------------------------------------
class GateRecord:
    """Which containers passed the health gate: one empty file per container id under ``gate-passed/``.

    A container label cannot change after create, so passage is kept here, written the moment the gate
    passes; a later servectl (after a crash or ``kill -9``) can then tell a service that once served from
    one that never did. Ids are Docker's hex ids; anything else is ignored.
    """

    def __init__(self, state_dir: Path) -> None:
        self.folder = Path(state_dir) / GATE_DIR

    def mark(self, container_id: str) -> None:
        """Record that ``container_id`` passed the gate."""
        self._touch(self._path(container_id), "that the service passed its health gate")

    def mark_pending(self, container_name: str) -> None:
        """Record, before servectl creates container ``container_name``, that its gate has not passed yet.

        Keyed by name, so the record exists before the container does (a ``kill -9`` right after the create
        still leaves it). Only such a container counts as "never passed": one that servectl did not start
        (``docker compose up`` of a rendered file) has no record either way and is judged by its health probe.
        """
        self._touch(self._pending_path(container_name), "the service's start")

    def pending(self, container_name: str) -> bool:
        """Whether servectl started ``container_name`` and its gate has not passed (yet)."""
        return _is_file(self._pending_path(container_name))

    def clear_pending(self, container_name: str) -> None:
        """Drop the pending record of ``container_name`` (its gate passed, or it was removed)."""
        _unlink(self._pending_path(container_name))

    def passed(self, container_id: str) -> bool:
        """Whether ``container_id`` passed the gate (False when unknown or unreadable)."""
        return _is_file(self._path(container_id))

    def forget(self, container_id: str) -> None:
        """Drop the record of a removed container."""
        _unlink(self._path(container_id))

    def _touch(self, path: Path | None, what: str) -> None:
        if path is None:  # not a Docker id or name: nothing to key a record on
            return
        try:
            make_folder(path.parent)
            path.touch()
        except OSError as e:
            raise StateDamaged(
                f"{self.folder}: cannot record {what} ({e.strerror}); make the state folder writable",
                path=self.folder,
            ) from e

    def prune(self, keep: set[str]) -> None:
        """Forget every container not in ``keep`` (containers that no longer exist)."""
        try:
            entries = [e for e in self.folder.iterdir() if e.name != PENDING_DIR]  # pending records go by name
        except OSError:
            return
        for entry in entries:
            if entry.name not in keep:
                with contextlib.suppress(OSError):
                    entry.unlink()

    def _pending_path(self, container_name: str) -> Path | None:
        name = container_name.lstrip("/")
        if not name or len(name) > 255 or not all(c.isalnum() or c in "_.-" for c in name) or name[0] in ".-":
            return None
        return self.folder / PENDING_DIR / name

    def _path(self, container_id: str) -> Path | None:
        if not container_id or not all(c in "0123456789abcdef" for c in container_id) or len(container_id) > 128:
            return None
        return self.folder / container_id


def _is_file(path: Path | None) -> bool:
    return path is not None and path.is_file()


def _unlink(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


def ready_container_ids(history: HistoryLog) -> set[str]:
    """Ids of containers that passed the health gate by ``history`` (so a later failing probe means
    "unhealthy"); a damaged history counts as no events (read-only callers show its warning elsewhere)."""
    events, _ = history.readable_events()
    return {str(e["container_id"]) for e in events if e.get("event") in RUN_EVENTS and e.get("container_id")}
