"""Alias -> the servectl service that serves it now. Pure: the running services come in as plain values.

An alias names a list of profiles; the first of them (in the file's order) whose service is ready serves
it, so one alias spans a profile and its rollback target and clients keep it across ``swap`` and
``rollback``. The alias ``*`` profile list (the ``default`` alias with no file) matches any service.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from servectl.gateway.config import ANY_PROFILE


@dataclass(frozen=True)
class Upstream:
    """A servectl service the gateway can send requests to."""

    profile: str
    url: str  # http://127.0.0.1:30000
    served_name: str  # the engine's --served-model-name ("" when unknown: the model field is left alone)
    ready: bool
    api_key: str | None = field(default=None, repr=False)  # the engine's own key (serve.api_key_env/file)


@dataclass(frozen=True)
class Route:
    """Where one request goes."""

    alias: str
    profile: str
    url: str
    served_name: str
    api_key: str | None = field(default=None, repr=False)


class AliasTable:
    """The aliases of one configuration."""

    def __init__(self, aliases: Mapping[str, Sequence[str]]) -> None:
        self._aliases = {name: tuple(profiles) for name, profiles in aliases.items()}

    @property
    def names(self) -> list[str]:
        return sorted(self._aliases)

    def __contains__(self, alias: object) -> bool:
        return alias in self._aliases

    def profiles(self, alias: str) -> tuple[str, ...]:
        return self._aliases[alias]

    def affected(self, alias: str, profiles: Iterable[str]) -> bool:
        """Whether a change to ``profiles`` (a swap, an up, a down) touches ``alias``."""
        mine = self._aliases[alias]
        return ANY_PROFILE in mine or any(p in mine for p in profiles)

    def route(self, alias: str, upstreams: Sequence[Upstream]) -> Route | None:
        """The service serving ``alias`` now (None: none of its profiles is ready)."""
        ready = {u.profile: u for u in upstreams if u.ready}
        for profile in self._aliases[alias]:
            candidates = sorted(ready) if profile == ANY_PROFILE else [profile]
            for name in candidates:
                if name in ready:
                    up = ready[name]
                    return Route(alias, up.profile, up.url, up.served_name, up.api_key)
        return None

    def describe(self, alias: str) -> str:
        """``demo or demo-rollback`` / ``any servectl service``: for messages."""
        mine = self._aliases[alias]
        return "any servectl service" if ANY_PROFILE in mine else " or ".join(mine)
