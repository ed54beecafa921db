"""The one bounded reader for every file servectl reads (profiles, bases, adopted profiles, suites, the gateway
configuration, state files), and the one writer for every file it writes.

A path on the search path or in the state folder is untrusted: it may be a FIFO (``open`` would block until a
writer appears), a socket, a device (``/dev/zero`` never ends), a folder, a symbolic link loop, or a huge file.
:func:`read_bounded` refuses everything that is not a regular file *before* reading, without blocking (the
check is ``stat``, and the file is opened non-blocking and checked again on the descriptor, so a swap between
the two cannot make it block), and reads at most ``limit_bytes``. Each refusal is a :class:`FileRefused` with a
short reason; callers turn it into their own one-line error naming the file (a profile's row, a damaged state
file, a suite).

:func:`write_atomic` writes only over a regular file or nothing: a FIFO (opening it would block), a device, a
folder or a socket in the way is refused (:class:`FileRefused`) before anything is written; the new content goes
to a temporary file in the same folder and replaces the old at once (readers see the old or the new, never a
mix). :func:`backup_copy` copies the file being replaced, through the bounded reader, so only a regular file
ever gets a ``.bak``.

Example::

    try:
        raw = read_bounded(path, limit_bytes=4 * 2**20)
    except FileNotFoundError:
        ...
    except FileRefused as e:
        raise ProfileError(f"{path}: {e.reason}")
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

__all__ = [
    "FILE_MODE",
    "FileRefused",
    "backup_copy",
    "kind_of",
    "os_reason",
    "read_bounded",
    "read_text_bounded",
    "refuse_unwritable",
    "write_atomic",
]


class FileRefused(Exception):
    """A file was not read: ``reason`` says why in a few words ("is a FIFO (named pipe), not a regular file").

    Attributes:
        path: the file.
        reason: the phrase that follows the path in a message.
    """

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def kind_of(mode: int) -> str:
    """What an ``st_mode`` is, in words: "a folder", "a FIFO (named pipe)", "a regular file"..."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"


def _refuse_unless_regular(path: Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = kind_of(mode)
        raise FileRefused(path, f"is {kind}, not a regular file" if kind.startswith("a ") else f"is {kind}")


def os_reason(e: OSError) -> str:
    """An OSError of a read as the phrase after a path ("is a symbolic link loop...", "cannot read: ...")."""
    return _os_reason(e)


def _os_reason(e: OSError) -> str:
    if e.errno == errno.ELOOP:
        return "is a symbolic link loop (or too many links deep)"
    if e.errno == errno.ENOTDIR:
        return "cannot read: a part of the path is a file, not a folder"
    return f"cannot read: {e.strerror or e}"


def read_bounded(path: Path, *, limit_bytes: int, what: str = "file") -> bytes:
    """The bytes of regular file ``path``, at most ``limit_bytes`` of them; never blocks on a special file.

    Args:
        path: the file (symbolic links are followed; a loop is refused).
        limit_bytes: a larger file is refused (nothing of it is returned).
        what: what the file is, for the size message ("profile", "history").

    Raises:
        FileNotFoundError: there is no such file (callers often treat it as "not there yet").
        FileRefused: a folder, FIFO, socket, device or link loop; unreadable; larger than ``limit_bytes``.
    """
    path = Path(path)
    try:
        _refuse_unless_regular(path, os.stat(path).st_mode)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise FileRefused(path, _os_reason(e)) from None
    try:
        _refuse_unless_regular(path, os.fstat(fd).st_mode)  # replaced between stat and open
        chunks: list[bytes] = []
        size = 0
        while size <= limit_bytes:
            chunk = os.read(fd, min(1 << 20, limit_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise FileRefused(path, _os_reason(e)) from None
    finally:
        os.close(fd)
    if size > limit_bytes:
        raise FileRefused(path, f"is larger than {_size(limit_bytes)}; a {what} is small: check the path")
    return b"".join(chunks)


def read_text_bounded(path: Path, *, limit_bytes: int, what: str = "file") -> str:
    """:func:`read_bounded`, decoded as UTF-8.

    Raises:
        FileNotFoundError: there is no such file.
        FileRefused: as :func:`read_bounded`, or the bytes are not UTF-8 text (the reason names the line).
    """
    raw = read_bounded(path, limit_bytes=limit_bytes, what=what)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise FileRefused(path, f"is not UTF-8 text (line {line}, byte {e.start})") from None


def _size(n: int) -> str:
    if n >= 2**20 and n % 2**20 == 0:
        return f"{n // 2**20} MiB"
    if n >= 2**10 and n % 2**10 == 0:
        return f"{n // 2**10} KiB"
    return f"{n:,} bytes"


def refuse_unwritable(path: Path) -> None:
    """Refuse ``path`` as a place to write unless it is a regular file or nothing (a link is followed).

    Raises:
        FileRefused: a folder, FIFO, socket, device or link loop is there.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise FileRefused(Path(path), _os_reason(e).replace("cannot read", "cannot write")) from None
    if not stat.S_ISREG(mode):
        kind = kind_of(mode)
        raise FileRefused(Path(path), f"is {kind}, not a regular file; servectl writes only regular files")


#: The mode of a file servectl writes, unless it says otherwise (a key, a nonce: 0o600).
FILE_MODE = 0o644


def write_atomic(path: Path, data: bytes, *, mode: int = FILE_MODE) -> None:
    """Replace (or create) regular file ``path`` with ``data`` at once; its folder must exist.

    Raises:
        FileRefused: something other than a regular file is at ``path`` (nothing is written).
        OSError: the folder cannot be written.
    """
    import tempfile

    path = Path(path)
    refuse_unwritable(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def backup_copy(path: Path, backup: Path, *, limit_bytes: int) -> None:
    """Copy regular file ``path`` to ``backup`` (a regular file or nothing) before ``path`` is replaced.

    Raises:
        FileNotFoundError: ``path`` is gone. FileRefused: ``path`` is not a regular file (or larger than
            ``limit_bytes``), or ``backup`` is not a regular file.
    """
    write_atomic(backup, read_bounded(path, limit_bytes=limit_bytes, what="file to back up"), mode=0o600)
