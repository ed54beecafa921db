"""Routed runs: qualify through the gateway, and what the ``routed`` gate expects of the route.

``servectl qualify ALIAS --via-gateway`` reads the gateway file (``servectl gateway``'s, see
:mod:`servectl.gateway.config`) for the address and how answers name the model, takes the alias's first
profile as the one that must answer (a later profile of the alias is the rollback target: answering from it
is a fallback), and reads the gateway's own record: its ``/metrics`` counter of requests per alias, and its
status over the admin socket (which profile serves the alias now). ``--url`` with a key works against any
OpenAI-compatible endpoint; the identity checks then use ``--model``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

    from servectl.service.context import Context

_REQUESTS = re.compile(r'^servectl_gateway_requests_total\{alias="(?P<alias>[^"]*)",code="\d+"\} (?P<n>\d+)$', re.M)


@dataclass(frozen=True)
class RouteTarget:
    """What a routed run must find behind the endpoint.

    Attributes:
        alias: The name clients ask for (the request's ``model``).
        profile: The profile that must answer (the alias's first): another one answering is a fallback.
        served_name: That profile's ``model.served_name``.
        context_length: That profile's declared context (None: not declared).
        response_model: ``alias`` when the gateway names the alias in answers, ``served`` when it passes the
            engine's name through.
        engine_url: The profile's own service (to read its ``max_model_len`` directly), when known.
        engine_key: That service's own key (never recorded), when it has one.
        metrics_url: The gateway's ``/metrics`` (its per-alias request counter), when routed.
        status: Reads the gateway's status document (admin socket), when routed.
    """

    alias: str
    profile: str | None = None
    served_name: str | None = None
    context_length: int | None = None
    response_model: str = "alias"
    engine_url: str | None = None
    metrics_url: str | None = None
    engine_key: str | None = field(default=None, repr=False, compare=False)
    status: Callable[[], Mapping[str, Any] | None] | None = field(default=None, repr=False, compare=False)

    @property
    def answer_model(self) -> str:
        """The ``model`` an answer must carry."""
        if self.response_model == "served" and self.served_name:
            return self.served_name
        return self.alias

    def requests_seen(self, http: httpx.Client) -> int:
        """The gateway's count of requests answered on the alias (0 without a metrics URL), read with ``http``."""
        if self.metrics_url is None:
            return 0
        text = http.get(self.metrics_url, timeout=10).text
        return sum(int(m["n"]) for m in _REQUESTS.finditer(text) if m["alias"] == self.alias)

    def __str__(self) -> str:
        return f"alias {self.alias!r}"


def gateway_route(ctx: Context, alias: str, *, config_file: str | None = None) -> tuple[str, RouteTarget]:
    """The gateway's URL and the :class:`RouteTarget` of ``alias``, from the gateway file and the profiles
    (resolved in the context's environment).

    Raises:
        ProfileError: the gateway file or the alias's profile has problems.
        UsageError: the gateway has no such alias.
    """
    from pathlib import Path

    from servectl.adapters.gateway_admin import gateway_status
    from servectl.errors import UsageError
    from servectl.gateway.config import ANY_PROFILE, gateway_state_dir, load_gateway_config

    environ = ctx.environ

    config = load_gateway_config(Path(config_file) if config_file else None, environ=environ)
    aliases = config.aliases if config.aliases is not None else None
    if aliases is not None and alias not in aliases:
        raise UsageError(f"gateway: no alias {alias!r} (aliases: {', '.join(sorted(aliases))}); see the gateway file")
    first = aliases[alias][0] if aliases is not None else alias
    profile = None if first == ANY_PROFILE else first
    served = context = engine_url = engine_key = None
    if profile is not None:
        from servectl.errors import ServectlError
        from servectl.service.host_files import read_api_key

        resolved = ctx.resolve(profile)
        p = resolved.loaded.profile
        served, context = p.model.served_name, p.engine.context_length
        host = "127.0.0.1" if p.serve.host in ("0.0.0.0", "::") else p.serve.host
        engine_url = f"http://{host}:{p.serve.port}"
        try:
            engine_key = read_api_key(resolved.plan, environ)
        except ServectlError:
            engine_key = None
    url = f"http://{config.listen}"
    state = gateway_state_dir(environ).parent
    target = RouteTarget(
        alias=alias,
        profile=profile,
        served_name=served,
        context_length=context,
        response_model=config.response_model,
        engine_url=engine_url,
        engine_key=engine_key,
        metrics_url=f"{url}/metrics",
        status=lambda: gateway_status(state),
    )
    return url, target
