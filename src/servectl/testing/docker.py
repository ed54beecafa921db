"""A fake Docker engine for unit tests of the runtime, the health gate, swap and preflight.

:class:`FakeDockerEngine` implements :class:`servectl.adapters.docker.DockerEngine` in memory. Each container
it "starts" plays a :class:`FakeScript`: log lines at given seconds after start, then running on or exiting
with a code (and an OOM flag). Containers can also be prepared as plain :class:`ContainerState` values (a
compose service holding GPUs, a container on a port), and images as :class:`ImageInfo` with digests.
:meth:`FakeDockerEngine.http_transport` answers the engine's HTTP API for the running containers (``/health``
is 503 until the script's ready line is out), so the gate and ``status`` run unchanged against it through a
:class:`~servectl.testing.http.FakeHttp` on that transport.

The adapter itself (:class:`servectl.adapters.docker.DockerSdkEngine`) is tested against the real engine.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

from servectl.adapters.docker import (
    ContainerState,
    EngineInfo,
    GpuRequest,
    ImageInfo,
    LogLines,
    OneShotResult,
    PublishedPort,
    run_kwargs,
)
from servectl.errors import EngineUnavailable, PreflightFailed, ServectlError, ServiceConflict, StartupFailed
from servectl.plan.compile import LABEL_HOST, LABEL_PORT, LABEL_SERVED_NAME, DockerRunSpec
from servectl.redact import secret_env_values
from servectl.testing.engine_script import FakeScript, sglang_like_script
from servectl.testing.memory_saver import memory_saver_answer

__all__ = [
    "TEST_SESSION_LABEL",
    "FakeContainer",
    "FakeDockerEngine",
    "FakeScript",
    "sglang_like_script",
    "write_test_profile",
]

#: Label that marks containers of one test session (tests clean up by it).
TEST_SESSION_LABEL = "servectl.test-session"

#: What the fake engine answers to ``ping`` unless told otherwise.
DEFAULT_ENGINE_INFO = EngineInfo(
    server_version="27.5.1",
    runtimes=frozenset({"runc", "nvidia"}),
    default_runtime="runc",
    cdi_spec_dirs=("/etc/cdi", "/var/run/cdi"),
    cgroup_version="2",
)


@dataclass
class FakeContainer:
    """A container of the fake engine (mutable: the engine changes it)."""

    id: str
    spec: DockerRunSpec
    environment: list[str]
    script: FakeScript
    created_at: float
    started_at: float | None = None
    stopped_at: float | None = None
    exit_code: int | None = None
    oom_killed: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    foreign: bool = False
    #: the memory saver's tags released by ``POST /release_memory_occupation`` and not resumed since
    released: frozenset[str] = frozenset()

    def elapsed(self, now: float) -> float:
        return 0.0 if self.started_at is None else now - self.started_at


class FakeDockerEngine:
    """An in-memory :class:`~servectl.adapters.docker.DockerEngine`.

    Args:
        images: images present on the "host": references (``repo:tag``, ``repo@sha256:...``) or
            :class:`ImageInfo` values (found by tag, id, repo digest or bare digest).
        running: prepared containers (servectl's or not) that are there from the start.
        engine_info: what ``ping`` answers.
        script_for: the script a new container plays (default: SGLang-like lines over 0.2 s).
        available: False makes every call raise EngineUnavailable.
        clock: monotonic seconds (container time).
        sleep: how stop waits out a grace period (tests pass a no-op to stay fast).
        oneshot: what a throwaway container of ``run_oneshot`` returns for ``(image, command)``; default: the
            parse probe's answer that SGLang parsed the argv (:data:`PARSED`).
    """

    def __init__(
        self,
        *,
        images: Iterable[str | ImageInfo] = (),
        running: Iterable[ContainerState] = (),
        engine_info: EngineInfo = DEFAULT_ENGINE_INFO,
        script_for: Callable[[DockerRunSpec], FakeScript] | None = None,
        available: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        oneshot: Callable[[str, list[str]], OneShotResult] | None = None,
    ) -> None:
        self.oneshot = oneshot or (lambda image, command: probe_answer(PARSED))
        self.images: set[str] = set()
        self.image_infos: list[ImageInfo] = []
        for image in images:
            if isinstance(image, ImageInfo):
                self.image_infos.append(image)
                self.images.update((*image.tags, *image.repo_digests, image.id))
            else:
                self.images.add(image)
        self.prepared: dict[str, ContainerState] = {c.id: c for c in running}
        self.engine_info = engine_info
        self.script_for = script_for or (lambda spec: sglang_like_script())
        self.available = available
        self.clock = clock
        self.sleep = sleep
        self.containers: dict[str, FakeContainer] = {}
        #: ``docker inspect`` documents by container id or name, and image documents by reference (tests set them)
        self.documents: dict[str, dict[str, Any]] = {}
        self.image_documents: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        #: the images :meth:`import_image` made, in order
        self.imported: list[str] = []
        self._ids = itertools.count(1)
        self._guard = threading.RLock()

    # -- helpers for tests ----------------------------------------------------------------------------
    def add_foreign(
        self, name: str, *, ports: Iterable[int] = (), device_ids: Iterable[str] = (), running: bool = True
    ) -> str:
        """A container servectl did not start (no servectl labels)."""
        from servectl.plan.compile import PortBinding

        spec = DockerRunSpec(
            image="other:latest",
            name=name,
            command=("sleep", "inf"),
            labels={},
            environment=(),
            device_ids=tuple(device_ids),
            ipc_mode=None,
            shm_size=None,
            ulimits=(),
            network_mode="bridge",
            ports=tuple(PortBinding("0.0.0.0", p, p) for p in ports),
            mounts=(),
            stop_timeout_s=10,
        )
        cid = self._new(spec, [], FakeScript(), foreign=True)
        if running:
            self.containers[cid].started_at = self.clock()
        return cid

    def add_container(self, state: ContainerState) -> None:
        """A prepared container, exactly as ``inspect`` will report it (until it is stopped or removed)."""
        with self._guard:
            self.prepared[state.id] = state

    def remove_behind_back(self, container_id: str) -> None:
        """Like ``docker rm -f`` from another terminal."""
        with self._guard:
            self.containers.pop(container_id, None)

    # -- state ----------------------------------------------------------------------------------------
    def _check(self, call: str, arg: str = "") -> None:
        self.calls.append((call, arg))
        if not self.available:
            raise EngineUnavailable(
                "Docker engine unreachable at unix:///var/run/docker.sock (Connection refused, fake); start it"
            )

    def _new(self, spec: DockerRunSpec, environment: list[str], script: FakeScript, *, foreign: bool = False) -> str:
        cid = f"{next(self._ids):012x}" + "f" * 52
        self.containers[cid] = FakeContainer(
            id=cid,
            spec=spec,
            environment=environment,
            script=script,
            created_at=self.clock(),
            labels=dict(spec.labels),
            foreign=foreign,
        )
        return cid

    def _settle(self, c: FakeContainer) -> None:
        """Apply the script's own exit once its time has come."""
        s = c.script
        due = s.exit_at_s is not None and c.started_at is not None and c.elapsed(self.clock()) >= s.exit_at_s
        if c.exit_code is None and due:
            assert c.started_at is not None and s.exit_at_s is not None
            c.exit_code, c.oom_killed = s.exit_code, s.oom_killed
            c.stopped_at = c.started_at + s.exit_at_s

    def _running(self, c: FakeContainer) -> bool:
        self._settle(c)
        return c.started_at is not None and c.exit_code is None

    def _state(self, c: FakeContainer) -> ContainerState:
        running = self._running(c)
        status = "running" if running else ("created" if c.started_at is None else "exited")
        now_wall = time.time()
        started = None if c.started_at is None else now_wall - (self.clock() - c.started_at)
        finished = None if c.stopped_at is None else now_wall - (self.clock() - c.stopped_at)
        return ContainerState(
            id=c.id,
            name=c.spec.name,
            image=c.spec.image,
            labels=dict(c.labels),
            status=status,
            exit_code=None if running or c.started_at is None else c.exit_code,
            oom_killed=c.oom_killed,
            started_at=started,
            finished_at=finished,
            ports=tuple(PublishedPort(p.host_ip, p.host_port, p.container_port) for p in c.spec.ports),
            gpu_request=(
                GpuRequest("all" in c.spec.device_ids, c.spec.device_ids, "device-request")
                if c.spec.device_ids
                else None
            ),
            pid=4242 if running else None,
            mounts=tuple((m.source, m.target) for m in c.spec.mounts),
            network_mode=c.spec.network_mode,
            secret_env_values=secret_env_values(c.environment),
        )

    def _get(self, id_or_name: str) -> FakeContainer | None:
        for c in self.containers.values():
            if id_or_name in (c.id, c.spec.name) or (len(id_or_name) >= 12 and c.id.startswith(id_or_name)):
                return c
        return None

    def _get_prepared(self, id_or_name: str) -> ContainerState | None:
        for c in self.prepared.values():
            if id_or_name in (c.id, c.name) or (len(id_or_name) >= 12 and c.id.startswith(id_or_name)):
                return c
        return None

    def _all_states(self) -> list[ContainerState]:
        return [*self.prepared.values(), *(self._state(c) for c in list(self.containers.values()))]

    # -- DockerEngine ---------------------------------------------------------------------------------
    def ping(self) -> EngineInfo:
        self._check("ping")
        return self.engine_info

    def image(self, ref: str) -> ImageInfo | None:
        self._check("image", ref)
        for info in self.image_infos:
            if ref in info.tags or ref == info.id or ref in info.repo_digests:
                return info
            if ref.startswith("sha256:") and ref in info.digests():
                return info
        if ref in self.images:
            digest = ref.split("@", 1)[1] if "@" in ref else "sha256:" + hashlib.sha256(ref.encode()).hexdigest()
            return ImageInfo(id=digest, repo_digests=(ref,) if "@" in ref else (), tags=() if "@" in ref else (ref,))
        return None

    def image_present(self, ref: str) -> bool:
        self._check("image_present", ref)
        return ref in self.images or any(ref in info.digests() for info in self.image_infos)

    def create_and_start(self, spec: DockerRunSpec, *, environ: Mapping[str, str]) -> str:
        self._check("create_and_start", spec.name)
        with self._guard:
            if spec.image not in self.images:
                raise PreflightFailed(f"image {spec.image} is not on this host (fake)")
            if any(c.spec.name == spec.name for c in self.containers.values()):
                raise ServiceConflict(f"a container named {spec.name} already exists (fake)")
            for other in self.containers.values():
                if self._running(other):
                    taken = {(p.host_ip, p.host_port) for p in other.spec.ports}
                    for p in spec.ports:
                        if (p.host_ip, p.host_port) in taken or ("0.0.0.0", p.host_port) in taken:
                            raise StartupFailed(
                                f"docker could not start container {spec.name}: port is already allocated"
                            )
            environment = run_kwargs(spec, environ=environ)["environment"]
            cid = self._new(spec, environment, self.script_for(spec))
            self.containers[cid].started_at = self.clock()
            return cid

    def list_managed(self, label_filter: Mapping[str, str] | None = None) -> list[ContainerState]:
        self._check("list_managed")
        with self._guard:
            out = []
            for state in self._all_states():
                if state.managed and all(state.labels.get(k) == v for k, v in (label_filter or {}).items()):
                    out.append(state)
            return out

    def running_containers(self) -> list[ContainerState]:
        self._check("running_containers")
        with self._guard:
            return [state for state in self._all_states() if state.running]

    def containers_named(self, name: str) -> list[ContainerState]:
        self._check("containers_named", name)
        with self._guard:
            return [state for state in self._all_states() if state.name == name]

    def container_document(self, id_or_name: str) -> dict[str, Any] | None:
        return self.documents.get(id_or_name)

    def image_document(self, ref: str) -> dict[str, Any] | None:
        return self.image_documents.get(ref)

    def inspect(self, id_or_name: str) -> ContainerState | None:
        self._check("inspect", id_or_name)
        with self._guard:
            c = self._get(id_or_name)
            return self._get_prepared(id_or_name) if c is None else self._state(c)

    def logs(self, container_id: str, *, follow: bool, tail: int | None = None, since: float | None = None) -> LogLines:
        self._check("logs", container_id)
        c = self._get(container_id)
        if c is None:
            raise ServectlError(f"docker: logs of {container_id[:12]}: no such container (fake)")
        return _FakeLogLines(self, c, follow=follow, tail=tail)

    def stop(self, container_id: str, *, timeout_s: int) -> None:
        self._check("stop", container_id)
        self._stop_prepared(container_id, 0)
        c = self._get(container_id)
        if c is None or not self._running(c):
            return
        if c.script.ignore_sigterm:
            self.sleep(timeout_s)
            code = 137
        else:
            code = 0
        with self._guard:
            if c.exit_code is None:
                c.exit_code, c.stopped_at = code, self.clock()

    def kill(self, container_id: str) -> None:
        self._check("kill", container_id)
        self._stop_prepared(container_id, 137)
        c = self._get(container_id)
        if c is not None and self._running(c):
            c.exit_code, c.stopped_at = 137, self.clock()

    def remove(self, container_id: str, *, force: bool) -> None:
        self._check("remove", container_id)
        with self._guard:
            prepared = self._get_prepared(container_id)
            if prepared is not None and (force or not prepared.running):
                del self.prepared[prepared.id]
            c = self._get(container_id)
            if c is None:
                return
            if self._running(c) and not force:
                raise ServectlError(f"docker: remove container {container_id[:12]}: it is running (fake)")
            del self.containers[c.id]

    def import_image(self, ref: str, *, write_rootfs: Callable[[BinaryIO], Sequence[str]]) -> None:
        """Records ``ref`` as present (in :attr:`imported` too) without writing the root filesystem."""
        self._check("import_image", ref)
        with self._guard:
            self.images.add(ref)
            self.imported.append(ref)

    def tag_image(self, ref: str, target: str) -> None:
        self._check("tag_image", f"{ref} {target}")
        if not self.image_present(ref):
            raise ServectlError(f"docker: tag image {ref} as {target}: No such image: {ref}")
        with self._guard:
            self.images.add(target)

    def run_oneshot(
        self, image: str, command: list[str], *, timeout_s: float, labels: Mapping[str, str] | None = None
    ) -> OneShotResult:
        self._check("run_oneshot", image)
        if image not in self.images and image.rpartition("@")[2] not in self.images:  # ref@digest: by digest
            raise PreflightFailed(f"image {image} is not on this host: docker pull {image}")
        return self.oneshot(image, list(command))

    def start(self, container_id: str) -> None:
        self._check("start", container_id)
        prepared = self._get_prepared(container_id)
        if prepared is not None:
            with self._guard:
                self.prepared[prepared.id] = replace(prepared, status="running", exit_code=None)
            return
        c = self._get(container_id)
        if c is None:
            raise ServectlError(f"docker: start container {container_id[:12]}: no such container (fake)")
        if not self._running(c):
            c.started_at, c.exit_code, c.stopped_at = self.clock(), None, None
            c.script = replace(c.script, exit_at_s=None)

    def _stop_prepared(self, container_id: str, code: int) -> None:
        prepared = self._get_prepared(container_id)
        if prepared is not None and prepared.running:
            with self._guard:
                self.prepared[prepared.id] = replace(prepared, status="exited", exit_code=code, pid=None)

    # -- the engine's HTTP API ------------------------------------------------------------------------
    def http_transport(self) -> Any:
        """An ``httpx.MockTransport`` answering for the running containers' published ports."""
        import httpx

        def handle(request: httpx.Request) -> httpx.Response:
            port = request.url.port
            with self._guard:
                target = None
                for c in self.containers.values():
                    if not self._running(c) or c.foreign:
                        continue
                    ports = {p.host_port for p in c.spec.ports} or {int(c.labels.get(LABEL_PORT, "0"))}
                    if port in ports and request.url.host in (
                        c.labels.get(LABEL_HOST, "127.0.0.1"),
                        "127.0.0.1",
                    ):
                        target = c
            if target is None:
                raise httpx.ConnectError("connection refused (fake)", request=request)
            ready_at = target.script.ready_at_s
            ready = ready_at is not None and target.elapsed(self.clock()) >= ready_at
            path = request.url.path
            if path == "/health":
                return httpx.Response(200 if ready else 503)
            if path == "/v1/models":
                names = target.script.models or (target.labels.get(LABEL_SERVED_NAME, "model"),)
                return httpx.Response(
                    200, json={"object": "list", "data": [{"id": n, "object": "model"} for n in names]}
                )
            if path == "/v1/chat/completions":
                if not ready:
                    return httpx.Response(503)
                body = json.loads(request.content or b"{}")
                if target.script.chat_status != 200:
                    return httpx.Response(target.script.chat_status, text="error (fake)")
                answer = "!!" if "weights" in target.released else "OK"  # released weights: the stand-in's garbage
                return httpx.Response(
                    200, json={"choices": [{"message": {"content": answer}}], "model": body.get("model")}
                )
            saver = memory_saver_answer(target, ready, request, die=lambda: self.kill(target.id))
            return httpx.Response(404) if saver is None else saver

        return httpx.MockTransport(handle)


class _FakeLogLines:
    def __init__(self, engine: FakeDockerEngine, c: FakeContainer, *, follow: bool, tail: int | None) -> None:
        self._engine, self._c, self._follow = engine, c, follow
        self._closed = threading.Event()
        lines = c.script.lines
        if not follow:
            now = c.elapsed(engine.clock())
            done = [line for t, line in lines if t <= now]
            self._queue = done[-tail:] if tail else done
            self._index = 0
            return
        self._index = 0
        self._queue = []

    def __iter__(self) -> _FakeLogLines:
        return self

    def __next__(self) -> str:
        if not self._follow:
            if self._index >= len(self._queue):
                raise StopIteration
            self._index += 1
            return self._queue[self._index - 1]
        lines = self._c.script.lines
        while not self._closed.is_set():
            if self._index < len(lines):
                t, line = lines[self._index]
                if self._c.elapsed(self._engine.clock()) >= t:
                    self._index += 1
                    return line
            if self._c.id not in self._engine.containers:
                raise StopIteration
            if not self._engine._running(self._c):
                # Lines written before the exit are still delivered, then the stream ends.
                stopped = self._c.stopped_at
                if (
                    stopped is not None
                    and self._index < len(lines)
                    and lines[self._index][0] <= self._c.elapsed(stopped)
                ):
                    self._index += 1
                    return lines[self._index - 1][1]
                raise StopIteration
            time.sleep(0.005)
        raise StopIteration

    def close(self) -> None:
        self._closed.set()


def write_test_profile(
    folder: Path,
    name: str,
    *,
    port: int,
    extends: str | None = "demo",
    session: str | None = None,
    **sections: Mapping[str, Any],
) -> Path:
    """Write profile ``name`` into ``folder`` (a ``SERVECTL_PROFILES`` entry) and return its path.

    The profile extends ``extends`` (the shipped stand-in ``demo`` by default), serves on ``port`` and,
    with ``session``, labels its container ``servectl.test-session=<session>`` so that a test session
    finds and removes exactly what it created. ``sections`` merge over that: ``engine={"env": {...}}``,
    ``health={...}``, ``container={...}``, ``image={...}``.
    """
    import yaml

    doc: dict[str, Any] = {"name": name}
    if extends:
        doc["extends"] = extends
    doc["serve"] = {"port": port}
    if session is not None:
        doc["container"] = {"labels": {TEST_SESSION_LABEL: session}}
    for key, value in sections.items():
        merged = dict(doc.get(key) or {})
        for k, v in value.items():
            if isinstance(v, Mapping) and isinstance(merged.get(k), Mapping):
                merged[k] = {**merged[k], **v}
            else:
                merged[k] = v
        doc[key] = merged
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def remove_test_session(session: str) -> None:
    """Remove every container labelled ``servectl.test-session=<session>`` (tests and benchmarks clean up)."""
    import subprocess

    ids = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={TEST_SESSION_LABEL}={session}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, check=True)


#: The probe's answer when SGLang parsed and resolved an argv (the fake engine's default answer).
PARSED: dict[str, Any] = {"sglang_version": "0.5.23", "parsed": True, "resolved": True}


def probe_answer(
    document: Mapping[str, Any], *, exit_code: int = 0, stderr: str = "", seconds: float = 0.1
) -> OneShotResult:
    """What a throwaway container of ``servectl.adapters.sglang_probe`` prints for ``document`` (fakes)."""
    from servectl.adapters.sglang_probe import BEGIN, END

    stdout = f"some SGLang import chatter\n{BEGIN}\n{json.dumps(dict(document))}\n{END}\n"
    return OneShotResult(exit_code, stdout, stderr, seconds)


def dump_answer(document: Mapping[str, Any], *, seconds: float = 0.1) -> OneShotResult:
    """What a throwaway container of ``engine_dump.py flags`` prints for a catalog ``document`` (fakes)."""
    return OneShotResult(0, "a warning printed on import\n" + json.dumps(dict(document), indent=1) + "\n", "", seconds)
