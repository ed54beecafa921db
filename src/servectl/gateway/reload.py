"""The gateway file and the profile search path, watched: a good edit is served without a restart, a bad one
refused with one line while the running configuration stays.

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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from servectl.errors import ServectlError
from servectl.gateway.config import GatewayConfig
from servectl.gateway.routes import AliasTable

log = logging.getLogger("servectl.gateway")

RESTART_FIELDS = ("listen", "auth", "keys_file", "endpoints", "upstream")
RESTART_LIMITS = ("max_body_bytes", "header_timeout_s")

Stamp = tuple[str | None, tuple[tuple[str, tuple[tuple[str, int, int], ...]], ...]]


def source_stamp(config_file: Path | None, folders: Sequence[Path]) -> Stamp:
    """What a change of the gateway's sources changes: the file's digest, each folder's ``*.yaml`` files."""
    digest: str | None = None
    if config_file is not None:
        try:
            digest = hashlib.sha256(config_file.read_bytes()).hexdigest()
        except OSError as err:
            digest = f"unreadable: {err.strerror}"
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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config_file = config_file
        self.running = running
        self._load, self._table_of, self._folders, self._clock = load, table_of, folders, clock
        self._stamp = source_stamp(config_file, folders())
        self.error: str | None = None  # the last edit refused (the running configuration stayed)
        self.reloaded_at: float | None = None

    def check(self) -> Reloaded | None:
        """Read the sources when they changed (blocking: run it in a thread)."""
        stamp = source_stamp(self.config_file, self._folders())
        if stamp == self._stamp:
            return None
        self._stamp = stamp
        where = str(self.config_file) if self.config_file is not None else "the gateway file"
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
        log.info("configuration reloaded from %s: aliases %s", where, ", ".join(table.names) or "none")
        return Reloaded(edited, table)

    def _refuse(self, message: str) -> Reloaded | None:
        """Keep the running configuration; say why once (the log), and keep saying it (gateway status)."""
        message = message.replace("\n", " ")
        if message != self.error:
            log.warning("configuration edit refused: %s", message)
        self.error = message
        return None
