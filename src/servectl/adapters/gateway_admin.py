"""servectl's side of the running gateway's admin channel: a 0600 unix socket in the state folder.

``swap``, ``up``, ``down`` and ``rollback`` wrap the change they make in :class:`GatewayHold`: the gateway
holds new requests for the aliases those profiles serve, drains the ones in flight (bounded, by the
gateway), and once the block ends (the new service passed its health gate, or the change failed and what
ran is back) routes again. With no gateway running (no socket, or nobody answers) the hold does nothing,
so every command behaves as without a gateway. The hold lasts as long as the connection: a servectl killed
mid-swap closes it and the gateway lets its requests go on.

Protocol (one JSON object per line): ``{"op": "hold", "profiles": [...], "reason": ..., "expect_s": ...}``
-> ``{"ok": true, "finished": N, "cut": M}``; ``{"op": "maintenance", "profiles": [...], "reason": ...,
"eta_s": ...}`` -> ``{"ok": true}`` (:class:`GatewayMaintenance`: answered at once, no drain; sent again with a
new ETA); ``{"op": "release"}`` -> ``{"ok": true}``;
``{"op": "status"}`` -> the gateway's aliases, holds and in-flight counts.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from servectl.adapters.state import HistoryLog
from servectl.errors import ServectlError

ADMIN_SOCKET = "admin.sock"
CONNECT_TIMEOUT_S = 2.0
HOLD_REPLY_TIMEOUT_S = 600.0  # the gateway bounds the drain itself (swap.drain_s); this only guards a hung one
RELEASE_REPLY_TIMEOUT_S = 30.0


def admin_socket_path(state_dir: Path) -> Path:
    return Path(state_dir) / "gateway" / ADMIN_SOCKET


def last_startup_s(history: HistoryLog, profile: str) -> float | None:
    """The last measured startup time of ``profile`` in ``history`` (servectl records it at every up and swap)."""
    try:
        events = history.events()
    except ServectlError:
        return None
    for event in reversed(events):
        if event.get("profile") == profile and isinstance(event.get("startup_s"), int | float):
            return float(event["startup_s"])
    return None


def way_back_s(state_dir: Path, history: HistoryLog, profile: str) -> float | None:
    """How long bringing ``profile`` back takes, as last measured: its last resume while it is on warm standby
    (a swap back resumes it, no container starts), else its last start. For the gateway's ``Retry-After``."""
    from servectl.adapters.standby import StandbyRecord

    record = StandbyRecord(state_dir)
    if record.on_standby(profile):
        resume = record.last_resume_s(profile)
        if resume is not None:
            return resume
    return last_startup_s(history, profile)


class AdminChannel:
    """One connection to the gateway's admin socket (None-safe: see :func:`connect`)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._file = sock.makefile("rb")

    def ask(self, message: Mapping[str, Any], *, timeout_s: float) -> dict[str, Any]:
        self._sock.settimeout(timeout_s)
        self._sock.sendall(json.dumps(message).encode() + b"\n")
        line = self._file.readline(1 << 20)
        if not line:
            raise ConnectionError("the gateway closed the admin channel")
        reply = json.loads(line)
        if not isinstance(reply, dict):
            raise ConnectionError("the gateway sent a reply that is not a JSON object")
        return reply

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
            self._sock.close()


def connect(state_dir: Path) -> AdminChannel | None:
    """The admin channel of the gateway running on this host, or None when none runs."""
    path = admin_socket_path(state_dir)
    if not path.exists():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(CONNECT_TIMEOUT_S)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return AdminChannel(sock)


class GatewayHold:
    """``with GatewayHold(state_dir, history, profiles=[old, new], reason="swap a -> b", target=new):`` around a
    change (``history`` tells the last startup times when ``expect_s`` is not given).

    Entering asks a running gateway to hold and drain the aliases of ``profiles`` (and waits until it did);
    leaving lets them go. No gateway, or a gateway that fails to answer: a warning on stderr at most, and
    the change goes on as without one.
    """

    def __init__(
        self,
        state_dir: Path,
        history: HistoryLog,
        *,
        profiles: Iterable[str | None],
        reason: str,
        target: str | None = None,
        expect_s: float | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.history = history
        self.target = target
        self.profiles = sorted({p for p in profiles if p})
        self.reason = reason
        self.expect_s = expect_s
        self.channel: AdminChannel | None = None
        self.reply: dict[str, Any] = {}

    def __enter__(self) -> GatewayHold:
        if not self.profiles:
            return self
        channel = connect(self.state_dir)
        if channel is None:
            return self
        expect = self.expect_s
        if expect is None:  # the target's last startup, else the longest of the profiles changed
            wanted = [self.target] if self.target else self.profiles
            expect = max((last_startup_s(self.history, p) or 0.0) for p in wanted)
        message = {"op": "hold", "profiles": self.profiles, "reason": self.reason, "expect_s": expect}
        try:
            self.reply = channel.ask(message, timeout_s=HOLD_REPLY_TIMEOUT_S)
            self.channel = channel
        except (OSError, ValueError) as err:
            channel.close()
            print(f"servectl: warning: the gateway did not take the hold ({err}); going on", file=sys.stderr)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        channel, self.channel = self.channel, None
        _release(channel)


def _release(channel: AdminChannel | None) -> None:
    """End what ``channel`` holds (a hold or a maintenance): ask the gateway to let go, then close it - closing
    alone ends it too, so a gateway that does not answer changes nothing."""
    if channel is None:
        return
    try:
        channel.ask({"op": "release"}, timeout_s=RELEASE_REPLY_TIMEOUT_S)
    except (OSError, ValueError):
        pass
    finally:
        channel.close()


class GatewayMaintenance:
    """``with GatewayMaintenance(state_dir, profiles=[production], reason="campaign c", eta_s=600) as away:``
    around a long change that takes ``profiles`` away (a campaign): a running gateway answers their aliases 503
    ``maintenance`` at once, with the ETA as ``Retry-After``, until the block ends; :meth:`update` gives a new
    ETA. No gateway, or one that fails to answer: a warning on stderr at most, the change goes on. A servectl
    killed meanwhile closes the connection and the gateway lets the aliases go."""

    def __init__(self, state_dir: Path, *, profiles: Iterable[str | None], reason: str, eta_s: float) -> None:
        self.state_dir = Path(state_dir)
        self.profiles = sorted({p for p in profiles if p})
        self.reason = reason
        self.eta_s = eta_s
        self.channel: AdminChannel | None = None

    def __enter__(self) -> GatewayMaintenance:
        if self.profiles:
            self.channel = connect(self.state_dir)
            self.update(self.eta_s)
        return self

    def update(self, eta_s: float) -> None:
        """Say the new ETA (seconds from now) to the gateway, if one holds the aliases."""
        self.eta_s = eta_s
        channel = self.channel
        if channel is None:
            return
        message = {"op": "maintenance", "profiles": self.profiles, "reason": self.reason, "eta_s": eta_s}
        try:
            channel.ask(message, timeout_s=RELEASE_REPLY_TIMEOUT_S)
        except (OSError, ValueError) as err:
            self.channel = None
            channel.close()
            print(f"servectl: warning: the gateway did not take the maintenance ({err}); going on", file=sys.stderr)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        channel, self.channel = self.channel, None
        _release(channel)


def gateway_status(state_dir: Path) -> dict[str, Any] | None:
    """What the running gateway says of itself (aliases, routes, holds, in flight), None when none runs."""
    channel = connect(state_dir)
    if channel is None:
        return None
    try:
        return channel.ask({"op": "status"}, timeout_s=5.0)
    except (OSError, ValueError):
        return None
    finally:
        channel.close()
