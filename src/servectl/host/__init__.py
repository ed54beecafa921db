"""servectl's front door: :class:`Host`, one object that owns this host's adapters and whose methods are the commands.

Modelled on docker-py's ``docker.from_env()`` and httpx's ``Client``: build it from the environment (every
adapter real), or hand it fakes (``servectl.testing.FakeHost``); use it as a context manager so that the
Docker client and NVML it opened are closed::

    import servectl

    with servectl.from_env() as host:
        host.up(name="demo")
        print(host.status().services)
        host.swap(name="demo-rollback")

Adapters are opened on first use, so ``host.compile_plan(...)`` never touches Docker. What the host opened it
closes; adapters passed to the constructor stay the caller's (``close`` leaves them open). The module functions
of :mod:`servectl.api` (``servectl.up(name=...)``) each build a host, call one method and close it; the CLI
calls the same methods, so ``servectl up demo`` and ``Host().up(name="demo")`` are one path.

One name per concept across the methods: ``name`` is a profile, ``force`` a list of preflight check ids to
skip, ``lock_timeout_s`` the wait for another servectl process that is changing services.

The methods are grouped by area, as docker-py's ``APIClient`` composes its mixins: profiles and images
(:mod:`servectl.host.profiles`), services (:mod:`servectl.host.services`), transactions
(:mod:`servectl.host.transactions`), the gateway (:mod:`servectl.host.gateway`), measurements
(:mod:`servectl.host.measure`) and campaigns (:mod:`servectl.host.campaign`), all over the adapters of
:mod:`servectl.host.base`.
"""

from __future__ import annotations

from collections.abc import Mapping

from servectl.host.base import HostBase, ReportHook
from servectl.host.campaign import CampaignCommands
from servectl.host.gateway import CreatedKey, GatewayClients, GatewayCommands, GatewayFileCheck, GatewayStatus
from servectl.host.measure import MeasureCommands
from servectl.host.profiles import CatalogListing, ProfileCommands, ProfileDiff, ShownProfile
from servectl.host.services import ServiceCommands, Status
from servectl.host.transactions import TransactionCommands

__all__ = [
    "CatalogListing",
    "CreatedKey",
    "GatewayClients",
    "GatewayFileCheck",
    "GatewayStatus",
    "Host",
    "HostBase",
    "ProfileDiff",
    "ReportHook",
    "ShownProfile",
    "Status",
    "from_env",
]


class Host(ProfileCommands, ServiceCommands, GatewayCommands, TransactionCommands, MeasureCommands, CampaignCommands):
    """This host as servectl drives it: Docker, the GPUs, the host probe and the state folder.

    Args:
        docker: the Docker engine (:class:`~servectl.adapters.docker.DockerEngine`); default: the Docker SDK
            client of the environment (``DOCKER_HOST``), opened on first use and closed by :meth:`close`.
        gpus: the GPU inventory; default: NVML, opened on first use and closed by :meth:`close`.
        host_probe: listeners, memory, disks, model folders; default: psutil and ``/proc``.
        state_dir: the state folder (lock, history, journal); default ``$SERVECTL_HOME`` or the user state folder.
        http: the HTTP adapter (:class:`~servectl.adapters.http.HttpAdapter`) of the health gate, a standby
            engine's calls and ``status``'s ``/health`` probes; default: an httpx client per gate or call, with
            the TLS verification of its URL, and the probes over a socket (tests pass
            ``servectl.testing.FakeHttp(engine.http_transport())``).
        conflicts: stops and restarts declared conflicts; default: through Docker and the compose CLI.
        environ: the environment for ``${VAR}`` references, API keys and defaults; default ``os.environ``.
        lock_timeout_s: default wait for another servectl changing services (default
            ``$SERVECTL_LOCK_TIMEOUT_S`` or 10 s); each method's ``lock_timeout_s`` overrides it.
        scope: only containers with these labels are servectl's (tests use a session label).

    Adapters given here belong to the caller: :meth:`close` closes only what the host opened itself.
    """


def from_env(*, environ: Mapping[str, str] | None = None, lock_timeout_s: float | None = None) -> Host:
    """A :class:`Host` with this machine's real adapters, configured from the environment (``DOCKER_HOST``,
    ``SERVECTL_HOME``, ``SERVECTL_PROFILES``, ``SERVECTL_LOCK_TIMEOUT_S``); close it, or use it in ``with``."""
    return Host(environ=environ, lock_timeout_s=lock_timeout_s)
