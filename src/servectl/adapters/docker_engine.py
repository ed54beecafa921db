"""The Docker engine behind a small interface: create, inspect, follow logs, stop, remove.

:class:`DockerEngine` is what the runtime and the health gate take; it speaks in plain values
(:class:`ContainerState`, log lines as ``str``) and never leaks SDK objects. :class:`DockerSdkEngine` is the
real one (the Docker SDK is imported lazily, so ``servectl --help`` and ``up --dry-run`` never load it);
``servectl.testing.docker.FakeDockerEngine`` is the fake for unit tests.

Two pure functions carry the translation, so unit tests pin them without an engine:
:func:`run_kwargs` turns a :class:`~servectl.plan.compile.DockerRunSpec` into the keyword arguments of the SDK's
``containers.create`` (the same container as :func:`servectl.plan.compile.docker_run_argv`), and
:func:`container_state_from_inspect` turns ``docker inspect`` output into a :class:`ContainerState`.
"""

from __future__ import annotations

import codecs
import contextlib
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from servectl.errors import EngineUnavailable, PreflightFailed, ServectlError, ServiceConflict, StartupFailed
from servectl.plan.labels import LABEL_MANAGED

if TYPE_CHECKING:
    from servectl.plan.compile import DockerRunSpec, PortBinding

__all__ = [
    "ContainerState",
    "DockerEngine",
    "DockerSdkEngine",
    "LogLines",
    "container_state_from_inspect",
    "run_kwargs",
    "split_log_chunks",
]


@dataclass(frozen=True)
class ContainerState:
    """One container as ``docker inspect`` describes it, in plain values.

    Attributes:
        status: Docker's state: "created", "running", "restarting", "paused", "exited", "removing", "dead".
        exit_code: the main process's exit code once it exited (None while it never ran or still runs).
        started_at: when it last started (epoch seconds), None if it never started.
        finished_at: when it last exited (epoch seconds), None if it has not.
        ports: published ports (host address, host port, container port).
        device_ids: GPUs asked for by device requests (``--gpus device=...``); ("all",) for ``--gpus all``.
        pid: host pid of the container's main process while it runs.
        mounts: (host source, container destination) of each mount.
    """

    id: str
    name: str
    image: str
    labels: Mapping[str, str]
    status: str
    exit_code: int | None = None
    oom_killed: bool = False
    started_at: float | None = None
    finished_at: float | None = None
    ports: tuple[PortBinding, ...] = ()
    device_ids: tuple[str, ...] = ()
    pid: int | None = None
    mounts: tuple[tuple[str, str], ...] = ()
    created_at: float | None = None
    network_mode: str = ""

    @property
    def managed(self) -> bool:
        """Whether servectl started this container (it carries ``servectl.managed=1``)."""
        return self.labels.get(LABEL_MANAGED) == "1"

    @property
    def running(self) -> bool:
        return self.status in ("running", "restarting", "paused")

    @property
    def short_id(self) -> str:
        return self.id[:12]


class LogLines(Iterator[str], Protocol):
    """Log lines of a container, oldest first; ``close()`` ends a followed stream from another thread."""

    def close(self) -> None: ...


class DockerEngine(Protocol):
    """What servectl needs from a container engine. Every method returns plain values."""

    def ping(self) -> None:
        """Raise :class:`EngineUnavailable` (with the fix) when the engine does not answer."""

    def image_present(self, ref: str) -> bool:
        """Whether the image (``repo:tag`` or ``repo@sha256:...``) is on this host."""

    def create_and_start(self, spec: DockerRunSpec, *, environ: Mapping[str, str] | None = None) -> str:
        """Create and start the container of ``spec``; return its id.

        ``environ`` supplies the pass-through variables (``environment`` values of None); default
        ``os.environ``. If the engine creates the container but cannot start it, the container is removed
        before the error is raised.
        """

    def list_managed(self, label_filter: Mapping[str, str] | None = None) -> list[ContainerState]:
        """Every container servectl started (running or not), optionally narrowed by more labels."""

    def running_containers(self) -> list[ContainerState]:
        """Every running container, servectl's or not (for conflict reports)."""

    def containers_named(self, name: str) -> list[ContainerState]:
        """The container with exactly this name, if any (a list, empty when there is none)."""

    def inspect(self, id_or_name: str) -> ContainerState | None:
        """The container's state, or None when there is no such container."""

    def container_document(self, id_or_name: str) -> dict[str, Any] | None:
        """``docker inspect`` of the container as the engine returns it (plain data), or None."""

    def image_document(self, ref: str) -> dict[str, Any] | None:
        """``docker image inspect`` of the image as the engine returns it (plain data), or None."""

    def logs(self, container_id: str, *, follow: bool, tail: int | None = None, since: float | None = None) -> LogLines:
        """Log lines (stdout and stderr), split on newlines and carriage returns.

        With ``follow`` the stream ends when the container stops (or on ``close()``).
        """

    def stop(self, container_id: str, *, timeout_s: int) -> None:
        """Send the stop signal (SIGTERM), wait up to ``timeout_s``, then SIGKILL."""

    def kill(self, container_id: str) -> None:
        """SIGKILL now."""

    def remove(self, container_id: str, *, force: bool) -> None:
        """Remove the container (``force`` kills it first); a container already gone is not an error."""

    def start(self, container_id: str) -> None:
        """Start a stopped container again (used for conflict containers that swap restores)."""


# -- pure translation -----------------------------------------------------------------------------------
def run_kwargs(spec: DockerRunSpec, *, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The SDK's ``containers.create``/``containers.run`` keyword arguments for ``spec``. Pure.

    Plus ``stop_timeout``, which only the low-level ``create_container`` takes (the adapter passes it there).

    The result makes the same container as ``docker run`` with :func:`servectl.plan.compile.docker_run_argv`:
    ``-e NAME`` without a value passes ``NAME`` through from ``environ`` when it is set there and is
    dropped otherwise, exactly as the Docker CLI does.
    """
    env = os.environ if environ is None else environ
    environment: list[str] = []
    for name, value in spec.environment:
        if value is not None:
            environment.append(f"{name}={value}")
        elif name in env:
            environment.append(f"{name}={env[name]}")
    kwargs: dict[str, Any] = {
        "image": spec.image,
        "command": list(spec.command),
        "name": spec.name,
        "labels": dict(spec.labels),
        "environment": environment,
        "ulimits": [{"name": name, "soft": soft, "hard": hard} for name, soft, hard in spec.ulimits],
        "volumes": [f"{m.source}:{m.target}" + (":ro" if m.read_only else "") for m in spec.mounts],
        "stop_timeout": spec.stop_timeout_s,
        "init": spec.init,
    }
    if spec.network_mode != "bridge":  # as `docker run` without --network: the engine's default (bridge)
        kwargs["network_mode"] = spec.network_mode
    if spec.device_ids:
        kwargs["device_requests"] = [{"device_ids": list(spec.device_ids), "capabilities": [["gpu"]]}]
    if spec.ipc_mode:
        kwargs["ipc_mode"] = spec.ipc_mode
    if spec.shm_size:
        kwargs["shm_size"] = spec.shm_size
    if spec.restart_policy:
        policy, _, retries = spec.restart_policy.partition(":")
        kwargs["restart_policy"] = {"Name": policy, "MaximumRetryCount": int(retries or 0)}
    if spec.ports:
        ports: dict[str, list[tuple[str, int]]] = {}
        for p in spec.ports:
            ports.setdefault(f"{p.container_port}/tcp", []).append((p.host_ip, p.host_port))
        kwargs["ports"] = {key: binds[0] if len(binds) == 1 else binds for key, binds in ports.items()}
    return kwargs


def _epoch(value: object) -> float | None:
    """Docker's RFC 3339 timestamps (nanoseconds, ``Z``) as epoch seconds; its zero time as None."""
    if not isinstance(value, str) or not value or value.startswith("0001-01-01"):
        return None
    text = value.replace("Z", "+00:00")
    if "." in text:  # Python parses at most microseconds
        head, rest = text.split(".", 1)
        digits = "".join(ch for ch in rest if ch.isdigit())
        zone = rest[len(digits) :]
        text = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def container_state_from_inspect(data: Mapping[str, Any]) -> ContainerState:
    """Translate ``docker inspect`` output of one container. Pure."""
    state: Mapping[str, Any] = data.get("State") or {}
    config: Mapping[str, Any] = data.get("Config") or {}
    host: Mapping[str, Any] = data.get("HostConfig") or {}
    network: Mapping[str, Any] = data.get("NetworkSettings") or {}
    status = str(state.get("Status") or "unknown")
    started = _epoch(state.get("StartedAt"))
    finished = _epoch(state.get("FinishedAt"))
    exit_code: int | None = None
    if status in ("exited", "dead") or (finished is not None and status not in ("running", "restarting")):
        raw = state.get("ExitCode")
        exit_code = int(raw) if isinstance(raw, int) else None
    from servectl.plan.compile import PortBinding  # at use: the adapter must not load the compiler to list

    ports: list[PortBinding] = []
    # Running containers report their live bindings; fall back to what was asked for.
    bindings = network.get("Ports") or host.get("PortBindings") or {}
    for key, binds in sorted(bindings.items()):
        container_port = int(str(key).split("/", 1)[0])
        for bind in binds or ():
            host_port = str(bind.get("HostPort") or "")
            if host_port.isdigit():
                ports.append(PortBinding(str(bind.get("HostIp") or "0.0.0.0"), int(host_port), container_port))
    device_ids: list[str] = []
    for request in host.get("DeviceRequests") or ():
        capabilities = request.get("Capabilities") or []
        if not any("gpu" in group for group in capabilities):
            continue
        if request.get("Count") == -1:
            device_ids.append("all")
        device_ids.extend(str(d) for d in request.get("DeviceIDs") or ())
    pid = state.get("Pid")
    mounts = tuple(
        (str(m.get("Source") or m.get("Name") or ""), str(m.get("Destination") or "")) for m in data.get("Mounts") or ()
    )
    return ContainerState(
        id=str(data.get("Id") or ""),
        name=str(data.get("Name") or "").lstrip("/"),
        image=str(config.get("Image") or data.get("Image") or ""),
        labels=dict(config.get("Labels") or {}),
        status=status,
        exit_code=exit_code,
        oom_killed=bool(state.get("OOMKilled")),
        started_at=started,
        finished_at=finished,
        ports=tuple(dict.fromkeys(ports)),
        device_ids=tuple(device_ids),
        pid=int(pid) if isinstance(pid, int) and pid > 0 else None,
        mounts=mounts,
        created_at=_epoch(data.get("Created")),
        network_mode=str(host.get("NetworkMode") or ""),
    )


def split_log_chunks(chunks: Iterator[bytes]) -> Iterator[str]:
    """Whole lines from raw log chunks: split on ``\\n`` and ``\\r`` (progress bars redraw with ``\\r``)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may span two chunks
    pending = ""
    for chunk in chunks:
        pending += decoder.decode(chunk)
        pending = pending.replace("\r\n", "\n")
        *lines, pending = pending.replace("\r", "\n").split("\n")
        for line in lines:
            if line:
                yield line
    pending += decoder.decode(b"", final=True)
    if pending:
        yield pending


# -- the real engine ------------------------------------------------------------------------------------
_UNREACHABLE_FIX = "start it (sudo systemctl start docker, or bash scripts/ensure-docker.sh) or point DOCKER_HOST at it"


def _sdk() -> Any:
    """The Docker SDK module, imported on first use (``docker.errors`` and ``docker.models`` come with it)."""
    import docker  # type: ignore[import-untyped]  # the SDK ships no type hints

    return docker


@contextmanager
def _sdk_errors(action: str) -> Iterator[None]:
    """Wrap SDK and transport errors in servectl's tree, ``from`` the original."""
    docker = _sdk()
    import requests.exceptions

    try:
        yield
    except ServectlError:
        raise
    except docker.errors.NotFound as e:
        raise ServectlError(f"docker: {action}: {_explanation(e)}") from e
    except docker.errors.APIError as e:
        raise ServectlError(f"docker: {action}: {_explanation(e)}") from e
    except (requests.exceptions.ConnectionError, ConnectionError, FileNotFoundError) as e:
        raise EngineUnavailable(_unreachable(e)) from e
    except docker.errors.DockerException as e:
        if "Error while fetching server API version" in str(e):
            raise EngineUnavailable(_unreachable(e)) from e
        raise EngineUnavailable(f"docker: {action}: {e}; {_UNREACHABLE_FIX}") from e


_REASONS = ("No such file or directory", "Connection refused", "Permission denied", "timed out")


def _unreachable(err: Exception) -> str:
    """One line: where the engine was expected, why it did not answer, and the fix."""
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    text = str(err)
    reason = next((r for r in _REASONS if r.lower() in text.lower()), text[:160])
    return f"the Docker engine at {where} does not answer ({reason}); {_UNREACHABLE_FIX}"


def _explanation(err: Any) -> str:
    text = getattr(err, "explanation", None) or str(err)
    return str(text).strip()


class _SdkLogLines:
    """Lines of a (possibly followed) SDK log stream; ``close()`` unblocks a reader in another thread."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._lines = split_log_chunks(iter(stream))

    def __iter__(self) -> _SdkLogLines:
        return self

    def __next__(self) -> str:
        try:
            return next(self._lines)
        except StopIteration:
            self.close()
            raise
        except (OSError, ValueError, AttributeError):
            # The stream was closed under us (close() from another thread): that ends it.
            self.close()
            raise StopIteration from None

    def close(self) -> None:
        """Unblock a reader (shut the socket down), then close the HTTP response so its socket is freed."""
        with contextlib.suppress(Exception):  # its socket may already be gone
            self._stream.close()
        response = getattr(self._stream, "_response", None)  # CancellableStream keeps the requests response
        if response is not None:
            with contextlib.suppress(Exception):
                response.close()


class DockerSdkEngine:
    """:class:`DockerEngine` on the Docker SDK (``docker`` is imported on first use).

    Args:
        client: a ``docker.DockerClient`` to use (tests); default ``docker.from_env()``.
        timeout_s: HTTP timeout of each engine call (stop adds its grace period to it).
    """

    def __init__(self, *, client: Any | None = None, timeout_s: float = 30.0) -> None:
        self._client = client
        self._timeout_s = timeout_s

    @property
    def client(self) -> Any:
        """The SDK client (created on first use)."""
        if self._client is None:
            docker = _sdk()

            with _sdk_errors("connect"):
                self._client = docker.from_env(timeout=int(self._timeout_s))
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def ping(self) -> None:
        with _sdk_errors("ping"):
            self.client.api.ping()

    def image_present(self, ref: str) -> bool:
        docker = _sdk()

        with _sdk_errors(f"inspect image {ref}"):
            try:
                self.client.api.inspect_image(ref)
            except docker.errors.ImageNotFound:
                return False
            except docker.errors.NotFound:
                return False
        return True

    def create(self, spec: DockerRunSpec, *, environ: Mapping[str, str] | None = None) -> str:
        """Create (not start) the container of ``spec``; return its id."""
        docker = _sdk()
        _create_container_args = docker.models.containers._create_container_args

        kwargs = run_kwargs(spec, environ=environ)
        # The high-level create splits kwargs into config and host config but does not know stop_timeout,
        # which the low-level create_container takes.
        stop_timeout = kwargs.pop("stop_timeout")
        with _sdk_errors(f"create container {spec.name}"):
            try:
                create_args = _create_container_args({**kwargs, "version": self.client.api._version})
                created = self.client.api.create_container(**create_args, stop_timeout=stop_timeout)
            except docker.errors.ImageNotFound as e:
                raise PreflightFailed(
                    f"image {spec.image} is not on this host: docker pull {spec.image} (or docker load -i FILE)"
                ) from e
            except docker.errors.APIError as e:
                if e.status_code == 409:
                    raise ServiceConflict(
                        f"a container named {spec.name} already exists: {_explanation(e)}; "
                        f"remove it (docker rm {spec.name}) or set container.name in the profile"
                    ) from e
                raise
        return str(created["Id"])

    def create_and_start(self, spec: DockerRunSpec, *, environ: Mapping[str, str] | None = None) -> str:
        container_id = self.create(spec, environ=environ)
        try:
            with _sdk_errors(f"start container {spec.name}"):
                self.client.api.start(container_id)
        except ServectlError as e:
            self.remove(container_id, force=True)
            raise StartupFailed(f"docker could not start container {spec.name}: {e.message}") from e
        return container_id

    def _inspect_all(self, filters: Mapping[str, Any], *, all_states: bool) -> list[ContainerState]:
        docker = _sdk()

        with _sdk_errors("list containers"):
            rows = self.client.api.containers(all=all_states, filters=dict(filters))
        states: list[ContainerState] = []
        for row in rows:
            try:
                with _sdk_errors("inspect container"):
                    data = self.client.api.inspect_container(row["Id"])
            except ServectlError as e:  # removed between list and inspect
                if isinstance(e.__cause__, docker.errors.NotFound):
                    continue
                raise
            states.append(container_state_from_inspect(data))
        return states

    def list_managed(self, label_filter: Mapping[str, str] | None = None) -> list[ContainerState]:
        labels = [f"{LABEL_MANAGED}=1", *(f"{k}={v}" for k, v in (label_filter or {}).items())]
        return self._inspect_all({"label": labels}, all_states=True)

    def running_containers(self) -> list[ContainerState]:
        return self._inspect_all({}, all_states=False)

    def containers_named(self, name: str) -> list[ContainerState]:
        return self._inspect_all({"name": f"^/{name}$"}, all_states=True)

    def inspect(self, id_or_name: str) -> ContainerState | None:
        docker = _sdk()

        with _sdk_errors(f"inspect container {id_or_name}"):
            try:
                data = self.client.api.inspect_container(id_or_name)
            except docker.errors.NotFound:
                return None
        return container_state_from_inspect(data)

    def logs(self, container_id: str, *, follow: bool, tail: int | None = None, since: float | None = None) -> LogLines:
        with _sdk_errors(f"logs of {container_id[:12]}"):
            stream = self.client.api.logs(
                container_id,
                stream=True,
                follow=follow,
                tail="all" if tail is None else int(tail),
                since=since,
            )
        return _SdkLogLines(stream)

    def stop(self, container_id: str, *, timeout_s: int) -> None:
        docker = _sdk()

        with _sdk_errors(f"stop container {container_id[:12]}"):
            try:
                self.client.api.stop(container_id, timeout=int(timeout_s))
            except docker.errors.NotFound:
                return

    def kill(self, container_id: str) -> None:
        docker = _sdk()

        with _sdk_errors(f"kill container {container_id[:12]}"):
            try:
                self.client.api.kill(container_id)
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as e:
                if e.status_code == 409:  # not running
                    return
                raise

    def remove(self, container_id: str, *, force: bool) -> None:
        docker = _sdk()

        with _sdk_errors(f"remove container {container_id[:12]}"):
            try:
                self.client.api.remove_container(container_id, force=force)
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as e:
                if e.status_code == 409 and "already in progress" in _explanation(e):
                    return
                raise

    def start(self, container_id: str) -> None:
        with _sdk_errors(f"start container {container_id[:12]}"):
            self.client.api.start(container_id)

    # -- raw documents (``servectl adopt`` translates them with servectl.plan.adopt) ------------------------
    def container_document(self, id_or_name: str) -> dict[str, Any] | None:
        """``docker inspect`` of one container as the engine returns it; None when there is none."""
        docker = _sdk()

        with _sdk_errors(f"inspect container {id_or_name}"):
            try:
                return dict(self.client.api.inspect_container(id_or_name))
            except docker.errors.NotFound:
                return None

    def image_document(self, ref: str) -> dict[str, Any] | None:
        """``docker image inspect`` of one image; None when it is not on this host."""
        docker = _sdk()

        with _sdk_errors(f"inspect image {ref}"):
            try:
                return dict(self.client.api.inspect_image(ref))
            except docker.errors.NotFound:
                return None

    def volume_folder(self, name: str) -> str | None:
        """The host folder of a named volume (its Mountpoint); None when there is no such volume."""
        docker = _sdk()

        with _sdk_errors(f"inspect volume {name}"):
            try:
                return str(self.client.api.inspect_volume(name).get("Mountpoint") or "") or None
            except docker.errors.NotFound:
                return None
