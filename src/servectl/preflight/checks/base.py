"""What every check module shares: the check titles and small result helpers."""

from __future__ import annotations

from typing import Any

from servectl.adapters.gpu import GpuDevice
from servectl.preflight.facts import Facts
from servectl.preflight.model import CheckResult, PreflightRequest, Result

TITLES: dict[str, str] = {
    "profile.status": "Profile status",
    "gpu.present": "GPUs present",
    "gpu.arch": "GPU architecture",
    "gpu.count": "GPU count = TP x DP",
    "gpu.mig": "MIG off",
    "gpu.exclusive": "Exclusive use of the cards",
    "gpu.vram_reserve": "VRAM reserve",
    "port.free": "Port free",
    "port.role": "Port fits the role",
    "env.set": "Environment variables set",
    "network.mode": "Network isolation",
    "image.pinned": "Image pinned",
    "model.present": "Model files",
    "model.revision": "Model revision",
    "host.shm": "Shared memory",
    "host.memory": "Host memory",
    "host.standby_ram": "Host RAM for a warm standby",
    "host.disk": "Cache disk room",
    "docker.engine": "Docker engine",
    "docker.gpu_runtime": "NVIDIA container runtime",
    "engine.parse": "Image parses the argv",
    "image.standby_env": "The image's environment for a warm standby",
    "container.name": "Container name free",
    "services": "No other service on the port or cards",
    "conflicts": "Conflicting services",
}
"""Every check id and its title, in report order (:data:`servectl.preflight.checks.CHECKS` runs them)."""


def make_result(check_id: str, result: Result, message: str, fix: str = "", /, **facts: Any) -> CheckResult:
    return CheckResult(id=check_id, title=TITLES[check_id], result=result, message=message, fix=fix, facts=facts)


def no_gpus(check_id: str) -> CheckResult:
    return make_result(check_id, "skipped", "the profile requests no GPUs", reason="no GPUs requested")


def gpu_unreachable(check_id: str, facts: Facts) -> CheckResult:
    why = "the cards were not read" if facts.gpu_not_read else "NVML unavailable"
    return make_result(check_id, "unknown", f"{why}, see gpu.present", nvml_error=facts.gpu_error)


def requested_devices(request: PreflightRequest, facts: Facts) -> list[tuple[int, GpuDevice | None]]:
    assert facts.gpu is not None
    return [(i, facts.gpu.device(i)) for i in request.gpu_indices]
