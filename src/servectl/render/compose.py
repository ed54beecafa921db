"""A launch plan as a Compose Specification file: the same container ``servectl up`` creates. Pure.

Mapping from the plan (``docker run`` option -> compose key):

- image (by digest when pinned) -> ``image``; the SGLang command -> ``command`` (a list); name ->
  ``container_name``; labels -> ``labels`` (the same ``servectl.*`` labels, so ``servectl status`` knows it)
- ``--gpus device=0,1`` -> ``deploy.resources.reservations.devices`` (nvidia driver, device ids, ``gpu``)
- ``--ipc``, ``--shm-size``, ``--ulimit``, ``--init``, ``--stop-timeout`` -> ``ipc``, ``shm_size``,
  ``ulimits``, ``init``, ``stop_grace_period``
- ``-p host_ip:port:port`` -> ``ports`` bound to the same host address; ``--network host`` -> ``network_mode``
- ``-v`` host paths -> bind ``volumes``; read-only ones must exist (``create_host_path: false``), writable
  caches are created as ``docker run -v`` does
- generated files (the adaptive speculative ladder) -> top-level ``configs`` with inline ``content``
- the API key -> a top-level ``secrets`` entry read from the shell variable (``environment:``) or from the
  key file (``file:``), mounted where the plan's key wrapper reads it; the key is never in the file
- the readiness gate -> ``healthcheck`` on ``/health`` with ``start_period`` = the profile's startup timeout

Compose interpolates ``$``: literal dollars are written ``$$``; only ``${VAR}`` in host paths (profiles that
use variables such as ``${MODEL_ROOT}``) stay references for compose to fill in from the shell.
"""

from __future__ import annotations

import re
from typing import Any

from servectl.plan.compile import PROJECT_DIR_VAR, DockerRunSpec, LaunchPlan, MountPlan
from servectl.profile.models import Profile
from servectl.render.common import (
    PROBE_PERIOD_S,
    PROBE_TIMEOUT_S,
    PlanParts,
    health_check_argv,
    listen_of,
    require_single_node,
    split_mounts,
    variables_in,
)

API_KEY_SECRET = "servectl-api-key"
ADMIN_KEY_SECRET = "servectl-admin-api-key"
_DOLLAR_NOT_VAR = re.compile(r"\$(?!\{[A-Za-z_][A-Za-z0-9_]*\})")


def render_compose(
    plan: LaunchPlan,
    profile: Profile,
    *,
    project_dir: str | None = None,
) -> dict[str, Any]:
    """The Compose file (as a mapping) that runs ``plan`` with ``docker compose up``.

    Args:
        plan: the compiled launch plan (see :func:`servectl.plan.compile.compile_portable_plan` for files to share).
        profile: the profile the plan came from (only ``nodes`` and ``image.build`` are read).
        project_dir: the project folder relative to the compose file's folder (e.g. ``..``): host paths
            starting with ``${SERVECTL_PROJECT_DIR}`` are written relative to the file, which compose
            resolves; None keeps the variable for compose to fill in from the shell.

    Raises:
        RenderUnsupported: a multi-node profile (``nodes > 1``).
    """
    require_single_node(plan, profile.nodes, "docker compose")
    spec = plan.docker
    parts = split_mounts(plan)
    service: dict[str, Any] = {
        "image": spec.image,
        "container_name": spec.name,
        "command": [_literal(token) for token in spec.command],
        "labels": {key: _literal(value) for key, value in spec.labels.items()},
    }
    if spec.environment:
        # None: passed through from the shell that runs compose, as servectl passes its own environment
        service["environment"] = {name: None if value is None else _literal(value) for name, value in spec.environment}
    _add_resources(service, spec)
    if parts.host:
        service["volumes"] = [_bind(m, project_dir=project_dir) for m in parts.host]
    document: dict[str, Any] = {"name": project_name(plan), "services": {plan.profile: service}}
    _add_files(document, service, plan, parts, project_dir=project_dir)
    _add_lifecycle(service, plan)
    return document


def _add_resources(service: dict[str, Any], spec: DockerRunSpec) -> None:
    """GPUs, network and ports, IPC, shared memory and ulimits, as ``docker run`` gets them."""
    if spec.device_ids:
        service["deploy"] = {
            "resources": {
                "reservations": {
                    "devices": [{"driver": "nvidia", "device_ids": list(spec.device_ids), "capabilities": ["gpu"]}]
                }
            }
        }
    if spec.network_mode == "host":
        service["network_mode"] = "host"
    else:
        service["ports"] = [
            {
                "target": p.container_port,
                "published": str(p.host_port),
                "host_ip": p.host_ip,
                "protocol": "tcp",
            }
            for p in spec.ports
        ]
    if spec.ipc_mode:
        service["ipc"] = spec.ipc_mode
    if spec.shm_size:
        service["shm_size"] = spec.shm_size
    if spec.ulimits:
        service["ulimits"] = {
            name: soft if soft == hard else {"soft": soft, "hard": hard} for name, soft, hard in spec.ulimits
        }


def _add_files(
    document: dict[str, Any], service: dict[str, Any], plan: LaunchPlan, parts: PlanParts, *, project_dir: str | None
) -> None:
    """The plan's generated files as compose configs, and the API key as a compose secret."""
    if parts.generated:
        configs = {}
        service["configs"] = []
        for generated, mount in parts.generated:
            key = generated.host_path.rsplit("/", 1)[-1].replace(".", "-")  # compose prefixes the project
            configs[key] = {"content": _literal(generated.content)}
            service["configs"].append({"source": key, "target": mount.target})
        document["configs"] = configs
    for name, ref, key_mount in (
        (API_KEY_SECRET, plan.secret, parts.api_key),
        (ADMIN_KEY_SECRET, plan.admin_secret, parts.admin_key),
    ):
        if ref is None or key_mount is None:
            continue
        if ref.source == "env":
            source: dict[str, str] = {"environment": ref.name}
        else:
            source = {"file": _host_path(ref.name, project_dir=project_dir)}
        document.setdefault("secrets", {})[name] = source
        service.setdefault("secrets", []).append({"source": name, "target": key_mount.target})


def _add_lifecycle(service: dict[str, Any], plan: LaunchPlan) -> None:
    """init, restart policy, stop grace and the health check servectl's gate would run."""
    spec = plan.docker
    service["init"] = spec.init
    if spec.restart_policy:
        service["restart"] = spec.restart_policy
    service["stop_grace_period"] = f"{spec.stop_timeout_s}s"
    service["healthcheck"] = {
        "test": ["CMD", *(_literal(t) for t in health_check_argv(plan, listen_of(plan)))],
        "interval": f"{PROBE_PERIOD_S}s",
        "timeout": f"{PROBE_TIMEOUT_S}s",
        "retries": 3,
        "start_period": f"{_seconds(plan.startup_timeout_s)}s",
    }


def compose_notes(plan: LaunchPlan, profile: Profile, document: dict[str, Any]) -> list[str]:
    """Header lines telling the reader what the file needs from the shell before ``docker compose up``."""
    notes: list[str] = []
    service = document["services"][plan.profile]
    if profile.image.build is not None:
        notes.append(
            f"image {plan.docker.image} is built by servectl (image.build: {profile.image.build}): "
            f"run `servectl up {plan.profile}` once, or build it, before `docker compose up`"
        )
    for what, ref in (("API key", plan.secret), ("admin key", plan.admin_secret)):
        if ref is None:
            continue
        if ref.source == "env":
            notes.append(f"{what}: compose reads it from ${ref.name} in your shell (export it first)")
        else:
            notes.append(f"{what}: compose reads it from the file {ref.name}")
    passed = [name for name, value in plan.docker.environment if value is None]
    if passed:
        notes.append("passed through from your shell: " + ", ".join(passed))
    variables = sorted({v for m in service.get("volumes", []) for v in variables_in(m["source"])})
    if variables:
        notes.append("host paths use " + ", ".join(f"${{{v}}}" for v in variables) + ": export them first")
    return notes


def project_name(plan: LaunchPlan) -> str:
    """The compose project, one per profile: files of different profiles do not see each other's orphans."""
    return "servectl-" + re.sub(r"[^a-z0-9_-]", "-", plan.profile.lower()).strip("-_")


def _bind(mount: MountPlan, *, project_dir: str | None) -> dict[str, Any]:
    return {
        "type": "bind",
        "source": _host_path(mount.source, project_dir=project_dir),
        "target": mount.target,
        "read_only": mount.read_only,
        # weights must already be there (an empty folder would fail much later); caches may be created
        "bind": {"create_host_path": not mount.read_only},
    }


def _host_path(path: str, *, project_dir: str | None) -> str:
    placeholder = "${" + PROJECT_DIR_VAR + "}"
    if project_dir is not None and (path == placeholder or path.startswith(placeholder + "/")):
        path = project_dir.rstrip("/") + path[len(placeholder) :]
        path = path if path.startswith(("./", "../", "/")) or path in (".", "..") else "./" + path
    return _DOLLAR_NOT_VAR.sub("$$", path)


def _literal(text: str) -> str:
    """``text`` as compose must see it to pass it on unchanged (no interpolation)."""
    return text.replace("$", "$$")


def _seconds(value: float) -> int:
    return int(value) if value == int(value) else int(value) + 1
