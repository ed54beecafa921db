"""Host methods on the gateway: run it here or as a container, look at it, and its keys."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl.host.transactions import TransactionCommands

if TYPE_CHECKING:
    from servectl.gateway.clients import AliasInfo, ClientKind, ClientSetup
    from servectl.gateway.config import GatewayConfig
    from servectl.gateway.container import GatewayContainer
    from servectl.gateway.keys import KeyEntry
    from servectl.gateway.routes import AliasTable


@dataclass(frozen=True)
class GatewayStatus:
    """What ``servectl gateway status`` shows: the gateway container (None: none) and what the running gateway
    (that container, or a ``gateway run``) says of itself through its admin socket (None: none answers)."""

    container: GatewayContainer | None
    live: dict[str, Any] | None
    #: The gateway file a gateway started now would read (``servectl gateway init`` writes it).
    config_file: Path | None = None
    config_file_present: bool = False

    def to_dict(self) -> dict[str, Any]:
        """``gateway status --json``: ``{"container": {...} or null, "live": {...} or null, "config_file": PATH,
        "config_file_present": BOOL}``."""
        return {
            "container": None if self.container is None else self.container.to_dict(),
            "live": self.live,
            "config_file": None if self.config_file is None else str(self.config_file),
            "config_file_present": self.config_file_present,
        }


@dataclass(frozen=True)
class GatewayFileCheck:
    """The gateway file ``servectl validate`` checked, and its problems (one line each; empty: it is valid)."""

    path: Path
    problems: list[str]


@dataclass(frozen=True)
class CreatedKey:
    """A new gateway key: the key itself (shown once, never stored), its entry and the key file holding its
    digest."""

    key: str
    entry: KeyEntry
    keys_file: Path


@dataclass(frozen=True)
class GatewayClients:
    """What ``servectl gateway clients`` shows: the base URL clients use, the aliases (window, capabilities), and
    one client's configuration (None: no client asked for) and where it was written (None: not written)."""

    base_url: str
    aliases: list[AliasInfo]
    setup: ClientSetup | None = None
    written: Path | None = None
    clients: tuple[str, ...] = ()  # the clients it knows


class GatewayCommands(TransactionCommands):
    """The gateway over the host's Docker engine and environment; ``config_file`` is the gateway file
    (default: ``gateway.yaml`` beside the profiles). A transaction's subclass: ``swap.on_request`` swaps."""

    def gateway_run(
        self,
        *,
        config_file: Path | None = None,
        listen: str | None = None,
        on_listening: Callable[[str], None] | None = None,
    ) -> None:
        """Run the gateway in this process until SIGTERM (which drains); one log line per request on stderr.

        Args:
            listen: HOST:PORT instead of the file's ``listen``.
            on_listening: called with the gateway's URL once it listens.

        An alias with ``swap.on_request`` swaps through :meth:`swap`, the same transaction as ``servectl swap``.

        Raises:
            ProfileError: the gateway file is invalid.
        """
        from servectl.gateway.serve import configure_logging, run_from_file

        configure_logging()
        run_from_file(
            self.ctx,
            config_file=config_file,
            listen=listen,
            on_listening=on_listening,
            start=lambda profile: self.swap(name=profile),  # swap.on_request: the same transaction as `swap`
        )

    def gateway_up(self, *, config_file: Path | None = None, timeout_s: float | None = None) -> GatewayContainer:
        """Run the gateway as a container (restart policy unless-stopped; its image built here from this
        servectl) and wait ``timeout_s`` until it answers (default
        :data:`servectl.gateway.container.UP_WAIT_S`); a running one stays.

        Raises:
            ProfileError: the gateway file is invalid. StartupFailed: it exited or did not answer in time.
        """
        from servectl.gateway.container import UP_WAIT_S, gateway_up

        wait_s = UP_WAIT_S if timeout_s is None else timeout_s
        return gateway_up(
            docker=self.docker, config_file=config_file, environ=self.environ, wait_s=wait_s, clocks=self.ctx.clocks
        )

    def gateway_down(self) -> GatewayContainer | None:
        """Stop the gateway container (requests in flight drain first) and remove it; None when there is none."""
        from servectl.gateway.container import gateway_down

        return gateway_down(docker=self.docker, environ=self.environ)

    def gateway_status(self) -> GatewayStatus:
        """The gateway container (if any) and what the gateway running on this host says of itself."""
        from servectl.gateway.config import default_config_file
        from servectl.gateway.container import gateway_live, gateway_status

        container = gateway_status(docker=self.docker, environ=self.environ)
        live = container.live if container is not None else gateway_live(state_dir=self.state_dir)
        config_file = default_config_file(self.environ)
        return GatewayStatus(
            container=container, live=live, config_file=config_file, config_file_present=config_file.is_file()
        )

    def init_gateway_file(self, *, config_file: Path | None = None, overwrite: bool = False) -> Path:
        """Write the shipped example gateway file (aliases ``chat`` and ``default``, every key with its default)
        to ``config_file`` (default: the one place servectl reads it, ``gateway.yaml`` beside the user's profile
        folder); its path.

        Raises:
            UsageError: the file exists (``overwrite`` replaces it).
        """
        from servectl.gateway.config import default_config_file, write_example_config

        return write_example_config(config_file or default_config_file(self.environ), overwrite=overwrite)

    def gateway_logs(self, *, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """The gateway container's log lines (one per request: alias, key name, status, times; never a key).

        Raises:
            ServectlError: no gateway container.
        """
        from servectl.gateway.container import gateway_logs

        return gateway_logs(docker=self.docker, follow=follow, tail=tail, environ=self.environ)

    def check_gateway_file(self, *, config_file: Path | None = None) -> GatewayFileCheck | None:
        """Check the gateway file (default: ``gateway.yaml`` beside the profiles); None when there is none."""
        from servectl.errors import ProfileError
        from servectl.gateway.config import default_config_file

        path = config_file or default_config_file(self.environ)
        if not path.exists():
            return None
        try:
            self._gateway_config(path)
        except ProfileError as err:
            return GatewayFileCheck(path=path, problems=err.lines())
        return GatewayFileCheck(path=path, problems=[])

    # -- keys ----------------------------------------------------------------------------------------------
    def create_gateway_key(
        self,
        *,
        key_name: str,
        aliases: Sequence[str] = (),
        read_only: bool = False,
        budget: str | None = None,
        expires: str | None = None,
        rate_per_minute: int | None = None,
        config_file: Path | None = None,
    ) -> CreatedKey:
        """Make a gateway key and store its digest under ``key_name`` in the gateway file's key file.

        Args:
            key_name: shown in the gateway's log and ``/metrics`` (never the key).
            aliases: grant only these aliases (default: all).
            read_only: GET routes only (``/v1/models``, ``/ui``): no completions.
            budget: requests per UTC period: ``N/hour``, ``N/day``, ``N/week`` or ``N/month``.
            expires: lifetime such as ``12h``, ``30d``, ``8w`` (default: never).
            rate_per_minute: requests per minute (default: the file's).

        Raises:
            UsageError: a bad name, budget or lifetime; an alias the file does not name; the name is taken.
        """
        from servectl.gateway.keys import create_key, parse_budget, parse_duration

        loaded = self._gateway_config(config_file)
        path = loaded.keys_path(self.environ)
        known, aliases_from, alias_fix = self._gateway_aliases(loaded, config_file)
        key, entry = create_key(
            path,
            name=key_name,
            aliases=list(aliases),
            expires_s=parse_duration(expires) if expires else None,
            rate_per_minute=rate_per_minute,
            read_only=read_only,
            budget=parse_budget(budget) if budget else None,
            known_aliases=known,
            aliases_from=aliases_from,
            alias_fix=alias_fix,
            clock=self.ctx.clocks.wall,
        )
        return CreatedKey(key=key, entry=entry, keys_file=path)

    def _gateway_aliases(self, loaded: GatewayConfig, config_file: Path | None) -> tuple[list[str], str, str]:
        """The aliases a gateway of this file serves (with no ``aliases:``, each profile on the host's search
        path and ``default``), whose they are and how to add one, for a refusal."""
        from servectl.gateway.config import default_config_file
        from servectl.gateway.serve import alias_table, profile_names

        known = alias_table(loaded, lambda: profile_names(self.ctx.profile_folders)).names
        if loaded.aliases is not None:
            return known, "the gateway file's aliases", ""
        path = config_file or default_config_file(self.environ)
        state = "names no aliases" if path.is_file() else "does not exist"
        return (
            known,
            "the gateway's aliases",
            (
                f"the gateway file {path} {state}, so each profile is an alias of itself: "
                "write `aliases:` there (servectl gateway init writes an example with `chat`)"
            ),
        )

    def gateway_keys(self, *, config_file: Path | None = None) -> list[dict[str, Any]]:
        """Each gateway key's name, scope (aliases, read-only, budget), usage and expiry (never the keys).

        Raises:
            StateDamaged: the key or usage file is damaged.
        """
        from servectl.gateway.keys import read_keys
        from servectl.gateway.usage import usage_rows

        path = self._gateway_config(config_file).keys_path(self.environ)
        return usage_rows(path, read_keys(path), now=self.ctx.clocks.wall())

    def revoke_gateway_key(self, *, key_name: str, config_file: Path | None = None) -> KeyEntry:
        """Remove the key ``key_name``; a running gateway refuses it within a second.

        Raises:
            UsageError: no key of that name.
        """
        from servectl.gateway.keys import revoke_key

        return revoke_key(self._gateway_config(config_file).keys_path(self.environ), name=key_name)

    def gateway_clients(
        self,
        *,
        client: ClientKind | None = None,
        config_file: Path | None = None,
        url: str | None = None,
        key_env: str | None = None,
        key_file: Path | None = None,
        alias: str | None = None,
        write_to: Path | None = None,
        overwrite: bool = False,
    ) -> GatewayClients:
        """The configuration of ``client`` against the gateway of ``config_file``: its base URL (``url``, else the
        file's ``listen``, a wildcard address as 127.0.0.1), each alias's context window and capabilities from its
        profiles, the key from the variable ``key_env`` or the file ``key_file`` (default: the variable
        :data:`~servectl.gateway.clients.DEFAULT_KEY_ENV`; no key is read or shown); written to ``write_to``
        (mode 0600) when given.

        Raises:
            ProfileError: the gateway file is invalid. UsageError: an unknown client, both key sources, an unknown
            alias, a key source the client cannot read, or ``write_to`` exists (``overwrite`` replaces it).
        """
        from servectl.errors import UsageError
        from servectl.files import FileRefused, write_atomic
        from servectl.gateway.clients import (
            CLIENTS,
            DEFAULT_KEY_ENV,
            KeySource,
            KeySourceUnsupported,
            client_setup,
        )
        from servectl.gateway.serve import alias_table, profile_names

        if client is not None and client not in CLIENTS:
            raise UsageError(f"no client {client!r}; clients: {', '.join(CLIENTS)}")
        if key_env and key_file:
            raise UsageError("the key comes from a variable or a file: give --key-env or --key-file, not both")
        loaded = self._gateway_config(config_file)
        on_path = functools.cache(lambda: profile_names(self.ctx.profile_folders))  # the folders read once
        table = alias_table(loaded, on_path)
        aliases = self._alias_infos(table, on_path)
        base_url = _client_base_url(url, loaded.host, loaded.port)
        if client is None:
            return GatewayClients(base_url=base_url, aliases=aliases, clients=CLIENTS)
        key = KeySource(file=key_file) if key_file else KeySource(env=key_env or DEFAULT_KEY_ENV)
        if alias is not None and alias not in table:
            raise UsageError(f"no alias {alias!r} in the gateway; aliases: {', '.join(table.names)}")
        try:
            setup = client_setup(client, base_url=base_url, aliases=aliases, key=key, alias=alias)
        except KeySourceUnsupported as err:
            raise UsageError(str(err)) from None
        except LookupError as err:
            raise UsageError(f"{client}: {err}") from None
        if write_to is not None:
            if write_to.exists() and not overwrite:
                raise UsageError(f"{write_to} exists; --force replaces it")
            try:
                write_atomic(write_to, setup.text.encode("utf-8"), mode=0o600)
            except (FileRefused, OSError) as err:
                raise UsageError(f"cannot write {write_to}: {err}") from None
        return GatewayClients(base_url=base_url, aliases=aliases, setup=setup, written=write_to, clients=CLIENTS)

    def _alias_infos(self, table: AliasTable, on_path: Callable[[], Sequence[str]]) -> list[AliasInfo]:
        """Each alias's window and capabilities from its profiles' cards. ``*`` (``default`` with no aliases: any
        running service) may be any chat profile on the search path: its window is the smallest of theirs, so a
        client told it never asks for more than the one serving holds."""
        from servectl.errors import ServectlError
        from servectl.gateway.cards import profile_card
        from servectl.gateway.clients import alias_info
        from servectl.gateway.config import ANY_PROFILE
        from servectl.profile.validate import load_profile

        everyone = any(ANY_PROFILE in table.profiles(a) for a in table.names)
        named = {p for a in table.names for p in table.profiles(a) if p != ANY_PROFILE}
        windows: dict[str, int | None] = {}
        capabilities: dict[str, list[str]] = {}
        for profile in named | (set(on_path()) if everyone else set()):
            try:
                card = profile_card(load_profile(profile, folders=self.ctx.profile_folders).profile)
            except ServectlError:
                continue  # no card: its window is unknown (said per alias)
            windows[profile], capabilities[profile] = card.context_window, card.capabilities
        chat = sorted(p for p, caps in capabilities.items() if "embedding" not in caps)
        return [
            replace(
                alias_info(a, _expand(table.profiles(a), chat), windows, capabilities),
                profiles=tuple(table.profiles(a)),
            )
            for a in table.names
        ]

    def _gateway_config(self, config_file: Path | None) -> GatewayConfig:
        from servectl.gateway.config import load_gateway_config

        return load_gateway_config(config_file, environ=self.environ)


def _expand(profiles: Sequence[str], chat: Sequence[str]) -> list[str]:
    """An alias's profiles with ``*`` standing for every chat profile on the search path."""
    from servectl.gateway.config import ANY_PROFILE

    return [q for p in profiles for q in (chat if p == ANY_PROFILE else (p,))]


def _client_base_url(url: str | None, host: str, port: int) -> str:
    """The URL clients use: ``url`` (a trailing ``/`` or ``/v1`` dropped), else ``http://HOST:PORT`` of the
    gateway's ``listen`` (a wildcard address is this host's loopback)."""
    if url:
        url = url.rstrip("/")
        return url.removesuffix("/v1")
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
