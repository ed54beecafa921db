"""A :class:`servectl.Host` on fakes: drive ``up``, ``swap``, ``status`` and the rest without Docker or GPUs.

::

    from servectl.testing import FakeHost

    with FakeHost(state_dir=tmp_path) as host:
        host.up(name="demo")
        assert [s.profile for s in host.status().services] == ["demo"]
        host.engine.containers  # what the fake Docker engine holds

Every adapter is a fake of :mod:`servectl.testing`: the Docker engine (:class:`FakeDockerEngine`, whose
containers play SGLang's startup lines and answer the health gate and ``status`` through its HTTP transport, the
host's :class:`~servectl.testing.http.FakeHttp`), two idle GPUs
(:class:`FakeGpuInventory`), an idle host probe that finds model folders on disk (:class:`FakeHostProbe`) and
conflicts in memory (:class:`FakeConflicts`). Profiles are found as usual (``SERVECTL_PROFILES``, ./profiles,
the shipped ones); the state folder is the one given.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from servectl.host import Host
from servectl.testing.docker import FakeDockerEngine, sglang_like_script
from servectl.testing.fakes import FakeGpuInventory, FakeHostProbe
from servectl.testing.http import FakeHttp
from servectl.testing.swap import FakeConflicts

if TYPE_CHECKING:
    from servectl.adapters.conflicts import ConflictHandler
    from servectl.adapters.gpu import GpuInventory
    from servectl.adapters.host import HostProbe
    from servectl.service.clocks import Clocks

#: The image the shipped stand-in profiles (``demo``, ``demo-rollback``) run.
STANDIN_IMAGE = "servectl-standin:latest"


class FakeHost(Host):
    """A :class:`~servectl.host.Host` whose adapters are fakes; each can be replaced through the constructor.

    Args:
        state_dir: the state folder (a temporary one in tests).
        engine: the fake Docker engine (default: the stand-in image present, SGLang-like startups of 0.1 s,
            stops that do not wait).
        gpus: default two idle RTX PRO 6000 cards.
        host_probe: default an idle host that reads model folders from disk.
        conflicts: default conflicts in memory, none running.
        environ: default ``os.environ``.
        lock_timeout_s: wait for another servectl (default 5 s).

    Attributes:
        engine: the fake Docker engine, to prepare or inspect containers.
        fake_http: the HTTP adapter on the engine's transport (``seen``: every request sent).
    """

    def __init__(
        self,
        *,
        state_dir: Path,
        engine: FakeDockerEngine | None = None,
        gpus: GpuInventory | None = None,
        host_probe: HostProbe | None = None,
        conflicts: ConflictHandler | None = None,
        environ: Mapping[str, str] | None = None,
        lock_timeout_s: float = 5.0,
        clocks: Clocks | None = None,
    ) -> None:
        self.engine = engine or FakeDockerEngine(
            images={STANDIN_IMAGE}, script_for=lambda spec: sglang_like_script(0.1), sleep=lambda s: None
        )
        self.fake_http = FakeHttp(self.engine.http_transport())
        super().__init__(
            docker=self.engine,
            gpus=gpus or FakeGpuInventory.scenario("two_free_sm120"),
            host_probe=host_probe or FakeHostProbe(model_folders_from_disk=True),
            state_dir=state_dir,
            http=self.fake_http,
            conflicts=conflicts or FakeConflicts(),
            environ=environ,
            lock_timeout_s=lock_timeout_s,
            clocks=clocks,
        )

    def close(self) -> None:
        """Close the HTTP adapter of the fake engine's transport."""
        try:
            super().close()
        finally:
            self.fake_http.close()
