"""The gateway's read-only web dashboard: ``GET /ui`` and the JSON it shows, under ``/ui/api/``.

The page (``data/ui/``: one HTML file, one script, one style sheet; no build step, nothing from the network)
carries no data; its script asks ``/ui/api/...`` with the key as ``Authorization: Bearer``. The key is typed
once into the page's form (or given in the address's fragment, ``/ui#key=...``, which browsers never send)
and kept in the tab's ``sessionStorage``; it never travels in a URL, so it never reaches a log.

Any valid key may read the dashboard, read-only keys included; a key scoped to some aliases sees those
aliases, the services they route to, those services' logs, and the requests made for them. With
``auth: none`` the dashboard is as open as ``/v1``. Nothing here changes anything, and no prompt or answer
text is kept: a recent request is its time, alias, key name, status, latency and token count.

Sources, each behind a plain function so tests give their own: the gateway's routes and counters, the GPU
inventory (per-card memory; "unknown" without NVML), the state folder's history (up, swap, rollback, down,
failures), and the engines' log tails (through :func:`servectl.redact.redact`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from servectl.errors import ServectlError
from servectl.gateway.config import ANY_PROFILE
from servectl.gateway.proxy import presented_key
from servectl.gateway.reject import KEYS_UNREADABLE, Reject
from servectl.paths import DATA_DIR
from servectl.redact import redact

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerEngine
    from servectl.adapters.gpu import GpuSnapshot
    from servectl.gateway.keys import KeyEntry
    from servectl.gateway.proxy import Gateway
    from servectl.service.context import Context

UI_DIR = DATA_DIR / "ui"
GPU_TTL_S = 5.0  # NVML is asked at most this often, however many dashboards poll
HISTORY_ROWS = 50
LOG_TAIL_MAX = 500
LOG_LINE_MAX = 10_000  # SGLang logs its whole server_args on one line (several thousand characters)
_HISTORY_FIELDS = ("t", "event", "profile", "replaced", "startup_s", "reason", "signal", "container_name")
_STATIC = {"dashboard.js": "application/javascript", "dashboard.css": "text/css"}
_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'",
}

LogTail = Callable[[str, int], Sequence[str]]
"""``(profile, lines) -> the last lines of that profile's engine log`` (blocking; raises ServectlError)."""


@dataclass(frozen=True)
class DashboardSources:
    """Where the dashboard reads what the gateway itself does not know (each blocking; run in a thread).

    Attributes:
        history: the state folder's events and a warning when it is unreadable (``HistoryLog.readable_events``).
        gpus: a GPU snapshot; raises ServectlError (GpuUnavailable) when no driver answers (``GpuInventory.snapshot``).
        logs: an engine's log tail; None where the gateway cannot read engine logs (fixed endpoints).
    """

    history: Callable[[], tuple[Sequence[Mapping[str, Any]], str | None]]
    gpus: Callable[[], GpuSnapshot]
    logs: LogTail | None = None

    @classmethod
    def of_context(cls, ctx: Context, *, logs: LogTail | None = None) -> DashboardSources:
        """The history and the GPU inventory of ``ctx`` (NVML opened at the first snapshot), and ``logs``."""
        return cls(history=ctx.history.readable_events, gpus=lambda: ctx.gpus.snapshot(), logs=logs)


class Dashboard:
    """The ``/ui`` routes of one gateway.

    Args:
        gateway: the running gateway (routes, keys, counters, recent requests).
        sources: the history, the cards and the engine logs.
    """

    def __init__(self, gateway: Gateway, sources: DashboardSources, *, clock: Callable[[], float]) -> None:
        self.gateway = gateway
        self._history = sources.history
        self._gpus = sources.gpus
        self._logs = sources.logs
        self._clock = clock
        self._gpu_cache: tuple[float, dict[str, Any]] | None = None
        self._gpu_lock = asyncio.Lock()

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/ui", self.page)
        app.router.add_get("/ui/", self.page)
        for name in _STATIC:
            app.router.add_get(f"/ui/{name}", self.static)
        app.router.add_get("/ui/api/overview", self.overview)
        app.router.add_get("/ui/api/requests", self.requests)
        app.router.add_get("/ui/api/history", self.history)
        app.router.add_get("/ui/api/logs", self.logs)

    # -- the page --------------------------------------------------------------------------------------------
    async def page(self, _request: web.Request) -> web.Response:
        text = (UI_DIR / "index.html").read_text(encoding="utf-8")
        return web.Response(text=text, content_type="text/html", charset="utf-8", headers=_HEADERS)

    async def static(self, request: web.Request) -> web.Response:
        name = request.path.rsplit("/", 1)[-1]
        text = (UI_DIR / name).read_text(encoding="utf-8")
        return web.Response(text=text, content_type=_STATIC[name], charset="utf-8", headers=_HEADERS)

    # -- who asks --------------------------------------------------------------------------------------------
    def _viewer(self, request: web.Request) -> KeyEntry | None:
        """The key of the request (None with ``auth: none``). Any valid key reads the dashboard; its reads
        count against a bucket of their own, so a polling page never eats the key's request budget.

        Raises:
            Reject: no key, an unknown or expired one (401), or too many dashboard reads (429).
        """
        gw = self.gateway
        if gw.keys is None:
            return None
        presented = presented_key(request)
        if presented is None:
            raise Reject(401, "no key: type a gateway key into the dashboard's form", "auth")
        entry = gw.keys.check(presented)
        if entry is None and gw.keys.error is not None:  # fail closed, in the gateway's shape (never a 500)
            raise Reject(503, KEYS_UNREADABLE, "keys", reason="keys_unreadable", headers={"Retry-After": "10"})
        if entry is None:
            raise Reject(401, "unknown key (servectl gateway keys create NAME makes one)", "auth")
        if entry.expired(time.time()):
            raise Reject(401, f"key {entry.name!r} has expired; create a new one", "auth")
        if wait := gw.limiter.take(f"{entry.name}\0ui", gw.config.limits.rate_per_minute):
            raise Reject(
                429,
                f"key {entry.name!r}: too many dashboard reads",
                "rate",
                reason="rate_limited",
                headers={"Retry-After": str(wait)},
            )
        return entry

    def _aliases(self, entry: KeyEntry | None) -> list[str]:
        return [a for a in self.gateway.table.names if entry is None or entry.grants(a)]

    def _profiles(self, entry: KeyEntry | None) -> Callable[[str], bool]:
        """Whether the key's aliases route to a profile (a key of every alias, or of ``*``, sees all)."""
        if entry is None or entry.aliases is None:
            return lambda _p: True
        mine = {p for a in self._aliases(entry) for p in self.gateway.table.profiles(a)}
        return lambda p: ANY_PROFILE in mine or p in mine

    async def _answer(self, request: web.Request, build: Callable[[KeyEntry | None], Awaitable[Any]]) -> web.Response:
        try:
            entry = self._viewer(request)
            body = await build(entry)
        except Reject as rej:
            self.gateway.metrics.error("-", rej.kind)
            response = rej.response()
            response.headers.update(_HEADERS)
            return response
        return web.json_response(body, headers=_HEADERS)

    # -- the data --------------------------------------------------------------------------------------------
    async def overview(self, request: web.Request) -> web.Response:
        return await self._answer(request, self._overview)

    async def _overview(self, entry: KeyEntry | None) -> dict[str, Any]:
        from servectl.gateway.admin import status_document

        gw = self.gateway
        status = await status_document(gw)
        shown = self._profiles(entry)
        aliases = [{"alias": a, **status["aliases"][a]} for a in self._aliases(entry)]
        services = [
            {
                "profile": u.profile,
                "served_name": u.served_name,
                "url": u.url,
                "state": "ready" if u.ready else "starting",
            }
            for u in gw.upstreams
            if shown(u.profile)
        ]
        return {
            "key": None if entry is None else entry.name,
            "gateway": {
                "listen": status["listen"],
                "holds": [h.reason for h in gw.admission.holds.values() if all(map(shown, h.profiles))],
                "services_error": status["services_error"],
            },
            "aliases": aliases,
            "services": services,
            "gpus": await self._gpu_document(),
            "logs": self._logs is not None,
        }

    async def _gpu_document(self) -> dict[str, Any]:
        async with self._gpu_lock:
            now = self._clock()
            if self._gpu_cache is None or now - self._gpu_cache[0] > GPU_TTL_S:
                self._gpu_cache = (now, await asyncio.to_thread(gpu_document, self._gpus))
            return self._gpu_cache[1]

    async def requests(self, request: web.Request) -> web.Response:
        async def build(entry: KeyEntry | None) -> dict[str, Any]:
            aliases = None if entry is None or entry.aliases is None else self._aliases(entry)
            rows = self.gateway.recent.newest(aliases=aliases, limit=_int(request.query, "limit", 50, 1, 200))
            return {"requests": [r.to_dict() for r in rows]}

        return await self._answer(request, build)

    async def history(self, request: web.Request) -> web.Response:
        async def build(entry: KeyEntry | None) -> dict[str, Any]:
            events, warning = await asyncio.to_thread(self._history)
            shown = self._profiles(entry)
            rows = [
                {k: e[k] for k in _HISTORY_FIELDS if k in e}
                for e in reversed(events)
                if not e.get("profile") or shown(str(e["profile"]))
            ]
            return {"events": rows[:HISTORY_ROWS], "warning": warning}

        return await self._answer(request, build)

    async def logs(self, request: web.Request) -> web.Response:
        async def build(entry: KeyEntry | None) -> dict[str, Any]:
            profile = request.query.get("profile", "")
            shown = self._profiles(entry)
            known = [u.profile for u in self.gateway.upstreams if shown(u.profile)]
            if profile not in known:
                raise Reject(
                    404, f"no service {profile!r} to show; services: {', '.join(known) or 'none'}", "bad_request"
                )
            if self._logs is None:
                return {"profile": profile, "lines": [], "problem": "this gateway cannot read engine logs"}
            tail = _int(request.query, "tail", 200, 1, LOG_TAIL_MAX)
            secrets = [u.api_key for u in self.gateway.upstreams if u.api_key]
            try:
                lines = await asyncio.to_thread(self._logs, profile, tail)
            except ServectlError as err:
                return {"profile": profile, "lines": [], "problem": err.lines()[0]}
            return {"profile": profile, "lines": [redact(ln, secrets)[:LOG_LINE_MAX] for ln in lines], "problem": None}

        return await self._answer(request, build)


def _int(query: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    try:
        return min(high, max(low, int(query.get(name, default))))
    except ValueError:
        return default


def gpu_document(gpus: Callable[[], GpuSnapshot]) -> dict[str, Any]:
    """Per-card memory as plain JSON; ``available: false`` and the driver's one line when NVML cannot answer."""
    try:
        snapshot = gpus()
    except ServectlError as err:
        problem = err.lines()[0]
        if "nvidia-ml-py is not installed" in problem:  # a pip install in the gateway's container helps nobody
            problem = (
                "NVML unavailable where the gateway runs (no nvidia-ml-py there: the gateway container has none); "
                "servectl status --watch on the host shows the cards"
            )
        return {"available": False, "problem": problem, "devices": []}
    devices = [
        {
            "index": d.index,
            "name": d.name,
            "memory_total_bytes": d.memory_total_bytes,
            "memory_used_bytes": d.memory_used_bytes,
            "memory_free_bytes": d.memory_free_bytes,
            "problem": d.problem,
        }
        for d in snapshot.devices
    ]
    return {"available": True, "problem": None, "driver_version": snapshot.driver_version, "devices": devices}


def docker_log_tail(docker: DockerEngine) -> LogTail:
    """The log tail of a servectl service's engine container (redacted; the dashboard redacts again with the
    engines' own keys)."""

    def tail(profile: str, lines: int) -> list[str]:
        from servectl.service.logs import follow_logs

        return list(follow_logs(name=profile, docker=docker, tail=lines))

    return tail
