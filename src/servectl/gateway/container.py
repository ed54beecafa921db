"""``servectl gateway up|down|status|logs``: the gateway as a servectl-managed container.

The container (``servectl-gateway``, restart policy ``unless-stopped``) runs ``servectl gateway run`` from
an image built here (:mod:`servectl.gateway.image`) on the host network, so it listens on the host's
address and reaches the engines' published ports. It sees what the host's servectl sees, at the same paths:
the state folder (keys, the admin socket, the history with startup times) read-write, the user's profiles
and the gateway file read-only, and the Docker socket to list the services. Nothing lives only in the
container: killed (even ``-9``) and restarted, it loses no configuration and no key.

It runs as a non-root user: the state folder's owner (so the admin socket, the key file and ``usage.json``
are theirs), or, when root owns the state folder, uid:gid 65532 (the "nonroot" of distroless images). Then
the state folder is shared with group 65532 (:func:`servectl.adapters.state.share_state_folder`: setgid
folders, the group has the owner's rights, and what root's servectl creates there later stays so), so a swap
on request in the container takes the same state lock and writes the same history as the CLI; and
``<state>/gateway`` is handed to uid 65532 (the key and usage files there stay its own: ``keys create`` as
root keeps their owner). The user's profiles stay root's, read-only to the gateway. The Docker socket's group
is added so it can list the services. The engine keys that
profiles name in ``serve.api_key_env`` reach it as those variables, passed through from servectl's
environment to the container's: never written to a file, never printed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl.adapters.state_sharing import SHARED_GID
from servectl.errors import ServectlError, StartupFailed, UsageError

if TYPE_CHECKING:
    from servectl.adapters.docker import ContainerState, DockerEngine
    from servectl.service.clocks import Clocks

CONTAINER_NAME = "servectl-gateway"
LABEL_GATEWAY = "servectl.gateway"
NONROOT_ID = SHARED_GID  # 65532, the "nonroot" of distroless images
CONFIG_IN_CONTAINER = "/etc/servectl/gateway.yaml"  # a rendered compose / Kubernetes gateway's file
CONFIG_DIR_IN_CONTAINER = "/etc/servectl/config"
"""The gateway file's folder, mounted read-only (the folder, not the file: an editor that saves by renaming a
new file over the old one changes the folder's entry, which a bind mount of the file itself would not see)."""
DOCKER_SOCKET = "/var/run/docker.sock"
#: How long ``gateway up`` waits for the started container to answer on its admin socket.
UP_WAIT_S = 60.0


@dataclass(frozen=True)
class GatewayContainer:
    """The gateway container and what the running gateway says of itself (None when it does not answer)."""

    container_id: str
    state: str  # Docker's: running, restarting, exited, ...
    image: str
    listen: str
    started_at: float | None
    live: dict[str, Any] | None  # the admin channel's status document: aliases -> profile and state, holds

    def to_dict(self) -> dict[str, Any]:
        return {
            "container_id": self.container_id,
            "state": self.state,
            "image": self.image,
            "listen": self.listen,
            "started_at": self.started_at,
            "live": self.live,
        }


def container_name(environ: Mapping[str, str]) -> str:
    """``servectl-gateway``, or ``$SERVECTL_GATEWAY_CONTAINER`` (one host, several gateways: tests)."""
    return environ.get("SERVECTL_GATEWAY_CONTAINER") or CONTAINER_NAME


def _find(docker: DockerEngine, environ: Mapping[str, str]) -> ContainerState | None:
    name = container_name(environ)
    found = [c for c in docker.containers_named(name) if c.labels.get(LABEL_GATEWAY) == "1" and c.name == name]
    return found[0] if found else None


def _docker_socket(environ: Mapping[str, str]) -> str:
    host = environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        raise UsageError(f"DOCKER_HOST={host}: the gateway container needs the engine's unix socket; unset it")
    return host.removeprefix("unix://") or DOCKER_SOCKET


def gateway_spec(
    *,
    image: str,
    config_file: Path | None,
    environ: Mapping[str, str],
    scope: Mapping[str, str] | None = None,
) -> Any:
    """The ``DockerRunSpec`` of the gateway container. Reads the file system (what exists), starts nothing."""
    from servectl.gateway.config import default_config_file, load_gateway_config
    from servectl.paths import CATALOG_CACHE_VAR, catalog_cache_dir, state_dir, user_profiles_dir
    from servectl.plan.compile import DockerRunSpec, MountPlan

    config = load_gateway_config(config_file, environ=environ)
    state = state_dir(environ).resolve()
    state.mkdir(parents=True, exist_ok=True)
    mounts = [MountPlan(str(state), str(state), False)]
    profiles = user_profiles_dir(environ)
    if profiles.is_dir() and profiles.resolve() != state / "profiles":
        mounts.append(MountPlan(str(profiles.resolve()), str(state / "profiles"), True))
    environment: list[tuple[str, str | None]] = [
        ("SERVECTL_HOME", str(state)),
        ("DOCKER_HOST", f"unix://{DOCKER_SOCKET}"),
    ]
    extra = [Path(p).resolve() for p in environ.get("SERVECTL_PROFILES", "").split(os.pathsep) if p]
    if extra:  # profile folders named for this servectl: the same, read-only, at the same paths
        mounts += [MountPlan(str(p), str(p), True) for p in extra if p.is_dir()]
        environment.append(("SERVECTL_PROFILES", os.pathsep.join(str(p) for p in extra)))
    cache = catalog_cache_dir(environ).resolve()
    if cache.is_dir() and not cache.is_relative_to(state):  # route tables read from images (catalog extract)
        mounts.append(MountPlan(str(cache), str(cache), True))
        environment.append((CATALOG_CACHE_VAR, str(cache)))
    command = ["gateway", "run"]
    file = config_file or default_config_file(environ)
    if file.exists():
        mounts.append(MountPlan(str(file.resolve().parent), CONFIG_DIR_IN_CONTAINER, True))
        command += ["--config", f"{CONFIG_DIR_IN_CONTAINER}/{file.resolve().name}"]
    if config.keys_file:
        keys_dir = config.keys_path(environ).parent.resolve()
        keys_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        mounts.append(MountPlan(str(keys_dir), str(keys_dir), False))
    for folder in model_dirs(environ):  # the weights where the profiles say, unless a same-path mount has them
        if not any(m.source == m.target and folder.is_relative_to(m.source) for m in mounts):
            mounts.append(MountPlan(str(folder), str(folder), True))
    socket_path = _docker_socket(environ)
    mounts.append(MountPlan(socket_path, DOCKER_SOCKET, False))
    environment += [(name, None) for name in engine_key_vars(environ) if name in environ]  # by reference
    uid, gid = run_as(state, keep=(*(Path(m.source) for m in mounts if m.read_only), state / "profiles"))
    if uid == NONROOT_ID:
        _check_readable([m for m in mounts if m.read_only])
    try:
        socket_group = [str(os.stat(socket_path).st_gid)]
    except OSError:
        socket_group = []
    return DockerRunSpec(
        image=image,
        name=container_name(environ),
        command=tuple(command),
        labels={
            LABEL_GATEWAY: "1",
            "servectl.gateway.listen": config.listen,
            "servectl.gateway.drain_s": str(int(config.swap.drain_s) + 5),
            **(scope or {}),
        },
        environment=tuple(environment),
        device_ids=(),
        ipc_mode=None,
        shm_size=None,
        ulimits=(),
        network_mode="host",
        ports=(),
        mounts=tuple(mounts),
        stop_timeout_s=int(config.swap.drain_s) + 5,
        init=True,
        restart_policy="unless-stopped",
        user=f"{uid}:{gid}",
        group_add=tuple(socket_group),
    )


def run_as(state: Path, *, keep: tuple[Path, ...] = ()) -> tuple[int, int]:
    """The uid and gid the gateway container runs as: the state folder's owner, or 65532 when that is root;
    then (as root) the state folder, less ``keep`` (profiles it only reads), is shared with group 65532 and
    ``<state>/gateway`` handed to it (see the module's docstring).

    Raises:
        UsageError: root owns the state folder and this is not root, so it cannot be shared.
    """
    from servectl.adapters.state_sharing import share_state_folder

    st = state.stat()
    if st.st_uid != 0:
        return st.st_uid, st.st_gid
    if os.geteuid() != 0:
        raise UsageError(f"{state}: root owns the state folder, and the gateway container runs as uid {NONROOT_ID}: "
                         "run servectl gateway up as root (it shares the folder with the gateway), or set "
                         "SERVECTL_HOME to a folder of yours")  # fmt: skip
    folder = state / "gateway"
    folder.mkdir(mode=0o700, exist_ok=True)
    share_state_folder(state, gid=NONROOT_ID, keep=keep)
    for path in [folder, *folder.iterdir()]:
        if not path.is_socket():
            os.chown(path, NONROOT_ID, NONROOT_ID, follow_symlinks=False)
    return NONROOT_ID, NONROOT_ID


def _check_readable(mounts: list[Any]) -> None:
    """A root-owned state runs the gateway as 65532: what it reads (the gateway file's folder, the profile
    folders) must be readable by others, or it could not start; say which and how to fix, before starting.

    Raises:
        UsageError: a folder or file the gateway reads is not readable by others.
    """
    import stat

    for mount in mounts:
        source = Path(mount.source)
        for path in [source, *(source.glob("*.yaml") if source.is_dir() else [])]:
            mode = path.stat().st_mode
            wanted = stat.S_IROTH | (stat.S_IXOTH if path.is_dir() else 0)
            if mode & wanted != wanted:
                fix = "chmod o+rx" if path.is_dir() else "chmod o+r"
                raise UsageError(f"{path}: the gateway container runs as uid {NONROOT_ID} (root owns the state folder) "
                                 f"and cannot read this ({stat.filemode(mode)}); {fix} {path}, or run servectl as "
                                 "a non-root user")  # fmt: skip


def engine_key_vars(environ: Mapping[str, str]) -> list[str]:
    """The variables the profiles on the search path name in ``serve.api_key_env`` (a profile that does not
    load is skipped: it cannot run either)."""
    return sorted({p.serve.api_key_env for p in _profiles(environ) if p.serve.api_key_env})


def model_dirs(environ: Mapping[str, str]) -> list[Path]:
    """The host folders of the profiles on the search path's weights (``model.path``, a draft model's path)
    that exist: a swap on request in the container reads them as a swap here does (preflight's model check,
    staging into the page cache), so they are mounted read-only at the same paths."""
    found: set[Path] = set()
    for profile in _profiles(environ):
        spec = profile.engine.speculative
        draft = spec.draft_model_path if spec is not None else None
        for path in (profile.model.path, draft):
            if path and (folder := Path(path).expanduser()).is_absolute() and folder.is_dir():
                found.add(folder.resolve())
    return sorted(found)


def _profiles(environ: Mapping[str, str]) -> list[Any]:
    """Every profile on the search path that loads (bases and templates left out)."""
    from servectl.errors import ServectlError
    from servectl.profile.loader import discover, is_template_file, read_profile, search_path

    folders = search_path(environ=environ)
    loaded = []
    for name, file in discover(folders).items():
        if file.is_base or is_template_file(file.path):
            continue
        try:
            loaded.append(read_profile(name, folders=folders).profile)
        except ServectlError:
            continue
    return loaded


def gateway_up(
    *,
    docker: DockerEngine,
    environ: Mapping[str, str],
    config_file: Path | None = None,
    scope: Mapping[str, str] | None = None,
    image: str | None = None,
    wait_s: float = UP_WAIT_S,
    clocks: Clocks,
) -> GatewayContainer:
    """Start the gateway container (building its image when needed) and wait until it answers (polled on
    ``clocks``, the context's).

    Replaces a stopped gateway container; a running one stays (``gateway down`` first to change it).

    Raises:
        ProfileError: the gateway file is invalid. StartupFailed: it exited or did not answer in ``wait_s``.
    """
    from servectl.gateway.image import build_gateway_image

    env = dict(environ)
    existing = _find(docker, env)
    if existing is not None and existing.running:
        return gateway_status(docker=docker, environ=env) or _describe(existing, None)
    spec = gateway_spec(image=image or "", config_file=config_file, environ=env, scope=scope)
    if existing is not None:
        docker.remove(existing.id, force=True)
    if not image:
        from dataclasses import replace

        spec = replace(spec, image=build_gateway_image(docker=docker))
    container_id = docker.create_and_start(spec, environ=env)
    return _wait_answering(docker, container_id, env, wait_s, clocks)


def _wait_answering(
    docker: DockerEngine, container_id: str, environ: Mapping[str, str], wait_s: float, clocks: Clocks
) -> GatewayContainer:
    """Wait until the gateway answers on its admin socket; a container that exits or restarts is removed and
    its last log line says why."""
    from servectl.adapters.gateway_admin import gateway_status as ask
    from servectl.paths import state_dir

    deadline = clocks.monotonic() + wait_s
    while True:
        state = docker.inspect(container_id)
        failed = state is None or not state.running or state.status == "restarting"
        if not failed and (live := ask(state_dir(environ))) is not None:
            assert state is not None
            return _describe(state, live)
        if failed or clocks.monotonic() > deadline:
            lines = [ln.strip() for ln in docker.logs(container_id, follow=False, tail=20)] if state else []
            errors = [ln for ln in lines if ln.startswith("error:")] or lines
            docker.remove(container_id, force=True)
            why = errors[-1] if errors else ("no output" if failed else f"no answer within {wait_s:g} s")
            raise StartupFailed(f"the gateway container did not start: {why}")
        clocks.sleep(0.2)


def _describe(state: ContainerState, live: dict[str, Any] | None) -> GatewayContainer:
    return GatewayContainer(
        container_id=state.id,
        state=state.status,
        image=state.image,
        listen=state.labels.get("servectl.gateway.listen", ""),
        started_at=state.started_at,
        live=live,
    )


def gateway_status(*, docker: DockerEngine, environ: Mapping[str, str]) -> GatewayContainer | None:
    """The gateway container and what it says of itself; None when there is no gateway container."""
    from servectl.adapters.gateway_admin import gateway_status as ask
    from servectl.paths import state_dir

    state = _find(docker, environ)
    if state is None:
        return None
    return _describe(state, ask(state_dir(environ)) if state.running else None)


def gateway_live(*, state_dir: Path) -> dict[str, Any] | None:
    """What the gateway running on this host (container or ``gateway run``) says of itself through its admin
    socket in ``state_dir``; None: none runs."""
    from servectl.adapters.gateway_admin import gateway_status as ask

    return ask(state_dir)


def gateway_down(*, docker: DockerEngine, environ: Mapping[str, str]) -> GatewayContainer | None:
    """Stop the gateway (it drains first, up to ``swap.drain_s``) and remove its container; None when none."""
    state = _find(docker, environ)
    if state is None:
        return None
    if state.running:
        docker.stop(state.id, timeout_s=int(state.labels.get("servectl.gateway.drain_s", "35") or 35))
    docker.remove(state.id, force=True)
    return _describe(state, None)


def gateway_logs(
    *, docker: DockerEngine, environ: Mapping[str, str], follow: bool = False, tail: int | None = None
) -> Iterator[str]:
    """The gateway container's log lines (one per request: alias, key name, status, times; never a key).

    Raises:
        ServectlError: no gateway container.
    """
    state = _find(docker, environ)
    if state is None:
        raise ServectlError("no gateway container; start one: servectl gateway up")
    return iter(docker.logs(state.id, follow=follow, tail=tail))
