"""Gateway keys: a file of SHA-256 digests (never the keys), each with a name and its scope: granted aliases,
read-only (GET routes only), expiry, rate, and a request budget per period (``1000/day``).

``servectl gateway keys create NAME`` makes a key, stores its digest and prints the key once. The running
gateway re-reads the file when it changes, so a new or revoked key counts within a second, no restart.
A key file written before scopes and budgets existed reads as it did (every field added since is optional:
no budget, not read-only), and is rewritten in the new shape at the next create or revoke.
Keys are compared as digests with :func:`hmac.compare_digest` against every entry (no early exit), so the
time taken says nothing about which key, or which prefix, was close.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from servectl.adapters.state import atomic_write_text, read_state_json
from servectl.errors import ServectlError, StateDamaged, UsageError
from servectl.files import os_reason

log = logging.getLogger("servectl.gateway")

KEY_PREFIX = "sk-servectl-"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_DURATION = re.compile(r"^(\d+)\s*([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_BUDGET = re.compile(r"^(\d+)\s*/\s*(hour|day|week|month)$")
#: More requests than any period of one gateway can hold: a larger count is a typo (a 29-digit count was taken).
MAX_BUDGET = 10**12
BUDGET_PERIODS = ("hour", "day", "week", "month")
#: More requests per minute than one gateway can answer: a larger rate is a typo, as a 29-digit budget was.
MAX_RATE_PER_MINUTE = 10**6


@dataclass(frozen=True)
class Budget:
    """At most ``requests`` requests per calendar ``period`` (UTC: the hour, day, ISO week or month)."""

    requests: int
    period: str  # one of BUDGET_PERIODS

    def __str__(self) -> str:
        return f"{self.requests}/{self.period}"


def parse_budget(text: str) -> Budget:
    """``"1000/day"`` -> ``Budget(1000, "day")`` (periods hour, day, week, month).

    Raises:
        UsageError: not a positive count, a slash and one of those periods.
    """
    match = _BUDGET.match(text.strip().lower())
    if not match or len(match.group(1)) > 13 or not 0 < int(match.group(1)) <= MAX_BUDGET:
        raise UsageError(
            f"--budget {text!r}: write requests per period such as 1000/day ({', '.join(BUDGET_PERIODS)}), "
            f"a count from 1 to {MAX_BUDGET:,}"
        )
    return Budget(int(match.group(1)), match.group(2))


@dataclass(frozen=True)
class KeyEntry:
    """One key as the file keeps it: its digest, never the key."""

    name: str
    sha256: str
    aliases: tuple[str, ...] | None = None  # None: every alias
    expires_at: float | None = None
    created_at: float = 0.0
    rate_per_minute: int | None = None  # None: the gateway's limits.rate_per_minute
    read_only: bool = False  # GET routes only (/v1/models, /ui): no completions
    budget: Budget | None = None  # None: no budget (the rate limit still applies)

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def grants(self, alias: str) -> bool:
        return self.aliases is None or alias in self.aliases

    def allows_method(self, method: str) -> bool:
        return not self.read_only or method in ("GET", "HEAD")

    def scope(self) -> str:
        """``chat, small; read-only; 1000/day`` / ``every alias``: for listings and messages."""
        parts = [", ".join(self.aliases) if self.aliases else "every alias"]
        parts += ["read-only"] if self.read_only else []
        parts += [f"budget {self.budget}"] if self.budget else []
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["aliases"] = None if self.aliases is None else list(self.aliases)
        out["budget"] = None if self.budget is None else str(self.budget)
        return out


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def parse_duration(text: str) -> float:
    """``"30d"`` -> seconds (units s, m, h, d, w).

    Raises:
        UsageError: not a number followed by one of those units.
    """
    match = _DURATION.match(text.strip())
    if not match or int(match.group(1)) == 0:
        raise UsageError(f"--expires {text!r}: write a duration such as 12h, 30d or 8w")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def read_keys(path: Path) -> list[KeyEntry]:
    """The entries of the key file (none when it does not exist).

    Raises:
        StateDamaged: the file is not a key file (names it and says how to start over).
    """
    fix = f"move {path} aside and create the keys again (servectl gateway keys create NAME)"
    data = read_state_json(path, what="gateway key file", fix=fix)
    if data is None:
        return []
    try:
        return [
            KeyEntry(
                name=str(e["name"]),
                sha256=str(e["sha256"]),
                aliases=None if e.get("aliases") is None else tuple(str(a) for a in e["aliases"]),
                expires_at=None if e.get("expires_at") is None else float(e["expires_at"]),
                created_at=float(e.get("created_at") or 0.0),
                rate_per_minute=None if e.get("rate_per_minute") is None else int(e["rate_per_minute"]),
                read_only=bool(e.get("read_only", False)),
                budget=None if e.get("budget") is None else parse_budget(str(e["budget"])),
            )
            for e in data["keys"]
        ]
    except (KeyError, TypeError, ValueError, UsageError) as err:
        raise StateDamaged(f"{path}: not a gateway key file ({err!r}); {fix}", path=path) from None


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Two ``keys create`` at once both land: the read-modify-write of the key file is serialised."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_keys(path: Path, entries: Sequence[KeyEntry]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = json.dumps({"keys": [e.to_dict() for e in entries]}, indent=1) + "\n"
    atomic_write_text(path, text, mode=0o600)
    folder = path.parent.stat()
    if os.geteuid() == 0 and folder.st_uid != 0:  # root editing a folder handed to the gateway's user
        os.chown(path, folder.st_uid, folder.st_gid)


def create_key(
    path: Path,
    *,
    name: str,
    aliases: Sequence[str] | None = None,
    expires_s: float | None = None,
    rate_per_minute: int | None = None,
    read_only: bool = False,
    budget: Budget | None = None,
    known_aliases: Sequence[str] | None = None,
    aliases_from: str = "the gateway file's aliases",
    alias_fix: str = "",
    clock: Callable[[], float],
) -> tuple[str, KeyEntry]:
    """Make a new key, store its digest under ``name`` and return ``(key, entry)``; the key is never stored.

    Raises:
        UsageError: a bad name, an alias not in ``known_aliases`` (the gateway's: ``aliases_from`` says whose),
            or a key of that name exists (revoke it first).
    """
    if not _NAME.match(name):
        raise UsageError(f"key name {name!r}: use letters, digits, '.', '_' or '-' (at most 64)")
    if rate_per_minute is not None and not 0 < rate_per_minute <= MAX_RATE_PER_MINUTE:
        raise UsageError(f"--rate {rate_per_minute}: write requests per minute from 1 to {MAX_RATE_PER_MINUTE:,}")
    unknown = [a for a in aliases or () if known_aliases is not None and a not in known_aliases]
    if unknown:
        known = ", ".join(sorted(known_aliases or ())) or "none"
        fix = f"; {alias_fix}" if alias_fix else ""
        raise UsageError(f"--aliases: {', '.join(unknown)} not in {aliases_from} ({known}){fix}")
    with _file_lock(path):
        entries = read_keys(path)
        if any(e.name == name for e in entries):
            raise UsageError(f"a key named {name!r} exists in {path}; revoke it first (servectl gateway keys revoke)")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        now = clock()
        entry = KeyEntry(
            name=name,
            sha256=digest(key),
            aliases=tuple(aliases) if aliases else None,
            expires_at=None if expires_s is None else now + expires_s,
            created_at=now,
            rate_per_minute=rate_per_minute,
            read_only=read_only,
            budget=budget,
        )
        _write_keys(path, [*entries, entry])
    return key, entry


def revoke_key(path: Path, *, name: str) -> KeyEntry:
    """Remove the key ``name`` from the file.

    Raises:
        UsageError: no key of that name.
    """
    with _file_lock(path):
        entries = read_keys(path)
        found = [e for e in entries if e.name == name]
        if not found:
            known = ", ".join(e.name for e in entries) or "none"
            raise UsageError(f"no key named {name!r} in {path} (keys: {known})")
        _write_keys(path, [e for e in entries if e.name != name])
    return found[0]


class KeyRing:
    """The key file as the gateway checks it: re-read when its modification time or size changes."""

    def __init__(self, path: Path, *, clock: Callable[[], float], recheck_s: float = 1.0) -> None:
        self.path = path
        self._clock = clock
        self._recheck_s = recheck_s
        self._checked_at = -1e18
        self._stamp: tuple[int, int] | None = None
        self._entries: list[KeyEntry] = []
        self.error: str | None = None  # why the file cannot be read now (only the keys read before are accepted)

    @property
    def entries(self) -> list[KeyEntry]:
        self._refresh()
        return list(self._entries)

    def _refresh(self, *, now_please: bool = False) -> None:
        now = time.monotonic()
        if not now_please and now - self._checked_at < self._recheck_s:
            return
        self._checked_at = now
        try:
            st = self.path.stat()
            stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        except OSError as err:  # a link loop, a folder this user may not enter (chmod 000 in the container)
            self._damaged(f"{self.path}: the gateway key file {os_reason(err)}", None)
            return
        if stamp == self._stamp and stamp is not None:
            return
        try:
            entries = read_keys(self.path) if stamp else []
        except ServectlError as err:  # truncated, not UTF-8, a FIFO, a folder, unreadable: said, never a 500
            self._damaged(err.message, stamp)
            return
        if self.error is not None:
            log.warning("gateway key file %s is readable again (%d keys)", self.path, len(entries))
        self._entries, self._stamp, self.error = entries, stamp, None

    def _damaged(self, message: str, stamp: tuple[int, int] | None) -> None:
        """The keys read before stay in force, no other is accepted (the gateway answers 503 keys_unreadable) until
        the file reads again; said once in the log, and kept in :attr:`error` for ``gateway status``."""
        message = message.replace("\n", " ")
        if message != self.error:
            known = f"the {len(self._entries)} keys read before stay in force, no other" if self._entries else "no key"
            log.warning("%s; %s is accepted until it is fixed", message, known)
        self._stamp, self.error = stamp, message

    def check(self, presented: str) -> KeyEntry | None:
        """The entry whose digest matches ``presented`` (expired ones included: the caller says why), else None.

        Every entry is compared, in constant time each, whatever matched before. A key not found sends the ring
        to the file at once (one ``stat``; a re-read only when it changed), so a key made a moment ago by
        ``servectl gateway keys create`` is honoured on its first request, not a second later.
        """
        wanted = digest(presented)
        found = self._match(wanted)
        if found is None:
            self._refresh(now_please=True)
            found = self._match(wanted)
        return found

    def _match(self, wanted: str) -> KeyEntry | None:
        found: KeyEntry | None = None
        for entry in self.entries:
            if hmac.compare_digest(wanted, entry.sha256):
                found = entry
        return found
