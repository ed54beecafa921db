"""Checks of the Docker engine: it answers, it can hand out GPUs, and the declared conflicts."""

from __future__ import annotations

from servectl.adapters.docker import COMPOSE_CONFIG_FILES_LABEL, COMPOSE_SERVICE_LABEL, unreachable_fix
from servectl.preflight.checks.base import make_result, no_gpus
from servectl.preflight.facts import Facts, containers_to_stop
from servectl.preflight.model import CheckResult, PreflightRequest


def check_docker_engine(request: PreflightRequest, facts: Facts) -> CheckResult:
    """The Docker engine answers."""
    if facts.engine is None:
        message = facts.engine_error or "Docker engine unreachable"
        return make_result("docker.engine", "fail", message, unreachable_fix(message))
    e = facts.engine
    return make_result(
        "docker.engine",
        "pass",
        f"Docker {e.server_version}",
        server_version=e.server_version,
        default_runtime=e.default_runtime,
        runtimes=sorted(e.runtimes),
        cgroup_version=e.cgroup_version,
    )


def check_docker_gpu_runtime(request: PreflightRequest, facts: Facts) -> CheckResult:
    """The NVIDIA container runtime (or a CDI spec for nvidia.com/gpu) is there when GPUs are requested."""
    if not request.gpus_requested:
        return no_gpus("docker.gpu_runtime")
    if facts.engine is None:
        return make_result("docker.gpu_runtime", "unknown", "Docker unreachable, see docker.engine")
    out = {
        "runtimes": sorted(facts.engine.runtimes),
        "executables": dict(facts.executables),
        "cdi_specs": list(facts.cdi_specs),
    }
    ways = []
    if "nvidia" in facts.engine.runtimes:
        ways.append("nvidia runtime")
    if facts.executables.get("nvidia-container-runtime-hook"):
        ways.append("nvidia-container-runtime-hook (--gpus)")
    if facts.cdi_specs:
        ways.append(f"CDI spec {facts.cdi_specs[0]}")
    if not ways:
        return make_result(
            "docker.gpu_runtime",
            "fail",
            "no NVIDIA container runtime, --gpus hook or CDI spec: containers cannot get GPUs",
            "install nvidia-container-toolkit, then sudo nvidia-ctk runtime configure --runtime=docker "
            "&& sudo systemctl restart docker",
            **out,
        )
    return make_result("docker.gpu_runtime", "pass", ", ".join(ways), **out)


def check_conflicts(request: PreflightRequest, facts: Facts) -> CheckResult:
    """Declared conflicting services: stopped and restored by swap / up --replace, or blocking a plain up."""
    declared = [c.label() for c in request.conflicts]
    if not request.conflicts:
        return make_result("conflicts", "pass", "no conflicts declared", declared=declared)
    if facts.engine is None:
        return make_result("conflicts", "unknown", "Docker unreachable, see docker.engine", declared=declared)
    running = containers_to_stop(request, facts.containers)
    rows = [
        {
            "container_id": c.short_id,
            "container_name": c.name,
            "compose_file": c.labels.get(COMPOSE_CONFIG_FILES_LABEL),
            "compose_service": c.labels.get(COMPOSE_SERVICE_LABEL),
        }
        for c in running
    ]
    out = {"declared": declared, "running": rows, "stop_conflicts": request.stop_conflicts}
    if not running:
        return make_result("conflicts", "pass", f"none of {len(declared)} declared conflict(s) is running", **out)
    names = ", ".join(c.name for c in running)
    if request.stop_conflicts:
        return make_result("conflicts", "warn", f"will be stopped: {names} (restored afterwards)", **out)
    return make_result(
        "conflicts",
        "fail",
        f"conflicting service(s) running: {names}",
        f"use servectl swap {request.profile_name} (or up --replace), which stops them and restores them afterwards",
        **out,
    )
