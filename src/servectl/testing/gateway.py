"""A gateway in a background thread of the test process, routing to upstreams the test gives it.

::

    with GatewayThread(GatewayConfig(listen="127.0.0.1:18080"), upstreams=lambda: [...], state_dir=tmp) as gw:
        httpx.get(gw.base_url + "/healthz")
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from types import TracebackType

from servectl.adapters.gpu import NullGpuInventory
from servectl.adapters.state import History
from servectl.gateway.cards import ProfileCard
from servectl.gateway.config import GatewayConfig
from servectl.gateway.dashboard import DashboardSources
from servectl.gateway.reload import ConfigWatcher
from servectl.gateway.routes import AliasTable, Upstream
from servectl.service.clocks import Clocks


class GatewayThread:
    """Runs :func:`servectl.gateway.serve.serve_gateway` on its own event loop; leaving the block stops it."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        upstreams: Callable[[], Sequence[Upstream]],
        state_dir: Path,
        aliases: dict[str, list[str]] | None = None,
        startup_s: Callable[[str], float | None] = lambda _p: None,
        start: Callable[[str], object] | None = None,
        watch: ConfigWatcher | None = None,
        dashboard: DashboardSources | None = None,
        replaced_by: Callable[[str], Collection[str]] | None = None,
        engine_paths: Callable[[str], frozenset[str]] | None = None,
        cards: Callable[[str], ProfileCard | None] | None = None,
        clocks: Clocks | None = None,
    ) -> None:
        self.config = config
        self.clocks = clocks or Clocks()
        self.replaced_by = replaced_by
        self.dashboard = dashboard or DashboardSources(  # the state folder's history, no cards
            history=History(Path(state_dir), clock=time.time, warn=lambda _line: None).readable_events,
            gpus=NullGpuInventory("a test's gateway thread reads no GPUs").snapshot,
        )
        self.engine_paths = engine_paths
        self.cards = cards
        self.table = AliasTable(aliases if aliases is not None else (config.aliases or {}))
        self.upstreams = upstreams
        self.state_dir = Path(state_dir)
        self.startup_s = startup_s
        self.start = start
        self.watch = watch
        self.keys_path = None if config.auth == "none" else config.keys_path({"SERVECTL_HOME": str(state_dir)})
        self.admin_path = self.state_dir / "gateway" / "admin.sock"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._listening = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="gateway", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.config.listen}"

    def _run(self) -> None:
        from servectl.gateway.serve import serve_gateway

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await serve_gateway(
                self.config,
                table=self.table,
                upstreams=self.upstreams,
                keys_path=self.keys_path,
                admin_path=self.admin_path,
                startup_s=self.startup_s,
                on_listening=lambda _url: self._listening.set(),
                stop=self._stop,
                start=self.start,
                watch=self.watch,
                dashboard=self.dashboard,
                clocks=self.clocks,
                replaced_by=self.replaced_by,
                engine_paths=self.engine_paths,
                cards=self.cards,
            )

        try:
            asyncio.run(main())
        except BaseException as err:
            self._error = err
        finally:
            self._listening.set()

    def __enter__(self) -> GatewayThread:
        self._thread.start()
        self._listening.wait(10)
        if self._error is not None:
            raise self._error
        return self

    def request_stop(self) -> None:
        """Tell the gateway to stop (as SIGTERM does) without waiting for it: it drains meanwhile."""
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)

    def stop(self) -> None:
        self.request_stop()
        self._thread.join(30)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
