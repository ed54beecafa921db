"""Compose -> inspect: the ``docker inspect`` document ``docker compose up`` would create for a service. Pure.

Adoption then reads it like any container's (:func:`servectl.plan.adopt.container.adopt_container`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from servectl.plan.adopt.draft import AdoptError
from servectl.plan.container_match import DOCKER_DEFAULT_SHM_BYTES


def compose_service_inspect(
    config: Mapping[str, Any],
    service: str,
    *,
    image: Mapping[str, Any] | None = None,
    volume_folders: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``docker inspect`` document of the container ``docker compose up`` would create for ``service``. Pure.

    Args:
        config: ``docker compose config --format json`` of the compose file (paths already absolute).
        service: the service name.
        image: the service image's inspect (its entrypoint applies when the service sets none).
        volume_folders: named volume (its full name, e.g. ``proj_cache``) -> host folder (its Mountpoint).

    Raises:
        AdoptError: no such service in the file.
    """
    services = config.get("services") or {}
    if service not in services:
        known = ", ".join(sorted(services)) or "none"
        raise AdoptError(f"the compose file has no service {service!r} (services: {known})")
    svc: Mapping[str, Any] = services[service]
    project = str(config.get("name") or "")
    image_config: Mapping[str, Any] = (image or {}).get("Config") or {}
    restart = str(svc.get("restart") or "no")
    policy, _, retries = restart.partition(":")
    network = str(svc.get("network_mode") or f"{project}_default")
    entrypoint = svc.get("entrypoint")
    command = svc.get("command")
    name = str(svc.get("container_name") or f"{project}-{service}-1")
    grace = svc.get("stop_grace_period")
    return {
        "Id": "",
        "Name": "/" + name,
        "Config": {
            "Image": str(svc.get("image") or ""),
            "Entrypoint": _argv(entrypoint) if entrypoint else image_config.get("Entrypoint"),
            "Cmd": _argv(command) if command else image_config.get("Cmd"),
            "Env": _env(svc, image_config),
            "Labels": {**dict(image_config.get("Labels") or {}), **dict(svc.get("labels") or {})},
            "StopTimeout": None if grace is None else _duration_s(str(grace)),
        },
        "HostConfig": {
            "NetworkMode": network,
            "PortBindings": _port_bindings(svc) if network != "host" else {},
            "RestartPolicy": {"Name": policy, "MaximumRetryCount": int(retries or 0)},
            "IpcMode": str(svc.get("ipc") or "private"),
            "ShmSize": int(svc.get("shm_size") or DOCKER_DEFAULT_SHM_BYTES),
            "Runtime": svc.get("runtime") or "runc",
            "DeviceRequests": _device_requests(svc) or None,
            "Devices": [
                {"PathOnHost": str(d.get("source") if isinstance(d, Mapping) else str(d).split(":", 1)[0])}
                for d in svc.get("devices") or ()
            ],
            "Ulimits": _ulimits(svc),
            "Init": svc.get("init"),
            "Privileged": svc.get("privileged"),
            "CapAdd": svc.get("cap_add"),
        },
        "Mounts": _mounts(svc, project, config.get("volumes") or {}, volume_folders or {}),
    }


def _mounts(
    svc: Mapping[str, Any], project: str, top_volumes: Mapping[str, Any], folders: Mapping[str, str]
) -> list[dict[str, Any]]:
    """``Mounts`` from the service's ``volumes``: binds as they are, named volumes by their host folder."""
    mounts: list[dict[str, Any]] = []
    for v in svc.get("volumes") or ():
        kind = str(v.get("type") or "bind")
        read_only = bool(v.get("read_only"))
        if kind == "volume":
            full = str((top_volumes.get(v.get("source")) or {}).get("name") or f"{project}_{v.get('source')}")
            source = folders.get(full) or f"/var/lib/docker/volumes/{full}/_data"
            mounts.append(
                {"Type": "volume", "Name": full, "Source": source, "Destination": v.get("target"), "RW": not read_only}
            )
        else:
            mounts.append(
                {"Type": kind, "Source": v.get("source"), "Destination": v.get("target"), "RW": not read_only}
            )
    return mounts


def _port_bindings(svc: Mapping[str, Any]) -> dict[str, list[dict[str, str]]]:
    """``HostConfig.PortBindings`` from the service's ``ports``."""
    ports: dict[str, list[dict[str, str]]] = {}
    for p in svc.get("ports") or ():
        key = f"{p.get('target')}/{p.get('protocol') or 'tcp'}"
        ports.setdefault(key, []).append(
            {"HostIp": str(p.get("host_ip") or ""), "HostPort": str(p.get("published") or "")}
        )
    return ports


def _device_requests(svc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``HostConfig.DeviceRequests`` from ``deploy.resources.reservations.devices``."""
    requests = []
    for d in ((((svc.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices")) or ():
        count = d.get("count")
        requests.append(
            {
                "Driver": str(d.get("driver") or ""),
                "Count": -1 if count == "all" else int(count or 0),
                "DeviceIDs": [str(i) for i in d.get("device_ids") or ()],
                "Capabilities": [list(d.get("capabilities") or ())],
            }
        )
    return requests


def _env(svc: Mapping[str, Any], image_config: Mapping[str, Any]) -> list[str]:
    """``Config.Env``: the service's environment, then the image's variables it does not set."""
    own = svc.get("environment") or {}
    env = [f"{k}={v}" for k, v in own.items() if v is not None]
    return env + [e for e in image_config.get("Env") or () if e.split("=", 1)[0] not in own]


def _ulimits(svc: Mapping[str, Any]) -> list[dict[str, Any]]:
    ulimits = []
    for limit, value in (svc.get("ulimits") or {}).items():
        soft, hard = (value, value) if isinstance(value, int) else (value.get("soft"), value.get("hard"))
        ulimits.append({"Name": limit, "Soft": int(soft), "Hard": int(hard)})
    return ulimits


def _argv(value: Any) -> list[str]:
    """A compose command or entrypoint (a list, or a string in shell form) as an argv."""
    return shlex.split(value) if isinstance(value, str) else [str(t) for t in value]


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|ns)")


def _duration_s(text: str) -> int:
    """A compose duration (``1m30s``, ``45s``) in whole seconds."""
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
    return int(sum(float(n) * scale[u] for n, u in _DURATION.findall(text)))


__all__ = ["compose_service_inspect"]
