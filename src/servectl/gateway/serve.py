"""Running a gateway: discover the servectl services, listen, answer the admin channel, drain on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import sys
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from servectl.errors import ServectlError
from servectl.gateway.config import DEFAULT_ALIAS, Endpoint, GatewayConfig, default_aliases
from servectl.gateway.routes import AliasTable, Upstream
from servectl.profile.api_routes import DEFAULT_ROUTES

if TYPE_CHECKING:
    from servectl.gateway.cards import ProfileCard
    from servectl.gateway.dashboard import DashboardSources
    from servectl.gateway.proxy import Gateway
    from servectl.gateway.reload import ConfigWatcher
    from servectl.profile.loader import ProfileFolder, ProfileSearch
    from servectl.service.clocks import Clocks
    from servectl.service.context import Context

log = logging.getLogger("servectl.gateway")


def alias_table(config: GatewayConfig, profiles: Callable[[], Sequence[str]]) -> AliasTable:
    """The file's aliases, or (no ``aliases:``) each profile as an alias of itself plus ``default``
    (the profiles of ``endpoints:`` when the file has them)."""
    if config.aliases is not None:
        return AliasTable(config.aliases)
    names = list(config.endpoints) if config.endpoints is not None else list(profiles())
    if DEFAULT_ALIAS in names:  # its own name wins, as for every profile; the built-in default is not served
        log.warning(
            "profile %s takes the alias %s: the built-in %s alias (any running service) is not served; rename "
            "the profile, or write aliases: in the gateway file",
            DEFAULT_ALIAS,
            DEFAULT_ALIAS,
            DEFAULT_ALIAS,
        )
    return AliasTable(default_aliases(names))


def service_upstreams(ctx: Context) -> Callable[[], list[Upstream]]:
    """A function listing the servectl services as upstreams (ready = passed its gate and answers /health),
    through the context's runtime; each engine key is read from the profile resolved in its environment."""
    keys: dict[tuple[str, str], str | None] = {}

    def engine_key(profile: str, plan_hash: str) -> str | None:
        if (profile, plan_hash) not in keys:
            from servectl.service.host_files import read_api_key

            try:
                keys[(profile, plan_hash)] = read_api_key(ctx.resolve(profile).plan, ctx.environ)
            except ServectlError:
                keys[(profile, plan_hash)] = None
        return keys[(profile, plan_hash)]

    def listing() -> list[Upstream]:
        return [
            Upstream(
                profile=s.profile,
                url=s.url,
                served_name=s.served_name,
                ready=s.state == "ready" and s.port is not None,
                api_key=engine_key(s.profile, s.plan_hash),
            )
            for s in ctx.runtime.services()
            if s.running
        ]

    return listing


def fixed_upstreams(endpoints: Mapping[str, Endpoint]) -> Callable[[], list[Upstream]]:
    """The ``endpoints:`` of the file as upstreams, always ready (a rendered compose / Kubernetes gateway: the
    orchestrator starts the engines; a request to one that does not answer gets 502). An engine key file is
    read at each listing, so a rotated key is picked up."""
    from servectl.files import read_text_bounded

    def key(endpoint: Endpoint) -> str | None:
        if endpoint.api_key_file is None:
            return None
        text = read_text_bounded(Path(endpoint.api_key_file), limit_bytes=64 * 1024, what="engine API key file")
        return text.strip() or None

    def listing() -> list[Upstream]:
        return [
            Upstream(profile=name, url=e.url, served_name=e.served_model_name, ready=True, api_key=key(e))
            for name, e in sorted(endpoints.items())
        ]

    return listing


def profile_cards(folders: Callable[[], ProfileSearch], *, ttl_s: float = 5.0) -> Callable[[str], ProfileCard | None]:
    """A profile name -> its :class:`~servectl.gateway.cards.ProfileCard` read off ``folders`` (None when it does
    not load; its route table looked up in the search's catalog folder), each kept ``ttl_s`` seconds so an edited
    profile shows within that."""
    import time

    from servectl.errors import ServectlError
    from servectl.gateway.cards import profile_card
    from servectl.profile.catalog_store import extracted_routes
    from servectl.profile.validate import load_profile

    seen: dict[str, tuple[float, ProfileCard | None]] = {}

    def card(name: str) -> ProfileCard | None:
        now = time.monotonic()
        if name not in seen or now - seen[name][0] > ttl_s:
            try:
                search = folders()
                profile = load_profile(name, folders=search).profile
                routes = extracted_routes(profile.engine.catalog, image_ref=profile.image.ref,
                                          image_digest=profile.image.digest, directory=search.catalogs)  # fmt: skip
                seen[name] = (now, profile_card(profile, routes_file=routes))
            except ServectlError:
                seen[name] = (now, None)
        return seen[name][1]

    return card


def route_paths_of(cards: Callable[[str], ProfileCard | None]) -> Callable[[str], frozenset[str]]:
    """A profile -> the POST paths its engine serves: the route table extracted from its image with its flag
    catalog (``catalog extract``), else the route catalog shipped under its flag catalog's name, else the
    default one."""
    from servectl.files import FileRefused
    from servectl.gateway.families import engine_paths, file_paths

    def paths(profile: str) -> frozenset[str]:
        card = cards(profile)
        if card is not None and card.routes_file is not None:
            try:
                return file_paths(card.routes_file)
            except (OSError, ValueError, FileRefused):
                pass  # damaged since it was found: the shipped table
        try:
            return engine_paths(card.catalog if card is not None else DEFAULT_ROUTES)
        except KeyError:
            return engine_paths()

    return paths


def profile_names(folders: Sequence[ProfileFolder]) -> list[str]:
    """The runnable profiles on ``folders`` (the host's search path; no templates, no ``_`` bases)."""
    from servectl.profile.loader import discover, is_template_file

    return [name for name, file in discover(folders).items() if not file.is_base and not is_template_file(file.path)]


def run_gateway(
    config: GatewayConfig,
    *,
    table: AliasTable,
    upstreams: Callable[[], Sequence[Upstream]],
    keys_path: Path | None,
    admin_path: Path,
    startup_s: Callable[[str], float | None] = lambda _p: None,
    on_listening: Callable[[str], None] | None = None,
    start: Callable[[str], object] | None = None,
    watch: ConfigWatcher | None = None,
    dashboard: DashboardSources,
    clocks: Clocks,
    replaced_by: Callable[[str], Collection[str]] | None = None,
    cards: Callable[[str], ProfileCard | None] | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT, then drain (up to ``swap.drain_s``) and return; with ``watch``, edits
    of the gateway file and the profile folders are served within a second.

    Raises:
        ServectlError: the listen address is taken or not this host's, or another gateway runs.
    """
    asyncio.run(
        serve_gateway(
            config,
            table=table,
            upstreams=upstreams,
            keys_path=keys_path,
            admin_path=admin_path,
            startup_s=startup_s,
            on_listening=on_listening,
            start=start,
            watch=watch,
            dashboard=dashboard,
            clocks=clocks,
            replaced_by=replaced_by,
            cards=cards,
            engine_paths=None if cards is None else route_paths_of(cards),
        )
    )


async def serve_gateway(
    config: GatewayConfig,
    *,
    table: AliasTable,
    upstreams: Callable[[], Sequence[Upstream]],
    keys_path: Path | None,
    admin_path: Path,
    startup_s: Callable[[str], float | None] = lambda _p: None,
    on_listening: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    start: Callable[[str], object] | None = None,
    watch: ConfigWatcher | None = None,
    dashboard: DashboardSources,
    clocks: Clocks,
    replaced_by: Callable[[str], Collection[str]] | None = None,
    engine_paths: Callable[[str], frozenset[str]] | None = None,
    cards: Callable[[str], ProfileCard | None] | None = None,
) -> None:
    """:func:`run_gateway` on the running event loop; set ``stop`` to end it (SIGTERM/SIGINT set it too when
    this runs in the main thread). ``dashboard``: what ``/ui`` reads besides the gateway (the
    context's history and cards: :meth:`DashboardSources.of_context`)."""
    from aiohttp import web

    from servectl.gateway.admin import serve_admin
    from servectl.gateway.dashboard import Dashboard
    from servectl.gateway.keys import KeyRing
    from servectl.gateway.proxy import Gateway

    keys = KeyRing(keys_path, clock=clocks.wall) if keys_path is not None else None
    gateway = Gateway(config, table=table, keys=keys, upstreams=upstreams, startup_s=startup_s, start=start,
                      engine_paths=engine_paths, cards=cards, clocks=clocks)  # fmt: skip
    gateway.replaced_by = replaced_by
    gateway.watcher = watch
    app = gateway.app()
    Dashboard(gateway, dashboard, clock=clocks.monotonic).add_routes(app)
    runner = web.AppRunner(
        app,
        handle_signals=False,
        access_log=None,
        keepalive_timeout=config.limits.header_timeout_s,  # also the header timeout: see proxy's docstring
        handler_cancellation=True,  # a client that leaves cancels the upstream request at once
        shutdown_timeout=config.swap.drain_s,
        max_line_size=16384,
        max_field_size=16384,
    )
    await runner.setup()
    stop = stop or asyncio.Event()
    if threading.current_thread() is threading.main_thread():
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    try:
        admin = await serve_admin(gateway, admin_path)
        try:
            site = web.TCPSite(runner, config.host, config.port, backlog=1024, reuse_address=True)
            try:
                await site.start()
            except OSError as err:
                why = "is in use" if err.errno == errno.EADDRINUSE else f"cannot be used ({err.strerror})"
                raise ServectlError(
                    f"gateway listen {config.listen} {why}; free it or set listen: in the gateway file"
                ) from None
            log.info("listening on http://%s (aliases: %s)", config.listen, ", ".join(table.names))
            if on_listening is not None:
                on_listening(f"http://{config.listen}")
            watching = asyncio.create_task(_watch(gateway, watch)) if watch is not None else None
            await stop.wait()
            if watching is not None:
                watching.cancel()
            log.info("stopping: draining requests in flight (up to %g s)", config.swap.drain_s)
            # still listening while the requests in flight finish, so a new one reads 503 draining (a client
            # or balancer retries elsewhere) instead of a refused connection; then the listener closes
            gateway.draining = True
            await gateway.admission.wait_idle(config.swap.drain_s)
        finally:
            admin.close()
            with contextlib.suppress(FileNotFoundError):
                admin_path.unlink()
    finally:
        await runner.cleanup()


async def _watch(gateway: Gateway, watch: ConfigWatcher) -> None:
    while True:
        await asyncio.sleep(1.0)
        try:
            reloaded = await asyncio.to_thread(watch.check)
        except Exception as err:  # a watcher bug must not stop the serving; say it once a second
            log.warning("cannot check the configuration: %s", err)
            continue
        if reloaded is not None:
            gateway.reconfigure(reloaded.config, reloaded.table)


def configure_logging(stream: TextIO = sys.stderr) -> None:
    """One line per request on stderr (alias, key name, status, times; never keys, prompts or answers)."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s gateway %(levelname)s %(message)s"))
    logger = logging.getLogger("servectl.gateway")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False


def run_from_file(
    ctx: Context,
    *,
    config_file: Path | None = None,
    listen: str | None = None,
    on_listening: Callable[[str], None] | None = None,
    start: Callable[[str], object] | None = None,
) -> None:
    """Load the gateway file (default: ``gateway.yaml`` beside the profiles) and run it on this host, through
    the context's environment, profile search path, state folder and runtime.

    Raises:
        ProfileError: the file is invalid. ServectlError: see :func:`run_gateway`.
    """
    from servectl.adapters.gateway_admin import admin_socket_path, way_back_s
    from servectl.gateway.config import default_config_file, load_gateway_config
    from servectl.gateway.dashboard import DashboardSources, docker_log_tail
    from servectl.gateway.reload import ConfigWatcher

    environ = ctx.environ

    def names() -> list[str]:  # the profiles on this environment's search path, as the watcher's folders
        return profile_names(ctx.profile_folders)

    def load() -> GatewayConfig:
        loaded = load_gateway_config(config_file, environ=environ)
        if listen is not None:
            loaded = GatewayConfig.model_validate({**loaded.model_dump(), "listen": listen})
        return loaded

    def replaced_by(target: str) -> set[str]:  # the services a swap to target stops, as servectl swap decides
        from servectl.service.swap_preflight import overlaps

        resolved = ctx.resolve(target)
        running = [s for s in ctx.runtime.services() if s.running and s.profile != target]
        return {s.profile for s in running if overlaps(s, resolved)}

    config = load()
    state = ctx.state_dir
    watch = ConfigWatcher(
        config_file=config_file or default_config_file(environ),
        running=config,
        load=load,
        table_of=lambda c: alias_table(c, names),
        folders=lambda: [f.path for f in ctx.profile_folders],
        clock=ctx.clocks.wall,
    )
    run_gateway(
        config,
        watch=watch,
        table=alias_table(config, names),
        upstreams=fixed_upstreams(config.endpoints) if config.endpoints is not None else service_upstreams(ctx),
        keys_path=None if config.auth == "none" else config.keys_path(environ),
        admin_path=admin_socket_path(state),
        startup_s=lambda profile: way_back_s(state, ctx.history, profile),  # a standby's last resume, else start
        on_listening=on_listening,
        start=start,
        replaced_by=replaced_by if start is not None else None,
        clocks=ctx.clocks,
        dashboard=DashboardSources.of_context(
            ctx, logs=None if config.endpoints is not None else docker_log_tail(ctx.docker)
        ),
        cards=profile_cards(lambda: ctx.profile_folders),
    )
