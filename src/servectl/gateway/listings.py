"""The gateway's listings: ``GET /v1/models`` and ``/v1/models/{alias}`` (OpenAI's shape, with the context window,
capabilities and state of :mod:`servectl.gateway.cards`) and ``GET /api/tags`` (Ollama's), each of the aliases the
key may use."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import ClientError, ClientSession, web

from servectl.gateway.admission import Admission
from servectl.gateway.cards import ProfileCard, model_entry
from servectl.gateway.families import ollama_tags
from servectl.gateway.reject import Reject
from servectl.gateway.routes import AliasTable, Route, Upstream

if TYPE_CHECKING:
    from servectl.gateway.keys import KeyEntry


class Call(Protocol):
    """What a handler records of its request (the proxy's ``_Call``)."""

    alias: str


class ListingHost(Protocol):
    """What the listings read of the gateway (:class:`servectl.gateway.proxy.Gateway`; no import cycle)."""

    table: AliasTable
    upstreams: list[Upstream]
    admission: Admission
    cards: Callable[[str], ProfileCard | None]
    session: ClientSession | None

    async def refresh(self, *, force: bool = False) -> None: ...

    def granted(self, entry: KeyEntry | None) -> list[str]: ...


class Listings:
    """The listing handlers of one gateway (behind its key checks: ``Gateway.guarded``)."""

    def __init__(self, gateway: ListingHost) -> None:
        self.gateway = gateway
        self._windows: dict[tuple[str, str], int | None] = {}  # (engine url, served name) -> its max_model_len

    async def models(self, _request: web.Request, _call: Call, entry: KeyEntry | None) -> web.StreamResponse:
        await self.gateway.refresh()
        data = [await self._model_entry(a) for a in self.gateway.granted(entry)]
        return web.json_response({"object": "list", "data": data})

    async def model(self, request: web.Request, call: Call, entry: KeyEntry | None) -> web.StreamResponse:
        alias = request.match_info["alias"]
        if alias not in self.gateway.table or (entry is not None and not entry.grants(alias)):
            granted = ", ".join(self.gateway.granted(entry)) or "none"
            raise Reject(404, f"no alias {alias!r} for this key; aliases: {granted}", "unknown_alias")
        call.alias = alias
        await self.gateway.refresh()
        return web.json_response(await self._model_entry(alias))

    async def _model_entry(self, alias: str) -> dict[str, Any]:
        route = self.gateway.table.route(alias, self.gateway.upstreams)
        state = "held" if self.gateway.admission.holding(alias) else ("ready" if route else "down")
        profiles = self.gateway.table.profiles(alias)
        cards = {p: self.gateway.cards(p) for p in {*profiles, *([route.profile] if route else [])} if p != "*"}
        window = await self._engine_window(route) if route is not None else None
        return model_entry(alias, profiles=profiles, serving=route.profile if route else None, state=state,
                           cards=cards, engine_window=window)  # fmt: skip

    async def _engine_window(self, route: Route) -> int | None:
        """The engine's own ``max_model_len`` (its ``/v1/models``), asked once per engine and served name."""
        key = (route.url, route.served_name)
        if key not in self._windows and self.gateway.session is not None:
            headers = {"Authorization": f"Bearer {route.api_key}"} if route.api_key else {}
            try:
                async with (
                    asyncio.timeout(2.0),
                    self.gateway.session.get(route.url + "/v1/models", headers=headers) as got,
                ):
                    cards = (await got.json()).get("data") or [] if got.status == 200 else []
                window = next((c.get("max_model_len") for c in cards if isinstance(c, dict)), None)
                self._windows[key] = window if isinstance(window, int) else None
            except (TimeoutError, ClientError, ValueError, AttributeError):
                return None  # asked again next time
        return self._windows.get(key)

    async def tags(self, _request: web.Request, _call: Call, entry: KeyEntry | None) -> web.StreamResponse:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        return web.json_response(ollama_tags(self.gateway.granted(entry), now))
