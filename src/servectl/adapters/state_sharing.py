"""A root-owned state folder shared with the gateway container's non-root user through its group.

The gateway container runs as uid and gid 65532 (never root) and swaps on request: it takes the same state
lock and writes the same history as root's CLI. So ``gateway up`` as root shares the state folder with group
65532: the folders belong to that group and carry the setgid bit, so what anyone creates in them belongs to
it too, and the group has the owner's rights. The kernel does the group; umask would take the group's write
bit away, so what servectl creates there (folders, lock files, atomic writes) is chmod-ed
(:func:`make_folder`, :func:`file_mode`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from servectl.errors import StateAccessDenied

#: The group a root-owned state folder is shared with: the gateway container's (65532, the "nonroot" of
#: distroless images).
SHARED_GID = 65532


def share_state_folder(state_dir: Path, *, gid: int = SHARED_GID, keep: Iterable[Path] = ()) -> None:
    """Share ``state_dir`` with group ``gid``: each folder and file in it (not ``keep``, say the user's profiles
    the gateway only reads, nor sockets and links) is given to that group with the owner's rights, folders
    setgid. Idempotent; needs to run as root or as the owner in that group.

    Raises:
        StateAccessDenied: an entry cannot be given to the group (the message names it and the fix).
    """
    skip = {Path(p).resolve() for p in keep}
    for folder, dirs, files in os.walk(state_dir):
        here = Path(folder)
        dirs[:] = [d for d in dirs if (here / d).resolve() not in skip and not (here / d).is_symlink()]
        for path in [here, *(here / f for f in files)]:
            st = os.lstat(path)
            if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                continue
            mode = with_group(stat.S_IMODE(st.st_mode)) | (stat.S_ISGID if stat.S_ISDIR(st.st_mode) else 0)
            try:
                if st.st_gid != gid:
                    os.chown(path, -1, gid, follow_symlinks=False)
                if stat.S_IMODE(os.lstat(path).st_mode) != mode:  # chown clears setgid on some systems
                    os.chmod(path, mode)
            except OSError as e:
                raise StateAccessDenied(
                    f"{path}: cannot share it with the gateway's group {gid} ({e.strerror}): "
                    f"run servectl gateway up as root, or chgrp -R {gid} {state_dir} && chmod -R g+rwX {state_dir}"
                ) from e


def make_folder(path: Path, *, mode: int = 0o777) -> None:
    """``mkdir -p path`` (``mode`` less umask, as ``mkdir``); a folder made in a shared state folder gets the
    group's rights too (umask would take the group's write bit away)."""
    missing: list[Path] = []
    for p in [path, *path.parents]:
        if os.path.lexists(p):
            break
        missing.append(p)
    path.mkdir(parents=True, exist_ok=True, mode=mode)
    for p in reversed(missing):
        if shared(p.parent):
            with contextlib.suppress(OSError):
                os.chmod(p, with_group(stat.S_IMODE(os.stat(p).st_mode)) | stat.S_ISGID)


def file_mode(folder: Path, mode: int) -> int:
    """The mode a new file in ``folder`` gets: ``mode``, with the owner's rights given to the group in a shared
    state folder."""
    return with_group(mode) if shared(folder) else mode


def shared(folder: Path) -> bool:
    """Whether ``folder`` is part of a shared state folder: setgid, of the gateway's group."""
    try:
        st = os.stat(folder)
    except OSError:
        return False
    return bool(st.st_mode & stat.S_ISGID) and st.st_gid == SHARED_GID


def with_group(mode: int) -> int:
    """``mode`` with the owner's read, write and search rights given to the group as well."""
    return mode | ((mode & 0o700) >> 3)
