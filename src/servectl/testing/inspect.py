"""``docker inspect`` documents for unit tests, shaped as Docker 20.10+ writes them.

:func:`container_inspect` builds a container's document from ``docker run``-like arguments and
:func:`image_inspect` its image's, so tests of :mod:`servectl.plan.adopt` and
:mod:`servectl.plan.container_match` need no engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

STANDIN_IMAGE_ENV = ("PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8")


def image_inspect(
    *,
    image_id: str = "sha256:" + "5b" * 32,
    tags: Sequence[str] = ("lmsysorg/sglang:v0.5.23",),
    repo_digests: Sequence[str] = ("lmsysorg/sglang@sha256:" + "d1" * 32,),
    env: Sequence[str] = STANDIN_IMAGE_ENV,
    labels: Mapping[str, str] | None = None,
    entrypoint: Sequence[str] | None = None,
) -> dict[str, Any]:
    """An image's ``docker image inspect`` document."""
    return {
        "Id": image_id,
        "RepoTags": list(tags),
        "RepoDigests": list(repo_digests),
        "Config": {"Env": list(env), "Labels": dict(labels or {}), "Entrypoint": entrypoint, "Cmd": None},
    }


def container_inspect(
    command: Sequence[str],
    *,
    name: str = "sglang-hand",
    container_id: str = "c0ffee" + "0" * 58,
    image: str = "lmsysorg/sglang:v0.5.23",
    image_id: str = "sha256:" + "5b" * 32,
    entrypoint: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    image_env: Sequence[str] = STANDIN_IMAGE_ENV,
    labels: Mapping[str, str] | None = None,
    binds: Sequence[tuple[str, str, bool]] = (),
    volumes: Sequence[tuple[str, str, str]] = (),
    network: str = "default",
    ports: Mapping[int, tuple[str, int]] | None = None,
    device_requests: Sequence[Mapping[str, Any]] | None = None,
    devices: Sequence[str] = (),
    runtime: str = "runc",
    ipc: str = "private",
    shm_bytes: int = 64 * 2**20,
    ulimits: Sequence[tuple[str, int, int]] = (),
    restart: tuple[str, int] = ("no", 0),
    init: bool | None = None,
    stop_timeout: int | None = None,
    status: str = "running",
) -> dict[str, Any]:
    """A container's ``docker inspect`` document from ``docker run``-like arguments.

    ``binds`` are (host, container, read-only); ``volumes`` (name, host folder, container); ``ports`` maps the
    container port to (host address, host port).
    """
    mounts: list[dict[str, Any]] = [
        {"Type": "bind", "Source": src, "Destination": dst, "RW": not ro, "Mode": "ro" if ro else ""}
        for src, dst, ro in binds
    ]
    mounts += [
        {"Type": "volume", "Name": vol, "Source": src, "Destination": dst, "RW": True, "Driver": "local"}
        for vol, src, dst in volumes
    ]
    port_bindings = {
        f"{cport}/tcp": [{"HostIp": ip, "HostPort": str(hport)}] for cport, (ip, hport) in (ports or {}).items()
    }
    return {
        "Id": container_id,
        "Name": "/" + name,
        "Image": image_id,
        "State": {"Status": status, "Running": status == "running", "Pid": 4242 if status == "running" else 0},
        "Config": {
            "Image": image,
            "Entrypoint": list(entrypoint) if entrypoint is not None else None,
            "Cmd": list(command),
            "Env": [*(f"{k}={v}" for k, v in (env or {}).items()), *image_env],
            "Labels": dict(labels or {}),
            "StopTimeout": stop_timeout,
        },
        "HostConfig": {
            "Binds": [f"{s}:{d}" + (":ro" if ro else "") for s, d, ro in binds],
            "NetworkMode": network,
            "PortBindings": port_bindings if network != "host" else {},
            "RestartPolicy": {"Name": restart[0], "MaximumRetryCount": restart[1]},
            "IpcMode": ipc,
            "ShmSize": shm_bytes,
            "Runtime": runtime,
            "DeviceRequests": list(device_requests) if device_requests is not None else None,
            "Devices": [{"PathOnHost": d, "PathInContainer": d, "CgroupPermissions": "rwm"} for d in devices],
            "Ulimits": [{"Name": n, "Soft": s, "Hard": h} for n, s, h in ulimits],
            "Init": init,
        },
        "Mounts": mounts,
        "NetworkSettings": {"Ports": {}},
    }
