"""The gateway file and the profile search path, watched: a good edit is served without a restart, a bad one
refused with one line while the running configuration stays.

The file is read only when it is a regular file, through the bounded reader (:mod:`servectl.files`): a FIFO, a
device, a folder, a link loop or a link whose target is gone is refused in one line naming the file and the
problem (never its content), and the last good configuration keeps serving. A file that was served and is then
deleted is such an error too, kept in ``gateway status``: it never switches the gateway to the defaults (every
profile an alias), which would expose services the file did not.

Polling, once a second, on the gateway's loop (the file reads in a thread): the gateway file by the SHA-256
of its bytes (an editor's save, a rename over it, or a change within the same second of mtime all count),
each profile folder by its ``*.yaml`` names, sizes and modification times. No file-system events: they do
not cross the bind mounts of the gateway container reliably, and one ``stat`` per profile a second is cheap.

An edit is applied whole or not at all. Aliases, ``response_model``, the per-request limits and the swap
policy change live; the listen address, auth, the key file, ``endpoints`` and the upstream pool, the body
size and the header timeout are fixed when the gateway starts, so an edit that changes one of them is
refused as needing a restart (``servectl gateway down`` then ``up``), naming the field.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from servectl.errors import ServectlError
from servectl.files import FileRefused, read_bounded
from servectl.gateway.config import GatewayConfig
from servectl.gateway.routes import AliasTable
from servectl.profile.yaml_locations import MAX_PROFILE_BYTES

log = logging.getLogger("servectl.gateway")

RESTART_FIELDS = ("listen", "auth", "keys_file", "endpoints", "upstream")
RESTART_LIMITS = ("max_body_bytes", "header_timeout_s")

Stamp = tuple[str | None, tuple[tuple[str, tuple[tuple[str, int, int], ...]], ...]]


def source_stamp(config_file: Path | None, folders: Sequence[Path]) -> Stamp:
    """What a change of the gateway's sources changes: the file's digest, each folder's ``*.yaml`` files."""
    digest: str | None = None
    if config_file is not None:
        try:  # a FIFO or a device is refused unread: a reader would block for good, or never end (/dev/zero)
            digest = hashlib.sha256(read_bounded(config_file, limit_bytes=MAX_PROFILE_BYTES)).hexdigest()
        except FileNotFoundError:
            digest = "dangling link" if os.path.lexists(config_file) else None
        except FileRefused as err:
            digest = f"refused: {err.reason}"
    listing = []
    for folder in folders:
        files = []
        try:
            for path in sorted(folder.glob("*.yaml")):
                try:
                    st = path.stat()
                except OSError:
                    continue
                files.append((path.name, st.st_mtime_ns, st.st_size))
        except OSError:
            pass
        listing.append((str(folder), tuple(files)))
    return digest, tuple(listing)


def needs_restart(running: GatewayConfig, edited: GatewayConfig) -> list[str]:
    """The fields that differ between ``running`` and ``edited`` and only take effect at a start."""
    changed = [f for f in RESTART_FIELDS if getattr(running, f) != getattr(edited, f)]
    changed += [f"limits.{f}" for f in RESTART_LIMITS if getattr(running.limits, f) != getattr(edited.limits, f)]
    return changed


@dataclass(frozen=True)
class Reloaded:
    """A new configuration to serve, and its aliases."""

    config: GatewayConfig
    table: AliasTable


class ConfigWatcher:
    """Checks the sources; :meth:`check` returns what to serve when they changed and the edit is good.

    Args:
        config_file: the gateway file (None: there is none and the defaults run; a file appearing there later
            is read).
        running: the configuration being served.
        load: reads and checks the gateway file (raises ServectlError, one line per problem).
        table_of: the alias table of a configuration (it lists the profiles when the file names no aliases).
        folders: the profile search path.
    """

    def __init__(
        self,
        *,
        config_file: Path | None,
        running: GatewayConfig,
        load: Callable[[], GatewayConfig],
        table_of: Callable[[GatewayConfig], AliasTable],
        folders: Callable[[], Sequence[Path]],
        clock: Callable[[], float],
    ) -> None:
        self.config_file = config_file
        self.running = running
        self._load, self._table_of, self._folders, self._clock = load, table_of, folders, clock
        self._stamp = source_stamp(config_file, folders())
        # the running configuration came from the file: its deletion is an error, not a switch to the defaults
        self._from_file = config_file is not None and os.path.lexists(config_file)
        self.error: str | None = None  # the last edit refused (the running configuration stayed)
        self.reloaded_at: float | None = None

    def check(self) -> Reloaded | None:
        """Read the sources when they changed (blocking: run it in a thread)."""
        stamp = source_stamp(self.config_file, self._folders())
        if stamp == self._stamp:
            return None
        self._stamp = stamp
        where = str(self.config_file) if self.config_file is not None else "the gateway file"
        if self._from_file and self.config_file is not None and not os.path.lexists(self.config_file):
            return self._refuse(
                f"{where}: the gateway file is gone (deleted or moved); the running configuration is kept (put the "
                "file back; to serve without one: servectl gateway down, then up)"
            )
        try:
            edited = self._load()
        except (ServectlError, OSError) as err:
            lines = err.lines() if isinstance(err, ServectlError) else [str(err)]
            more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
            return self._refuse(
                f"{lines[0]}{more}; the running configuration is kept (fix the file: servectl validate)"
            )
        if restart := needs_restart(self.running, edited):
            return self._refuse(f"{where}: {', '.join(restart)} changed, which needs a restart (servectl gateway down, "
                                "then up); the running configuration is kept")  # fmt: skip
        try:
            table = self._table_of(edited)
        except (ServectlError, OSError) as err:
            return self._refuse(f"{where}: cannot list the profiles ({err}); the running configuration is kept")
        self.running, self.error, self.reloaded_at = edited, None, self._clock()
        self._from_file = self._from_file or (self.config_file is not None and os.path.lexists(self.config_file))
        log.info("configuration reloaded from %s: aliases %s", where, ", ".join(table.names) or "none")
        return Reloaded(edited, table)

    def _refuse(self, message: str) -> Reloaded | None:
        """Keep the running configuration; say why once (the log), and keep saying it (gateway status)."""
        message = message.replace("\n", " ")
        if message != self.error:
            log.warning("configuration edit refused: %s", message)
        self.error = message
        return None
