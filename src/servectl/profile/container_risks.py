"""Dangerous container settings: what lets the engine's container reach past itself into the host. Pure.

One rule family, used by ``validate`` on every profile (:mod:`servectl.profile.rules`: ``container.risk`` warnings
and ``container.escape`` errors) and by ``adopt --recipe``, which carries such a setting into the profile with
its problem line (:mod:`servectl.plan.adopt.recipe`). A setting a profile cannot carry at all (privileged,
added capabilities, devices, security options, the host's PID or user namespace, another user) is refused by
``adopt --recipe`` in one line, never dropped: :data:`UNCARRIED`.

Errors (the container could take the host over):
    * any mount of the Docker socket (read-only does not help: the API is reached through it), and a writable
      mount of ``/`` or of a system folder (``/etc``, ``/usr``, ``/boot``, ``/root``, ``/var/lib/docker``...).

Warnings (each with its reason, the profile may still need it):
    * ``serve.network: host`` - the engine shares the host's network: every port it opens is on the host's
      interfaces, and it reaches services that listen on the host's loopback only;
    * ``container.ipc: host`` - the host's shared memory and System V IPC are the engine's;
    * a loader variable in ``engine.env`` (``LD_PRELOAD``, ``LD_AUDIT``): it loads code into every process of
      the container before the engine's own.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

#: Mounting one of these (or a path inside one) writable lets the container change the host itself.
SYSTEM_PATHS = (
    "/",
    "/etc",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/boot",
    "/root",
    "/proc",
    "/sys",
    "/dev",
    "/var/lib/docker",
)
#: The Docker engine's API socket, where it usually is.
DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")
#: Variables of the dynamic loader that make every process load given code first.
LOADER_VARIABLES = ("LD_PRELOAD", "LD_AUDIT")
#: Container settings a profile has no field for: ``adopt --recipe`` refuses a recipe that sets one, saying why.
UNCARRIED: dict[str, str] = {
    "privileged": "a privileged container has every capability and every device of the host",
    "cap_add": "added capabilities give the container powers over the host's kernel",
    "devices": "a device of the host (e.g. /dev/mem) is the host's memory or hardware",
    "security_opt": "security options can turn off seccomp, AppArmor or SELinux confinement",
    "pid": "the host's PID namespace lets the container see and signal every process of the host",
    "userns": "the host's user namespace maps the container's root to the host's root",
    "user": "servectl runs the engine as the image's user",
}


@dataclass(frozen=True)
class Risk:
    """One dangerous setting: where it is, why it is dangerous, and whether validate refuses it."""

    path: tuple[str | int, ...]
    message: str
    error: bool


def _clean(path: str) -> str:
    return posixpath.normpath(path) if path.startswith("/") else path


#: A named volume's folder: Docker's, but the volume's own data (``docker volume create``), not the engine's.
_VOLUME_DATA = re.compile(r"^/var/lib/docker/volumes/[^/]+/_data(/|$)")


def _system(path: str) -> str | None:
    """The system folder host path ``path`` is (or is in), if any; ``/`` only as itself."""
    clean = _clean(path)
    if _VOLUME_DATA.match(clean):
        return None
    for folder in SYSTEM_PATHS:
        if clean == folder or (folder != "/" and clean.startswith(folder + "/")):
            return folder
    return None


def container_risks(
    *,
    network: str | None,
    ipc: str | None,
    mounts: Iterable[tuple[str, str, bool]],
    env: Mapping[str, str],
) -> Iterator[Risk]:
    """The dangerous settings among these, one :class:`Risk` each.

    Args:
        network: ``serve.network``.
        ipc: ``container.ipc``.
        mounts: (host source, container target, read only) of each mount, in order.
        env: the engine's environment.
    """
    if network == "host":
        yield Risk(
            ("serve", "network"),
            "host network: every port the engine opens is on the host's interfaces and it reaches services "
            "listening on the host's loopback; use bridge (servectl publishes serve.port) unless it must be host",
            error=False,
        )
    if ipc == "host":
        yield Risk(
            ("container", "ipc"),
            "host IPC: the host's shared memory and System V IPC are the engine's to read and write; give it its "
            "own with container.shm_size (e.g. 32g) unless it must share the host's",
            error=False,
        )
    for i, (source, target, read_only) in enumerate(mounts):
        at: tuple[str | int, ...] = ("container", "mounts", i)
        clean = _clean(source)  # what the host gives: where it lands in the container does not matter
        if clean in DOCKER_SOCKETS or clean.endswith("/docker.sock"):
            yield Risk(
                at,
                f"{source} is the Docker engine's socket: whoever reaches it controls every container and the "
                "host (read_only does not help); remove the mount",
                error=True,
            )
        elif (system := _system(source)) is not None and not read_only:
            yield Risk(
                at,
                f"a writable mount of {source} (in {system}, the host's system files) at {target}: the container "
                "could change the host; mount only what the engine needs, with read_only: true",
                error=True,
            )
    for name in env:
        if name.upper() in LOADER_VARIABLES:
            yield Risk(
                ("engine", "env", name),
                f"{name} makes every process of the container load that code before the engine's own; drop it "
                "unless you know what it loads and why",
                error=False,
            )


__all__ = ["DOCKER_SOCKETS", "LOADER_VARIABLES", "SYSTEM_PATHS", "UNCARRIED", "Risk", "container_risks"]
