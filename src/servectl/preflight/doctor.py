"""``servectl doctor``: is this machine set up to run servectl at all? One line per part, each with its fix.

Preflight answers "may this profile start now?"; doctor answers the question before it, for a new machine:
the Docker engine, a way for containers to get GPUs (NVIDIA runtime, ``--gpus`` hook or CDI spec), the
driver through NVML, the compose CLI, a writable state folder and the optional extras. Required parts make
the report fail (exit 3); the rest warn, because the stand-in demo runs without a GPU, compose or extras.

The facts come through the same seams as preflight (:class:`DockerEngine`, :class:`GpuInventory`,
:class:`HostProbe`), so the unit tests run on the fakes in :mod:`servectl.testing`.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from servectl.adapters.docker import DockerEngine, EngineInfo, unreachable_fix
from servectl.adapters.gpu import GpuInventory, GpuSnapshot
from servectl.adapters.host import HostProbe
from servectl.errors import EngineUnavailable, GpuUnavailable

Outcome = Literal["ok", "warn", "fail"]

#: Where Docker looks for the ``docker compose`` plugin (user, then system folders).
COMPOSE_PLUGIN_PATHS: tuple[str, ...] = (
    "~/.docker/cli-plugins/docker-compose",
    "/usr/local/lib/docker/cli-plugins/docker-compose",
    "/usr/local/libexec/docker/cli-plugins/docker-compose",
    "/usr/lib/docker/cli-plugins/docker-compose",
    "/usr/libexec/docker/cli-plugins/docker-compose",
)
CDI_DEFAULT_DIRS: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")
#: Optional extras: module -> (extra, what needs it).
EXTRAS: dict[str, tuple[str, str]] = {"matplotlib": ("bench", "bench --plot")}


@dataclass(frozen=True)
class DoctorLine:
    """One part of the set-up: what was found and, when it is not ok, how to fix it."""

    id: str
    outcome: Outcome
    required: bool
    found: str
    fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for ``--json``."""
        return {"id": self.id, "outcome": self.outcome, "required": self.required, "found": self.found, "fix": self.fix}


@dataclass(frozen=True)
class DoctorReport:
    """Every line, in a fixed order."""

    lines: tuple[DoctorLine, ...]

    @property
    def failed(self) -> bool:
        """Whether a required part fails."""
        return any(line.outcome == "fail" for line in self.lines)

    @property
    def exit_code(self) -> int:
        """0 when every required part is there, 3 otherwise."""
        return 3 if self.failed else 0

    def line(self, line_id: str) -> DoctorLine:
        """The line with this id."""
        return next(line for line in self.lines if line.id == line_id)


def run_doctor(
    *,
    docker: DockerEngine,
    gpus: GpuInventory,
    host: HostProbe,
    state_dir: Path,
    writable: Callable[[Path], str | None] | None = None,
    module_present: Callable[[str], bool] | None = None,
) -> DoctorReport:
    """Check each part of the set-up once.

    Args:
        docker, gpus, host: the seams preflight uses (real adapters or the fakes).
        state_dir: servectl's state folder, which must be writable.
        writable: returns why a folder cannot be written, or None (default: create it and a file in it).
        module_present: whether a Python module is installed (default: ``importlib.util.find_spec``).
    """
    engine, engine_error = _engine(docker)
    snapshot, gpu_error = _snapshot(gpus)
    lines: list[DoctorLine] = [_docker_line(engine, engine_error)]
    lines.append(_nvml_line(snapshot, gpu_error))
    lines.append(_gpu_runtime_line(engine, host, has_gpus=bool(snapshot and snapshot.devices)))
    lines.append(_compose_line(host))
    problem = (writable or folder_write_problem)(state_dir)
    lines.append(
        DoctorLine("state.folder", "ok", True, f"{state_dir} is writable")
        if problem is None
        else DoctorLine(
            "state.folder",
            "fail",
            True,
            f"{state_dir}: {problem}",
            "set SERVECTL_HOME to a folder you can write, or fix the folder's owner and mode",
        )
    )
    lines.extend(_extra_lines(module_present or _module_present))
    return DoctorReport(tuple(lines))


def folder_write_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot be created or written (None when it can): makes it and a file in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".doctor-"):
            pass
    except OSError as err:
        return err.strerror or str(err)
    return None


def _module_present(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _engine(docker: DockerEngine) -> tuple[EngineInfo | None, str | None]:
    try:
        return docker.ping(), None
    except EngineUnavailable as err:
        return None, err.message


def _snapshot(gpus: GpuInventory) -> tuple[GpuSnapshot | None, str | None]:
    try:
        return gpus.snapshot(), None
    except GpuUnavailable as err:
        return None, err.message


def _docker_line(engine: EngineInfo | None, error: str | None) -> DoctorLine:
    if engine is None:
        message = error or "Docker engine unreachable"
        return DoctorLine("docker.engine", "fail", True, message, unreachable_fix(message))
    runtimes = ", ".join(sorted(engine.runtimes)) or "none"
    return DoctorLine("docker.engine", "ok", True, f"Docker {engine.server_version} (runtimes: {runtimes})")


def _nvml_line(snapshot: GpuSnapshot | None, error: str | None) -> DoctorLine:
    if snapshot is None:
        return DoctorLine(
            "gpu.driver",
            "warn",
            False,
            error or "NVML unavailable",
            "GPU profiles need the NVIDIA driver (nvidia-smi must work); GPU-less ones (the demo) run without",
        )
    cuda = ".".join(map(str, snapshot.cuda_driver_version)) if snapshot.cuda_driver_version else "?"
    count = len(snapshot.devices)
    found = f"driver {snapshot.driver_version or '?'}, CUDA {cuda}, {count} GPU{'s' if count != 1 else ''} via NVML"
    if not count:
        return DoctorLine("gpu.driver", "warn", False, found, "no GPU is visible: check nvidia-smi")
    return DoctorLine("gpu.driver", "ok", False, found)


def _gpu_runtime_line(engine: EngineInfo | None, host: HostProbe, *, has_gpus: bool) -> DoctorLine:
    """Required when this machine has GPUs: they are useless to servectl if containers cannot get them."""
    if engine is None:
        return DoctorLine("docker.gpu_runtime", "warn", has_gpus, "not checked: Docker unreachable")
    ways = []
    if "nvidia" in engine.runtimes:
        ways.append("nvidia runtime")
    if host.find_executable("nvidia-container-runtime-hook"):
        ways.append("nvidia-container-runtime-hook (--gpus)")
    ways.extend(f"CDI spec {spec}" for spec in _cdi_specs(engine.cdi_spec_dirs or CDI_DEFAULT_DIRS, host))
    if ways:
        return DoctorLine("docker.gpu_runtime", "ok", has_gpus, ", ".join(ways))
    return DoctorLine(
        "docker.gpu_runtime",
        "fail" if has_gpus else "warn",
        has_gpus,
        "no NVIDIA container runtime, --gpus hook or CDI spec: containers cannot get GPUs",
        "install nvidia-container-toolkit, then sudo nvidia-ctk runtime configure --runtime=docker "
        "&& sudo systemctl restart docker",
    )


def _cdi_specs(folders: Sequence[str], host: HostProbe) -> list[str]:
    return [
        f"{folder.rstrip('/')}/{name}"
        for folder in folders
        for name in ("nvidia.yaml", "nvidia.json")
        if host.path_exists(f"{folder.rstrip('/')}/{name}")
    ]


def _compose_line(host: HostProbe) -> DoctorLine:
    standalone = host.find_executable("docker-compose")
    plugins = [p for p in COMPOSE_PLUGIN_PATHS if host.path_exists(os.path.expanduser(p))]
    if plugins:
        return DoctorLine("compose.cli", "ok", False, f"docker compose plugin at {os.path.expanduser(plugins[0])}")
    if standalone:
        return DoctorLine("compose.cli", "ok", False, f"docker-compose at {standalone}")
    return DoctorLine(
        "compose.cli",
        "warn",
        False,
        "no docker compose plugin or docker-compose; needed to run `servectl render --to compose` files, to swap "
        "to a profile with a `compose_file:` conflict and for `servectl adopt --compose`",
        "sudo apt-get install docker-compose-plugin",
    )


def _extra_lines(module_present: Callable[[str], bool]) -> list[DoctorLine]:
    lines = []
    for module, (extra, needed_by) in EXTRAS.items():
        if module_present(module):
            lines.append(DoctorLine(f"extra.{extra}", "ok", False, f"{module} installed ({needed_by})"))
        else:
            lines.append(
                DoctorLine(
                    f"extra.{extra}",
                    "warn",
                    False,
                    f"{module} not installed; {needed_by} refuses without it",
                    f"pip install 'servectl[{extra}]'",
                )
            )
    return lines
