"""Run untrusted Python (a model's answer) in a locked-down throwaway container: :class:`DockerSandbox`.

The container is the opposite of a service: no network (``network_mode: none``), a read-only root file
system with one small ``tmpfs`` work folder (``/work``, the only writable place), every capability dropped,
``no-new-privileges``, the ``nobody`` user (65534), memory without swap, CPU and process-count limits, a
bounded log, and a wall-clock limit after which it is killed. It is removed whatever happens (a signal
while the engine creates it is held until it exists, so it can be removed too). Model output never runs on
the host: the program goes into the container as one argument of ``python3 -I -c``.

The image is any image with ``python3`` on its ``PATH``; the host's sandbox runs the stand-in image
(:func:`servectl.standin.image.build_standin_image`, built through the host's Docker engine from this host's
interpreter with no registry, and which CI builds anyway). :class:`CodeSandbox` is the interface the coding gate takes.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from servectl.errors import EngineUnavailable, ServectlError
from servectl.signals import critical

#: Label of every sandbox container (value ``1``), so that a leftover is recognisable.
LABEL_SANDBOX = "servectl.sandbox"
#: The only writable folder inside the sandbox (a tmpfs).
WORK_DIR = "/work"
#: Largest program passed in (one argv string; Linux caps a single argument at 128 KiB).
MAX_PROGRAM_BYTES = 100_000
#: Output kept per stream (the tail), so that a program that prints forever cannot fill memory.
MAX_OUTPUT_CHARS = 20_000
_NOBODY = "65534:65534"


@dataclass(frozen=True)
class SandboxLimits:
    """What one sandboxed run may use."""

    timeout_s: float = 10.0
    memory_mib: int = 256
    cpus: float = 1.0
    pids: int = 64
    tmpfs_mib: int = 16


@dataclass(frozen=True)
class SandboxRun:
    """How a sandboxed program ended.

    Attributes:
        exit_code: The program's exit status (None when it was killed at the time limit).
        timed_out: The wall-clock limit passed; the container was killed.
        oom_killed: The kernel killed it for going over the memory limit.
        wall_s: From create to the end of the wait.
    """

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    oom_killed: bool
    wall_s: float


class CodeSandbox(Protocol):
    """Runs a Python program somewhere it cannot harm the host."""

    def run_python(self, program: str, *, limits: SandboxLimits) -> SandboxRun:
        """Run ``program`` (Python source) under ``limits`` and report how it ended.

        Raises:
            EngineUnavailable: the container engine does not answer.
            ServectlError: the engine refused to create or start the container.
        """


def container_kwargs(
    image: str, program: str, *, limits: SandboxLimits, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The SDK's ``containers.create`` keyword arguments of one sandboxed run. Pure."""
    if len(program.encode()) > MAX_PROGRAM_BYTES:
        raise ServectlError(f"sandbox: the program is {len(program.encode())} bytes, over {MAX_PROGRAM_BYTES}")
    memory = f"{limits.memory_mib}m"
    return {
        "image": image,
        "command": ["python3", "-I", "-c", program],
        "entrypoint": [],
        "name": f"servectl-sandbox-{uuid.uuid4().hex[:12]}",
        "user": _NOBODY,
        "working_dir": WORK_DIR,
        "environment": {"HOME": WORK_DIR, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"},
        "network_mode": "none",
        "read_only": True,
        # owned by the user (with working_dir set, the engine makes a mode= folder root's)
        "tmpfs": {WORK_DIR: f"rw,nosuid,nodev,size={limits.tmpfs_mib}m,uid=65534,gid=65534,mode=0700"},
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "mem_limit": memory,
        "memswap_limit": memory,  # no swap beyond the memory limit
        "nano_cpus": int(limits.cpus * 1e9),
        "pids_limit": limits.pids,
        "ulimits": [{"name": "nofile", "soft": 256, "hard": 256}, {"name": "fsize", "soft": 1 << 24, "hard": 1 << 24}],
        "log_config": {"type": "json-file", "config": {"max-size": "1m", "max-file": "1"}},
        "labels": {LABEL_SANDBOX: "1", **(labels or {})},
        "detach": True,
    }


class DockerSandbox:
    """:class:`CodeSandbox` on the Docker engine (``servectl.service.context.Context.code_sandbox`` makes the
    host's; nothing is reached until a program runs).

    Args:
        client: returns the ``docker.DockerClient`` to run on (the context hands its engine's), called on the
            first run.
        image: Image with ``python3``; default: the one ``build_image`` returns, called on first use.
        build_image: builds (or finds) the default image: the context's builds the stand-in image.
        labels: Extra labels of every container (tests mark theirs).
    """

    def __init__(
        self,
        *,
        client: Callable[[], Any],
        image: str | None = None,
        build_image: Callable[[], str] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self._client = client
        self._image = image
        self._build_image = build_image
        self._labels = dict(labels or {})

    @property
    def client(self) -> Any:
        return self._client()

    @property
    def image(self) -> str:
        if self._image is None:
            if self._build_image is None:
                raise ServectlError("sandbox: no image given and none to build; give DockerSandbox(image=...)")
            self._image = self._build_image()
        return self._image

    def run_python(self, program: str, *, limits: SandboxLimits) -> SandboxRun:
        import docker.errors  # type: ignore[import-untyped]  # the SDK ships no type hints

        kwargs = container_kwargs(self.image, program, limits=limits, labels=self._labels)
        started = time.perf_counter()
        box: list[Any] = []
        try:
            with critical():  # interrupted halfway, the engine would still make a container we never remove
                box.append(self.client.containers.create(**kwargs))
            return _wait(box[0], limits=limits, started=started)
        except docker.errors.APIError as err:
            raise ServectlError(f"sandbox: the Docker engine refused the container: {err}") from err
        except (docker.errors.DockerException, OSError) as err:  # requests' connection errors are OSErrors
            raise EngineUnavailable(f"sandbox: lost the Docker engine while running a program: {err}") from err
        finally:
            for container in box:
                with contextlib.suppress(docker.errors.APIError):
                    container.remove(force=True)


def _wait(container: Any, *, limits: SandboxLimits, started: float) -> SandboxRun:
    import docker.errors

    container.start()
    timed_out = False
    try:
        status = container.wait(timeout=limits.timeout_s)
        exit_code: int | None = int(status.get("StatusCode", -1))
    except Exception:  # requests' read timeout (or a dropped connection): the time limit passed
        timed_out, exit_code = True, None
        with contextlib.suppress(docker.errors.APIError):
            container.kill()
    wall = time.perf_counter() - started
    container.reload()
    oom = bool(container.attrs.get("State", {}).get("OOMKilled"))
    stdout = container.logs(stdout=True, stderr=False, tail=200).decode("utf-8", "replace")
    stderr = container.logs(stdout=False, stderr=True, tail=200).decode("utf-8", "replace")
    return SandboxRun(
        exit_code=exit_code,
        stdout=stdout[-MAX_OUTPUT_CHARS:],
        stderr=stderr[-MAX_OUTPUT_CHARS:],
        timed_out=timed_out,
        oom_killed=oom,
        wall_s=wall,
    )
