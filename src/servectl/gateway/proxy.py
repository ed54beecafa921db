"""The gateway's HTTP side (aiohttp): authenticate, bound, route by alias, proxy streams as they come.

Routes: ``GET /healthz`` (no key), ``GET /metrics`` (no key; bind the gateway to a trusted address),
``GET /v1/models`` and ``GET /api/tags`` (the aliases the key grants, in OpenAI's and Ollama's shape), and every
POST path of :data:`servectl.gateway.families.PROXIED`: OpenAI chat, completions, responses, embeddings, rerank
and score, Anthropic messages and count_tokens, Ollama chat, generate and show, routed by the body's ``model``.
One mechanism serves them all; what differs per API family (the refusal's shape, the stream's framing, the usage
field, the keep-alive of a held stream) comes from that table.

aiohttp was chosen by measurement (benchmarks/results/gateway-stack.md): against uvicorn + starlette with an
httpx client, it added about a third of the time to first byte on the same machine, and it is one package
for the server and the upstream pool. Its keep-alive timer also runs from the moment a connection opens
and only stops when a whole request head arrived, so it is the header timeout (slow-header clients are
cut); the body has its own timeout here.

Answers carry the alias the client asked for in ``model`` (``response_model: alias``, the default): the
served name changes with every swap, and clients that compare the answer's model with the one they asked
for, or key caches and logs by it, should not see the swap. ``response_model: served`` passes the engine's
name through (as anvil's ``transparent_response_model``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import ClientConnectionError, ClientError, ClientPayloadError, ClientSession, ClientTimeout, web

from servectl.gateway.admission import Admission, Flight, HoldExpired
from servectl.gateway.cards import ProfileCard
from servectl.gateway.config import GatewayConfig
from servectl.gateway.families import (
    OPENAI,
    PROXIED_PATHS,
    Family,
    answers_model_path,
    family_of,
    rewrite_last_model,
)
from servectl.gateway.families import engine_paths as catalog_paths
from servectl.gateway.listings import Listings
from servectl.gateway.metrics import Metrics
from servectl.gateway.on_request import SwapOnRequest
from servectl.gateway.ratelimit import RateLimiter
from servectl.gateway.recent import RecentRequests, RequestRecord
from servectl.gateway.reject import KEYS_UNREADABLE, Reject
from servectl.gateway.routes import AliasTable, Route, Upstream
from servectl.gateway.turns import SwapTurns
from servectl.gateway.usage import UsageBook, usage_path

if TYPE_CHECKING:
    from servectl.gateway.keys import KeyEntry, KeyRing
    from servectl.gateway.reload import ConfigWatcher
    from servectl.service.clocks import Clocks

log = logging.getLogger("servectl.gateway")

_FORWARDED_HEADERS = ("Content-Type", "Accept", "User-Agent", "OpenAI-Beta")
ROUTES_TTL_S = 2.0
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass
class _Call:
    """What one request learned on its way (for the log line and the metrics)."""

    alias: str = "-"
    key: str = "-"
    entry: KeyEntry | None = None
    status: int = 0
    ttfb_s: float | None = None
    tokens_out: int | None = None


def rewrite_model(data: bytes, served: str, alias: str) -> bytes:
    """``"model": "<served>"`` -> ``"model": "<alias>"`` in JSON or SSE bytes (no parsing: one pass)."""
    if not served or served == alias:
        return data
    s, a = json.dumps(served).encode(), json.dumps(alias).encode()
    return data.replace(b'"model":' + s, b'"model":' + a).replace(b'"model": ' + s, b'"model": ' + a)


def error_event(message: str, reason: str = "upstream", family: Family = OPENAI) -> bytes:
    """An event ``family``'s SDKs raise as an API error (then the stream ends); ``reason`` as a Reject's."""
    return family.stream_error(message, reason)


def presented_key(request: web.Request) -> str | None:
    auth = request.headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return request.headers.get("x-api-key") or None


class Gateway:
    """One gateway: configuration, keys, the route cache, holds and counters, and the aiohttp app.

    Args:
        config: the gateway file.
        table: the aliases (from the file, or the defaults).
        keys: the key ring (None when ``auth: none``).
        upstreams: the servectl services running now (blocking; run in a thread).
        startup_s: a profile's last measured startup time (for Retry-After), None when never measured.
        start: swaps to a profile (``swap.on_request``).
        engine_paths: a profile -> the POST paths its engine serves (its SGLang route table; default the shipped
            catalog's); a family path outside it is refused 404 naming it.
        cards: a profile -> its :class:`~servectl.gateway.cards.ProfileCard` (context window, capabilities).
        clocks: time as the turns, the rate limits and the usage counters read it (the context's).
    """

    def __init__(
        self,
        config: GatewayConfig,
        *,
        table: AliasTable,
        keys: KeyRing | None,
        upstreams: Callable[[], Sequence[Upstream]],
        startup_s: Callable[[str], float | None] = lambda _profile: None,
        start: Callable[[str], object] | None = None,
        engine_paths: Callable[[str], frozenset[str]] | None = None,
        cards: Callable[[str], ProfileCard | None] | None = None,
        clocks: Clocks,
    ) -> None:
        self.config = config
        self.start = start  # swaps to a profile (blocking; raises ServectlError): swap.on_request
        # the profiles a swap to a profile would stop (blocking; set by serve_gateway): anti-thrash counts those
        self.replaced_by: Callable[[str], Collection[str]] | None = None
        self.turns = SwapTurns(
            min_loaded_s=config.swap.min_loaded_s, when_busy=config.swap.when_busy, clock=clocks.monotonic
        )
        self.table = table
        self.keys = keys
        self._list_upstreams = upstreams
        self.startup_s = startup_s
        self.admission = Admission(table, hold_s=config.swap.hold_s, drain_s=config.swap.drain_s)
        self.metrics = Metrics()
        self.limiter = RateLimiter(clock=clocks.monotonic)
        self.recent = RecentRequests()  # the dashboard's recent requests (no prompt, no key)
        self.upstreams: list[Upstream] = []
        self.upstreams_error: str | None = None
        self._upstreams_at = -1e18
        self._refreshing: asyncio.Task[None] | None = None
        self._active = 0
        self.session: ClientSession | None = None
        self.draining = False  # set when the gateway stops: new requests get 503 draining
        self.usage = UsageBook(usage_path(keys.path) if keys is not None else None, clock=clocks.wall)
        self._flusher: asyncio.Task[None] | None = None
        self.watcher: ConfigWatcher | None = None  # set by serve_gateway when it watches the sources
        self.on_request = SwapOnRequest(self)
        # a profile -> the POST paths its engine's route table has; -> its context window and capabilities
        self.engine_paths = engine_paths or (lambda _profile: catalog_paths())
        self.cards: Callable[[str], ProfileCard | None] = cards or (lambda _profile: None)
        self.listings = Listings(self)  # /v1/models, /v1/models/{alias}, /api/tags

    # -- lifecycle -------------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.limits.max_body_bytes)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/metrics", self.metrics_page)
        app.router.add_get("/v1/models", self.guarded(self.listings.models))
        app.router.add_get("/v1/models/{alias:.+}", self.guarded(self.listings.model))
        app.router.add_get("/api/tags", self.guarded(self.listings.tags))
        for path in PROXIED_PATHS:
            app.router.add_post(path, self.guarded(self.proxy, charge=False))  # charged once the alias is known
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, _app: web.Application) -> None:
        up = self.config.upstream
        connector_timeout = ClientTimeout(total=None, sock_connect=up.connect_timeout_s, sock_read=None)
        from aiohttp import TCPConnector

        self.session = ClientSession(
            connector=TCPConnector(limit=up.pool_size, keepalive_timeout=30),
            timeout=connector_timeout,
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
        )
        await self.refresh(force=True)
        self._flusher = asyncio.create_task(self._flush_usage())

    async def _close(self, _app: web.Application) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
        self.usage.flush()
        if self.session is not None:
            await self.session.close()

    async def _flush_usage(self) -> None:
        while True:  # the counters reach usage.json (gateway keys list) within a second
            await asyncio.sleep(1.0)
            await asyncio.to_thread(self.usage.flush)

    def reconfigure(self, config: GatewayConfig, table: AliasTable) -> None:
        """Serve an edited configuration from the next request on (:mod:`servectl.gateway.reload` checked
        that it changes nothing fixed at start); requests in flight and holds go on."""
        self.config, self.table = config, table
        self.admission.table = table
        self.admission.hold_s, self.admission.drain_s = config.swap.hold_s, config.swap.drain_s
        self.turns.min_loaded_s, self.turns.when_busy = config.swap.min_loaded_s, config.swap.when_busy

    # -- routes ----------------------------------------------------------------------------------------------
    async def refresh(self, *, force: bool = False) -> None:
        """Ask servectl which services run (at most every :data:`ROUTES_TTL_S` unless ``force``)."""
        if not force and time.monotonic() - self._upstreams_at < ROUTES_TTL_S:
            return
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.create_task(self._refresh())
        await asyncio.shield(self._refreshing)

    async def _refresh(self) -> None:
        try:
            self.upstreams = list(await asyncio.to_thread(self._list_upstreams))
            self.upstreams_error = None
            self.turns.seen(u.profile for u in self.upstreams if u.ready)
        except Exception as err:  # an engine hiccup keeps the last known routes; /healthz says why
            self.upstreams_error = str(err).splitlines()[0] if str(err) else type(err).__name__
            log.warning("cannot list the servectl services: %s", self.upstreams_error)
        self._upstreams_at = time.monotonic()

    async def route(self, alias: str, *, on_wait: Callable[[], Awaitable[None]] | None = None) -> Route:
        await self.refresh()
        route = self.table.route(alias, self.upstreams)
        if route is None:
            await self.refresh(force=True)
            route = self.table.route(alias, self.upstreams)
        if route is None and alias in self.config.swap.on_request and self.start is not None:
            route = await self.on_request.swap_for(alias, on_wait)
        if route is None:
            wanted = self.table.describe(alias)
            retry = max((self.startup_s(p) or 0.0) for p in self.table.profiles(alias))
            raise Reject(
                503,
                f"alias {alias!r}: {wanted} is not running; start it: servectl up PROFILE",
                "unavailable",
                reason="upstream_down",
                headers={"Retry-After": str(max(1, round(retry or 5)))},
            )
        return route

    # -- auth and limits -------------------------------------------------------------------------------------
    def guarded(
        self,
        handler: Callable[[web.Request, _Call, KeyEntry | None], Awaitable[web.StreamResponse]],
        *,
        charge: bool = True,
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """``handler`` behind the key checks (key, expiry, read-only, rate) and the admission bound; with
        ``charge`` the request counts against the key's budget before the handler runs (else the handler
        calls :meth:`charge` once it knows the request is in the key's scope)."""

        async def run(request: web.Request) -> web.StreamResponse:
            call = _Call()
            t0, arrived = time.monotonic(), time.time()
            self._active += 1
            try:
                if self.draining:
                    raise Reject(503, "the gateway is stopping (draining its requests); retry shortly", "unavailable",
                                 reason="draining", headers={"Retry-After": "2", "Connection": "close"})  # fmt: skip
                if self._active > self.config.limits.max_concurrency:
                    raise Reject(503, "the gateway is at its max_concurrency; retry shortly", "unavailable",
                                 reason="admission_full", headers={"Retry-After": "1"})  # fmt: skip
                entry = self._authenticate(request, call)
                if charge:
                    self.charge(entry)
                response = await handler(request, call, entry)
            except Reject as rej:
                self.metrics.error(call.alias, rej.kind)
                response = rej.response(family_of(request.path).error_body)
            except asyncio.CancelledError:
                self.metrics.error(call.alias, "client_gone")
                call.status = 499
                raise
            finally:
                self._active -= 1
                status = call.status or (response.status if "response" in locals() else 499)
                self.metrics.request(call.alias, status)
                self.metrics.family_request(family_of(request.path).name, status)
                if call.entry is not None:
                    self.metrics.key_request(call.entry.name, status)
                self._remember(request, call, status, arrived, t0)
                log.info(
                    "%s %s alias=%s key=%s status=%s ttfb_ms=%s ms=%.1f",
                    request.method, request.path, call.alias, call.key, status,
                    "-" if call.ttfb_s is None else f"{call.ttfb_s * 1000:.1f}", (time.monotonic() - t0) * 1000,
                )  # fmt: skip
            return response

        return run

    def _remember(self, request: web.Request, call: _Call, status: int, arrived: float, t0: float) -> None:
        ttfb = None if call.ttfb_s is None else round(call.ttfb_s * 1000, 1)
        latency = round((time.monotonic() - t0) * 1000, 1)
        self.recent.add(
            RequestRecord(arrived, request.path, call.alias, call.key, status, latency, ttfb, call.tokens_out)
        )

    def _authenticate(self, request: web.Request, call: _Call) -> KeyEntry | None:
        if self.keys is None:
            return None
        presented = presented_key(request)
        if presented is None:
            raise Reject(401, "no key: send Authorization: Bearer KEY or x-api-key: KEY", "auth")
        entry = self.keys.check(presented)
        if entry is None and self.keys.error is not None:  # fail closed, in the gateway's shape (never a 500)
            raise Reject(503, KEYS_UNREADABLE, "keys", reason="keys_unreadable", headers={"Retry-After": "10"})
        if entry is None:
            raise Reject(401, "unknown key (servectl gateway keys create NAME makes one)", "auth")
        call.key, call.entry = entry.name, entry
        if entry.expired(time.time()):
            raise Reject(401, f"key {entry.name!r} has expired; create a new one", "auth")
        if not entry.allows_method(request.method):
            raise Reject(403, f"key {entry.name!r} is read-only: it may only GET (such as /v1/models), not "
                         f"{request.method} {request.path}; use a key made without --read-only", "forbidden",
                         reason="read_only")  # fmt: skip
        if self.usage.over_budget(entry) and entry.budget is not None:
            return entry  # refused by charge() with budget_exhausted, not counted against the rate
        wait = self.limiter.take(entry.name, entry.rate_per_minute or self.config.limits.rate_per_minute)
        if wait:
            raise Reject(429, f"key {entry.name!r} is over its rate limit", "rate", reason="rate_limited",
                         headers={"Retry-After": str(wait)})  # fmt: skip
        return entry

    def charge(self, entry: KeyEntry | None) -> None:
        """Count one request of ``entry`` against its budget.

        Raises:
            Reject: 429 ``budget_exhausted`` with Retry-After up to the next period.
        """
        if entry is None:
            return
        if wait := self.usage.over_budget(entry):
            raise Reject(429, f"key {entry.name!r} has used its budget of {entry.budget} requests; it starts "
                         f"again in {wait} s", "budget", reason="budget_exhausted",
                         headers={"Retry-After": str(wait)})  # fmt: skip
        self.usage.charge(entry)

    def granted(self, entry: KeyEntry | None) -> list[str]:
        return [a for a in self.table.names if entry is None or entry.grants(a)]

    async def _read_json(self, request: web.Request, call: _Call) -> dict[str, Any]:
        limit = self.config.limits.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise Reject(413, f"the request body is larger than {limit} bytes (limits.max_body_bytes)", "too_large")
        body = bytearray()
        try:
            async with asyncio.timeout(self.config.limits.body_timeout_s):
                while chunk := await request.content.readany():
                    body += chunk
                    if len(body) > limit:
                        raise Reject(413, f"the request body is larger than {limit} bytes", "too_large")
        except TimeoutError:
            raise Reject(408, "the request body did not arrive in time (limits.body_timeout_s)", "timeout",
                         headers={"Connection": "close"}) from None  # fmt: skip
        try:
            data = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            where = f" (line {err.lineno}, column {err.colno})" if isinstance(err, json.JSONDecodeError) else ""
            raise Reject(
                400, f"the request body is not JSON: {err.args[0].split(':')[0]}{where}", "bad_request"
            ) from None
        except RecursionError:
            raise Reject(400, "the request body is not JSON: nested too deep", "bad_request") from None
        except ValueError:  # an integer past Python's 4,300-digit conversion limit
            raise Reject(400, "the request body holds a number too long to read", "bad_request") from None
        if not isinstance(data, dict):
            raise Reject(400, f"the request body must be a JSON object, not {type(data).__name__}", "bad_request")
        return data

    # -- handlers --------------------------------------------------------------------------------------------
    async def healthz(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "holds": len(self.admission.holds)})

    async def metrics_page(self, _request: web.Request) -> web.Response:
        def in_flight() -> dict[str, int]:
            out = dict.fromkeys(self.table.names, 0)
            for f in self.admission.flights:
                out[f.alias] = out.get(f.alias, 0) + 1
            return out

        def budgets() -> list[tuple[str, int, int]]:
            entries = self.keys.entries if self.keys is not None else []
            now = time.time()
            return [(e.name, row.in_period(e.budget, now), e.budget.requests)
                    for e, row in self.usage.rows(entries) if e.budget is not None]  # fmt: skip

        return web.Response(text=self.metrics.render(in_flight, budgets), content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Type-Options": "nosniff"})  # fmt: skip

    async def proxy(self, request: web.Request, call: _Call, entry: KeyEntry | None) -> web.StreamResponse:
        family = family_of(request.path)
        body = await self._read_json(request, call)
        alias = body.get("model")
        if not isinstance(alias, str) or not alias:
            raise Reject(400, f"the request names no model; ask for an alias: {', '.join(self.granted(entry))}",
                         "bad_request")  # fmt: skip
        if alias not in self.table:
            raise Reject(404, _unknown_alias(alias, self.granted(entry), entry), "unknown_alias")
        call.alias = alias
        if entry is not None and not entry.grants(alias):
            raise Reject(403, f"key {entry.name!r} is not granted alias {alias!r} (it may use: "
                         f"{', '.join(self.granted(entry)) or 'none'})", "forbidden")  # fmt: skip
        self.charge(entry)
        try:
            waited = await self.admission.admit(alias)
        except HoldExpired as held:
            retry = {"Retry-After": str(held.retry_after_s)}
            if held.maintenance:
                raise Reject(503, f"alias {alias!r} is away for maintenance: servectl {held.reason}, expected back in "
                             f"about {held.retry_after_s} s; retry then", "unavailable", reason="maintenance",
                             headers=retry) from None  # fmt: skip
            self.metrics.waited(alias, self.admission.hold_s)
            raise Reject(503, f"alias {alias!r} is held while servectl {held.reason}; retry", "unavailable",
                         reason="swapping", headers=retry) from None  # fmt: skip
        if waited > 0:
            self.metrics.waited(alias, waited)
        early: list[web.StreamResponse] = []  # a stream answered before its engine runs (swap on request)

        async def keep_alive() -> None:
            if not early:
                early.append(web.StreamResponse(status=200, headers=_SSE_HEADERS))
                await early[0].prepare(request)
                call.status = 200
            await early[0].write((family.keepalive or b"").replace(b"{alias}", alias.encode()))

        held_stream = family.streamed(body) and family.keepalive is not None
        try:
            route = await self.route(alias, on_wait=keep_alive if held_stream else None)
        except Reject as rej:
            if not early:
                raise
            self.metrics.error(alias, rej.kind)
            await early[0].write(error_event(rej.message, rej.reason, family))
            await early[0].write_eof()
            return early[0]
        if request.path not in self.engine_paths(route.profile):
            raise Reject(404, f"the engine of {route.profile} (alias {alias!r}) does not serve POST {request.path}: "
                         "its SGLang route table has no such path", "unknown_path")  # fmt: skip
        if route.served_name:
            body["model"] = route.served_name
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        return await self._forward(request, call, route, payload, early[0] if early else None)

    async def _forward(
        self, request: web.Request, call: _Call, route: Route, payload: bytes, early: web.StreamResponse | None = None
    ) -> web.StreamResponse:
        family = family_of(request.path)
        assert self.session is not None
        headers = {h: request.headers[h] for h in _FORWARDED_HEADERS if h in request.headers}
        headers["Content-Type"] = "application/json"
        if route.api_key:
            headers["Authorization"] = f"Bearer {route.api_key}"
        flight = Flight(alias=route.alias, profile=route.profile)
        self.admission.take_off(flight)
        t0 = time.monotonic()
        try:
            try:
                upstream = await self.session.post(route.url + request.path, data=payload, headers=headers)
            except ClientError as err:
                self.refresh_soon()
                raise Reject(502, f"the engine of {route.profile} did not answer ({type(err).__name__})", "upstream",
                             headers={"Retry-After": "1"}) from None  # fmt: skip
            flight.on_cut = upstream.close
            try:
                if upstream.status == 401:  # the engine refused the gateway, not the client: say why and the fix
                    refused = Reject(502, _engine_refused_gateway(route), "upstream", reason="upstream_auth")
                    if early is None:
                        raise refused
                    await early.write(error_event(refused.message, refused.reason, family))
                    await early.write_eof()
                    return early
                call.ttfb_s = time.monotonic() - t0
                self.metrics.first_byte(route.alias, call.ttfb_s)
                back = "" if self.config.response_model == "served" else route.served_name
                if upstream.content_type in family.stream_types:
                    return await self._stream(request, call, route, upstream, back, flight, early)
                if early is not None:  # the engine refused the request after the stream had begun
                    text = (await upstream.read())[:2000].decode("utf-8", "replace")
                    message = f"the engine answered {upstream.status}: {text}"
                    await early.write(error_event(message, "upstream_refused", family))
                    await early.write_eof()
                    return early
                whole = await self._whole(call, route, upstream, back, flight, family)
                if back and request.path in answers_model_path() and isinstance(whole.body, bytes):
                    whole.body = rewrite_last_model(whole.body, route.alias)
                return whole
            finally:
                upstream.close()  # a drained or failed answer must not go back to the pool
        finally:
            self.admission.land(flight)

    async def _whole(
        self, call: _Call, route: Route, upstream: Any, back: str, flight: Flight, family: Family
    ) -> web.Response:
        try:
            data = await upstream.read()
        except (TimeoutError, ClientError) as err:
            kind = "cut" if flight.was_cut else "upstream"
            raise Reject(502, self._failure(route, flight, err), kind) from None
        if found := family.usage_out.findall(data[-4096:]):
            self._count(call, route.alias, int(found[-1]))
            call.tokens_out = int(found[-1])
        call.status = upstream.status
        return web.Response(body=rewrite_model(data, back, route.alias), status=upstream.status,
                            content_type=upstream.content_type or "application/json")  # fmt: skip

    async def _stream(
        self,
        request: web.Request,
        call: _Call,
        route: Route,
        upstream: Any,
        back: str,
        flight: Flight,
        early: web.StreamResponse | None = None,
    ) -> web.StreamResponse:
        family = family_of(request.path)
        response = early  # a StreamResponse is a mapping: an empty one is falsy, so compare with None
        if response is None:
            headers = {**_SSE_HEADERS, "Content-Type": upstream.headers.get("Content-Type", family.stream_types[0])}
            response = web.StreamResponse(status=upstream.status, headers=headers)
            await response.prepare(request)
            call.status = upstream.status
        pending = b""
        tokens = 0
        try:
            async for chunk in upstream.content.iter_any():
                pending += chunk
                cut = pending.rfind(family.separator) + len(family.separator)
                if cut < len(family.separator):
                    continue
                events, pending = pending[:cut], pending[cut:]
                if found := family.usage_out.findall(events):
                    tokens = int(found[-1])
                await response.write(rewrite_model(events, back, route.alias))
            if flight.was_cut:
                raise ClientConnectionError("cut")
            if pending:
                await response.write(rewrite_model(pending, back, route.alias))
        except (TimeoutError, ClientPayloadError, ClientConnectionError) as err:
            self.metrics.error(route.alias, "cut" if flight.was_cut else "upstream")
            with contextlib.suppress(ConnectionError):
                await response.write(
                    error_event(self._failure(route, flight, err), "cut" if flight.was_cut else "upstream", family)
                )
            self.refresh_soon()
        finally:
            self._count(call, route.alias, tokens)
            call.tokens_out = tokens or None
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    def _failure(self, route: Route, flight: Flight, err: BaseException) -> str:
        if flight.was_cut:
            return (f"alias {route.alias!r}: cut after {self.admission.drain_s:g} s of drain while servectl "
                    "changed its service; retry")  # fmt: skip
        return f"the engine of {route.profile} failed mid-answer ({type(err).__name__}); retry"

    def _count(self, call: _Call, alias: str, tokens: int) -> None:
        self.metrics.tokens_out[alias] += tokens
        if call.entry is not None:
            self.metrics.key_tokens[call.entry.name] += tokens
            self.usage.tokens(call.entry, tokens)

    def refresh_soon(self) -> None:
        self._upstreams_at = -1e18


def _engine_refused_gateway(route: Route) -> str:
    """The gateway's own words for an engine's 401: its key for the engine is missing or wrong."""
    had = "the key the gateway sent was refused" if route.api_key else "the gateway has no key for it"
    return (
        f"the engine of {route.profile} refused the gateway (401: {had}); set the variable the profile's "
        "serve.api_key_env names (or its api_key_file) in the environment that starts the gateway, then restart "
        "it: servectl gateway down, then servectl gateway up (or restart servectl gateway run)"
    )


def _unknown_alias(alias: str, granted: Sequence[str], entry: KeyEntry | None) -> str:
    """The 404's words: the aliases this key may use, or why it may use none of the gateway's."""
    if granted:
        return f"no alias {alias!r}; aliases: {', '.join(granted)}"
    if entry is not None and entry.aliases:
        return (
            f"no alias {alias!r}; key {entry.name!r} is granted {', '.join(entry.aliases)}, none of which this "
            "gateway has now (its gateway file changed since the key was made?): make a key for one of its "
            "aliases (servectl gateway status lists them)"
        )
    return f"no alias {alias!r}; this gateway has no aliases (servectl gateway status names its gateway file)"
