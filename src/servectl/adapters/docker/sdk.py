"""The real :class:`~servectl.adapters.docker.protocol.DockerEngine`, on the Docker SDK (imported on first use,
so ``servectl --help`` and ``up --dry-run`` never load it), and the one-line messages for its errors.

Reads (list, inspect, info) from a local engine go over its unix socket with the standard library
(:mod:`.engine_socket`), so ``servectl status`` never imports the SDK either; the same documents come back.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar
from urllib.parse import quote

from servectl.adapters.docker.engine_socket import (
    DockerApiError,
    DockerSocket,
    container_path,
    image_path,
    local_socket,
)
from servectl.adapters.docker.translate import (
    container_state_from_inspect,
    create_container_args,
    engine_info_from_info,
    image_info_from_inspect,
    split_log_chunks,
)
from servectl.adapters.docker.values import (
    LABEL_ONESHOT,
    ContainerState,
    EngineInfo,
    ImageInfo,
    LogLines,
    OneShotResult,
)
from servectl.errors import EngineUnavailable, PreflightFailed, ServectlError, ServiceConflict, StartupFailed
from servectl.plan.labels import LABEL_MANAGED
from servectl.signals import critical

if TYPE_CHECKING:
    from servectl.plan.compile import DockerRunSpec

UNREACHABLE_FIX = "start it (sudo systemctl start docker; without systemd: sudo dockerd &) or point DOCKER_HOST at it"
SDK_FIX = "pip install docker"


def unreachable_fix(message: str) -> str:
    """The fix to show beside an :class:`EngineUnavailable` message (doctor, preflight): none when the message
    already ends with it, as every one this adapter raises does."""
    if UNREACHABLE_FIX in message or SDK_FIX in message:
        return ""
    return SDK_FIX if "SDK" in message else UNREACHABLE_FIX


def _sdk() -> Any:
    """The Docker SDK module, imported on first use (``docker.errors`` comes with it)."""
    try:
        import docker  # type: ignore[import-untyped]  # the SDK ships no type hints
    except ImportError as err:
        raise EngineUnavailable(f"Docker SDK for Python is not installed; install it with: {SDK_FIX}") from err
    return docker


@contextmanager
def _sdk_errors(action: str, where: str) -> Iterator[None]:
    """Wrap SDK and transport errors in servectl's tree, ``from`` the original."""
    docker = _sdk()

    try:
        yield
    except ServectlError:
        raise
    except docker.errors.APIError as e:  # NotFound and ImageNotFound included
        raise ServectlError(f"docker: {action}: {_explanation(e)}") from e
    except OSError as e:  # requests' connection errors and timeouts are OSErrors too
        raise EngineUnavailable(_unreachable(e, where)) from e
    except docker.errors.DockerException as e:
        if "Error while fetching server API version" in str(e):
            raise EngineUnavailable(_unreachable(e, where)) from e
        raise EngineUnavailable(f"docker: {action}: {e}; {UNREACHABLE_FIX}") from e


_REASONS = ("No such file or directory", "Connection refused", "Permission denied", "timed out")


T = TypeVar("T")


def _or_none(action: str, call: Callable[[], T], where: str) -> T | None:
    """``call()`` with SDK errors wrapped (see :func:`_sdk_errors`); None when the engine has no such object."""
    docker = _sdk()

    with _sdk_errors(action, where):
        try:
            return call()
        except docker.errors.NotFound:  # ImageNotFound included
            return None


@contextmanager
def _socket_errors(action: str, where: str) -> Iterator[None]:
    """Wrap the socket reader's errors as :func:`_sdk_errors` wraps the SDK's."""
    try:
        yield
    except DockerApiError as e:
        raise ServectlError(f"docker: {action}: {e.explanation}") from e
    except (OSError, ValueError) as e:  # unreachable, timed out, or an answer that is not JSON
        raise EngineUnavailable(_unreachable(e, where)) from e


def engine_address(environ: Mapping[str, str]) -> str:
    """Where the engine of ``environ`` is expected (``DOCKER_HOST``, else the local socket)."""
    return environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def _unreachable(err: Exception, where: str) -> str:
    """One line: where the engine was expected, why it did not answer, and the fix."""
    text = str(err)
    reason = next((r for r in _REASONS if r.lower() in text.lower()), text[:160])
    return f"Docker engine unreachable at {where} ({reason}); {UNREACHABLE_FIX}"


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
        environ: the environment that says where the engine is (``DOCKER_HOST``, ``DOCKER_TLS_VERIFY``, ...):
            the context's, the only one the SDK is given.
        client: a ``docker.DockerClient`` to use (tests); default the SDK's client of ``environ``.
        timeout_s: HTTP timeout of each engine call (stop adds its grace period to it).
    """

    def __init__(self, *, environ: Mapping[str, str], client: Any | None = None, timeout_s: float = 30.0) -> None:
        self._environ = environ
        self._where = engine_address(environ)
        self._client = client
        self._timeout_s = timeout_s
        self._engine: EngineInfo | None = None
        path = local_socket(environ) if client is None else None
        self._socket = DockerSocket(path, timeout_s=timeout_s) if path is not None else None

    @property
    def client(self) -> Any:
        """The SDK client (created on first use)."""
        if self._client is None:
            docker = _sdk()

            with _sdk_errors("connect", self._where):
                self._client = docker.from_env(timeout=int(self._timeout_s), environment=dict(self._environ))
        return self._client

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
        if self._client is not None:
            self._client.close()
            self._client = None

    def _read(self, action: str, path: str, sdk: Callable[[], Any], params: Mapping[str, str] | None = None) -> Any:
        """The document at ``path`` over the local socket, else ``sdk()``; None when there is no such object."""
        if self._socket is None:
            return _or_none(action, sdk, self._where)
        with _socket_errors(action, self._where):
            return self._socket.get(path, params)

    def ping(self) -> EngineInfo:
        info = self._read("ping", "/info", lambda: self.client.api.info())
        if info is None:
            raise EngineUnavailable(f"docker: ping: the engine has no /info; {UNREACHABLE_FIX}")
        self._engine = engine_info_from_info(info)
        return self._engine

    def _default_runtime(self) -> str | None:
        """The engine's default runtime (asked once): it decides whether ``NVIDIA_VISIBLE_DEVICES`` hands out GPUs."""
        return (self._engine or self.ping()).default_runtime

    def _default_runtime_for(self, data: Mapping[str, Any]) -> str | None:
        """The default runtime, for a container that names none itself (its inspect's ``HostConfig.Runtime``
        wins): the engine records the runtime it used, so ``status`` rarely pays for ``docker info`` (~15 ms,
        the slowest call it would make)."""
        return None if (data.get("HostConfig") or {}).get("Runtime") else self._default_runtime()

    def image(self, ref: str) -> ImageInfo | None:
        """The local image ``ref`` names; a ``repository[:tag]@sha256:<image id>`` pin of a locally built image
        (which has no repo digest, so Docker resolves no such reference) is that image when one of its tags is
        in the repository (:func:`id_pinned`)."""
        info = self._inspect_image(ref)
        if info is None and (pin := id_pin(ref)) is not None:
            by_id = self._inspect_image(pin[1])
            return by_id if by_id is not None and id_pinned(ref, by_id) else None
        return info

    def _inspect_image(self, ref: str) -> ImageInfo | None:
        if self._socket is not None:
            try:
                data = self._read(f"inspect image {ref}", image_path(ref), lambda: None)
            except ServectlError as e:
                if isinstance(e.__cause__, DockerApiError) and e.__cause__.status == 400:
                    return None  # a malformed reference names no image here
                raise
            return None if data is None else image_info_from_inspect(data)
        docker = _sdk()

        with _sdk_errors(f"inspect image {ref}", self._where):
            try:
                return image_info_from_inspect(self.client.api.inspect_image(ref))
            except docker.errors.NotFound:  # ImageNotFound included
                return None
            except docker.errors.APIError as e:
                if e.status_code == 400:  # a malformed reference names no image here
                    return None
                raise

    def image_present(self, ref: str) -> bool:
        return self.image(ref) is not None

    def create(self, spec: DockerRunSpec, *, environ: Mapping[str, str]) -> str:
        """Create (not start) the container of ``spec``; return its id."""
        docker = _sdk()

        args = create_container_args(spec, environ=environ)
        if id_pin(spec.image) is not None and self._inspect_image(spec.image) is None:
            local = self.image(spec.image)  # a local build pinned by its id: Docker runs it by the id
            if local is not None:
                args.container["image"] = local.id
        with _sdk_errors(f"create container {spec.name}", self._where):
            api = self.client.api
            try:
                created = api.create_container(**args.container, host_config=api.create_host_config(**args.host_config))
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

    def create_and_start(self, spec: DockerRunSpec, *, environ: Mapping[str, str]) -> str:
        container_id = self.create(spec, environ=environ)
        try:
            with _sdk_errors(f"start container {spec.name}", self._where):
                self.client.api.start(container_id)
        except ServectlError as e:
            self.remove(container_id, force=True)
            raise StartupFailed(f"docker could not start container {spec.name}: {e.message}") from e
        return container_id

    def _inspect_all(self, filters: Mapping[str, Any], *, all_states: bool) -> list[ContainerState]:
        if self._socket is not None:
            return self._inspect_all_over_socket(filters, all_states=all_states)
        docker = _sdk()

        with _sdk_errors("list containers", self._where):
            rows = self.client.api.containers(all=all_states, filters=dict(filters))
        states: list[ContainerState] = []
        for row in rows:
            try:
                with _sdk_errors("inspect container", self._where):
                    data = self.client.api.inspect_container(row["Id"])
            except ServectlError as e:  # removed between list and inspect
                if isinstance(e.__cause__, docker.errors.NotFound):
                    continue
                raise
            states.append(container_state_from_inspect(data, default_runtime=self._default_runtime_for(data)))
        return states

    def _inspect_all_over_socket(self, filters: Mapping[str, Any], *, all_states: bool) -> list[ContainerState]:
        # the SDK's filter encoding (docker.utils.convert_filters): each value a list, the whole as JSON
        encoded = json.dumps({k: v if isinstance(v, list) else [v] for k, v in filters.items()})
        params = {"all": "1" if all_states else "0", "filters": encoded}
        rows = self._read("list containers", "/containers/json", lambda: None, params) or []
        states: list[ContainerState] = []
        for row in rows:
            data = self._read("inspect container", container_path(str(row["Id"])), lambda: None)
            if data is None:  # removed between list and inspect
                continue
            states.append(container_state_from_inspect(data, default_runtime=self._default_runtime_for(data)))
        return states

    def list_managed(self, label_filter: Mapping[str, str] | None = None) -> list[ContainerState]:
        labels = [f"{LABEL_MANAGED}=1", *(f"{k}={v}" for k, v in (label_filter or {}).items())]
        return self._inspect_all({"label": labels}, all_states=True)

    def running_containers(self) -> list[ContainerState]:
        return self._inspect_all({}, all_states=False)

    def containers_named(self, name: str) -> list[ContainerState]:
        return self._inspect_all({"name": f"^/{name}$"}, all_states=True)

    def inspect(self, id_or_name: str) -> ContainerState | None:
        data = self._read(
            f"inspect container {id_or_name}",
            container_path(id_or_name),
            lambda: self.client.api.inspect_container(id_or_name),
        )
        if data is None:
            return None
        return container_state_from_inspect(data, default_runtime=self._default_runtime_for(data))

    def logs(self, container_id: str, *, follow: bool, tail: int | None = None, since: float | None = None) -> LogLines:
        with _sdk_errors(f"logs of {container_id[:12]}", self._where):
            stream = self.client.api.logs(
                container_id,
                stream=True,
                follow=follow,
                tail="all" if tail is None else int(tail),
                since=since,
            )
        return _SdkLogLines(stream)

    def stop(self, container_id: str, *, timeout_s: int) -> None:
        seconds = int(timeout_s)  # a container already gone counts as stopped
        _or_none(
            f"stop container {container_id[:12]}",
            lambda: self.client.api.stop(container_id, timeout=seconds),
            self._where,
        )

    def kill(self, container_id: str) -> None:
        docker = _sdk()

        with _sdk_errors(f"kill container {container_id[:12]}", self._where):
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

        with _sdk_errors(f"remove container {container_id[:12]}", self._where):
            try:
                self.client.api.remove_container(container_id, force=force)
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as e:
                if e.status_code == 409 and "already in progress" in _explanation(e):
                    return
                raise

    def start(self, container_id: str) -> None:
        with _sdk_errors(f"start container {container_id[:12]}", self._where):
            self.client.api.start(container_id)

    # -- raw documents (``servectl adopt`` translates them with servectl.plan.adopt) ------------------------
    def container_document(self, id_or_name: str) -> dict[str, Any] | None:
        """``docker inspect`` of one container as the engine returns it; None when there is none."""
        data = self._read(
            f"inspect container {id_or_name}",
            container_path(id_or_name),
            lambda: self.client.api.inspect_container(id_or_name),
        )
        return None if data is None else dict(data)

    def image_document(self, ref: str) -> dict[str, Any] | None:
        """``docker image inspect`` of one image; None when it is not on this host."""
        data = self._read(f"inspect image {ref}", image_path(ref), lambda: self.client.api.inspect_image(ref))
        return None if data is None else dict(data)

    def volume_folder(self, name: str) -> str | None:
        """The host folder of a named volume (its Mountpoint); None when there is no such volume."""
        path = f"/volumes/{quote(name, safe='')}"
        volume = self._read(f"inspect volume {name}", path, lambda: self.client.api.inspect_volume(name))
        return str(volume.get("Mountpoint") or "") or None if volume is not None else None

    def import_image(self, ref: str, *, write_rootfs: Callable[[BinaryIO], Sequence[str]]) -> None:
        repository, tag = split_tag(ref)
        with tempfile.TemporaryFile() as rootfs:
            changes = list(write_rootfs(rootfs))
            rootfs.seek(0)
            with _sdk_errors(f"import image {ref}", self._where):
                self.client.api.import_image(src=rootfs, repository=repository, tag=tag, changes=changes)
        if self._inspect_image(ref) is None:
            raise ServectlError(f"docker: import image {ref}: the engine made no such image; try again")

    def tag_image(self, ref: str, target: str) -> None:
        repository, tag = split_tag(target)
        with _sdk_errors(f"tag image {ref} as {target}", self._where):
            self.client.api.tag(ref, repository, tag)

    def run_oneshot(
        self, image: str, command: list[str], *, timeout_s: float, labels: Mapping[str, str] | None = None
    ) -> OneShotResult:
        docker = _sdk()
        started = time.perf_counter()
        box: list[Any] = []  # the container, once the engine made it (a signal meanwhile is held until then)
        with _sdk_errors(f"run a throwaway container of {image}", self._where):
            try:
                with critical():  # interrupted halfway, the engine would still make a container we never remove
                    box.append(self._create_oneshot(image, command, labels))
                return self._run_created(box[0], timeout_s=timeout_s, started=started)
            except docker.errors.ImageNotFound as e:
                raise PreflightFailed(f"image {image} is not on this host: docker pull {image}") from e
            finally:
                for container in box:
                    with contextlib.suppress(docker.errors.APIError):
                        container.remove(force=True)

    def _create_oneshot(self, image: str, command: list[str], labels: Mapping[str, str] | None) -> Any:
        return self.client.containers.create(
            image,
            command=command,
            entrypoint=[],
            network_mode="none",
            read_only=True,
            tmpfs={"/tmp": "rw,size=64m"},
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            environment={"CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"},
            labels={LABEL_ONESHOT: "1", **(labels or {})},
            detach=True,
        )

    @staticmethod
    def _run_created(container: Any, *, timeout_s: float, started: float) -> OneShotResult:
        docker = _sdk()
        try:
            container.start()
        except docker.errors.APIError as e:  # the command's executable is not in the image
            return OneShotResult(None, "", "", time.perf_counter() - started, not_found=_explanation(e))
        timed_out = False
        try:
            status = container.wait(timeout=timeout_s)
            exit_code: int | None = int(status.get("StatusCode", -1))
        except Exception:  # requests' read timeout: the time limit passed
            timed_out, exit_code = True, None
            with contextlib.suppress(docker.errors.APIError):
                container.kill()
        stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        stderr = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
        return OneShotResult(exit_code, stdout, stderr, time.perf_counter() - started, timed_out=timed_out)


__all__ = ["SDK_FIX", "UNREACHABLE_FIX", "DockerSdkEngine", "unreachable_fix"]


def split_tag(ref: str) -> tuple[str, str]:
    """``(repository, tag)`` of ``repo[:tag]`` (``latest`` when it names none; a registry's port is no tag)."""
    repository, colon, tag = ref.rpartition(":")
    if not colon or "/" in tag:
        return ref, "latest"
    return repository, tag


def id_pin(ref: str) -> tuple[str, str] | None:
    """``(repository[:tag], sha256:...)`` of a pinned reference, or None for a reference without a digest."""
    name, at, digest = ref.partition("@")
    return (name, digest) if at and digest.startswith("sha256:") else None


def id_pinned(ref: str, image: ImageInfo) -> bool:
    """Whether ``ref`` (``repository[:tag]@sha256:...``) pins local ``image`` by its id: the digest is the image's
    id and the repository is one of the image's tags' (``image.digest`` may be an image id: README, Promotion)."""
    pin = id_pin(ref)
    if pin is None or pin[1] != image.id:
        return False
    name = pin[0]
    repository = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    return any(tag == name or tag.rsplit(":", 1)[0] == repository for tag in image.tags)
