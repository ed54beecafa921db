"""Which GPUs a container asked for, read off its ``docker inspect`` document. Pure.

The one reader of a GPU request: the Docker adapter fills :attr:`ContainerState.gpu_request
<servectl.adapters.docker.values.ContainerState.gpu_request>` with it (preflight, conflicts, swap), and
:mod:`servectl.plan.container_match` and adoption read a hand-started container's GPUs with it, so the two can
never disagree about a container.

Every way Docker offers, first match wins:

* ``HostConfig.DeviceRequests``: ``--gpus`` (driver ``""`` with the ``gpu`` capability, or ``nvidia``: device
  ids, ``Count -1`` for all, a count for the first cards) and CDI (driver ``cdi``, ``nvidia.com/gpu=...``);
* CDI device names given as devices (``--device nvidia.com/gpu=0``, compose ``devices:``; in
  ``HostConfig.CDIDevices`` or ``HostConfig.Devices``);
* ``/dev/nvidiaN`` device nodes in ``HostConfig.Devices``;
* the ``nvidia`` runtime with ``NVIDIA_VISIBLE_DEVICES``: the container's own ``HostConfig.Runtime``, else the
  engine's default runtime (``default_runtime``, from ``docker info``; a CUDA image sets the variable, so on a
  host whose default runtime is ``nvidia`` every such container gets GPUs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

GpuRequestVia = Literal["device-request", "cdi", "device-node", "nvidia-runtime"]

_DEV_NVIDIA = re.compile(r"^/dev/nvidia(\d+)$")
_CDI_GPU = "nvidia.com/gpu="


@dataclass(frozen=True)
class GpuRequest:
    """Which GPUs a container asked for. ``device_ids`` are indices (``"0"``) or UUIDs (``"GPU-..."``)."""

    all_gpus: bool
    device_ids: tuple[str, ...]
    via: GpuRequestVia

    @property
    def ids(self) -> tuple[str, ...]:
        """The GPUs as one list: ``("all",)`` for all of them, else the device ids."""
        return ("all",) if self.all_gpus else self.device_ids

    def covers(self, index: int, uuid: str | None) -> bool:
        """Whether the card with this index/UUID is among the requested ones."""
        if self.all_gpus:
            return True
        for device_id in self.device_ids:
            card = device_id.split(":", 1)[0]  # MIG device "0:1" sits on card 0
            if card == str(index) or (uuid is not None and card.lower() == uuid.lower()):
                return True
        return False


def gpu_request_from_inspect(data: Mapping[str, Any], *, default_runtime: str | None = None) -> GpuRequest | None:
    """Which GPUs a container asked for, from its ``docker inspect`` data; ``None`` for none.

    ``default_runtime``: the engine's default runtime, which applies when the container names none.
    """
    host: Mapping[str, Any] = data.get("HostConfig") or {}
    found = _from_device_requests(host.get("DeviceRequests") or ())
    if found is not None:
        return found
    named = [*(str(d) for d in host.get("CDIDevices") or ()), *_device_paths(host)]
    cdi = _cdi(named)
    if cdi is not None:
        return cdi
    nodes = [m.group(1) for path in _device_paths(host) if (m := _DEV_NVIDIA.match(path))]
    if nodes:
        return GpuRequest(all_gpus=False, device_ids=tuple(nodes), via="device-node")
    if (host.get("Runtime") or default_runtime) == "nvidia":
        visible = _visible_devices(_env(data.get("Config") or {}).get("NVIDIA_VISIBLE_DEVICES", ""))
        if visible is not None:
            return GpuRequest(all_gpus=visible[0], device_ids=visible[1], via="nvidia-runtime")
    return None


def _from_device_requests(requests: Iterable[Mapping[str, Any]]) -> GpuRequest | None:
    for request in requests:
        driver = str(request.get("Driver") or "")
        ids = tuple(str(i) for i in request.get("DeviceIDs") or ())
        capabilities = {str(c) for group in request.get("Capabilities") or () for c in group}
        if driver == "cdi":
            cdi = _cdi(ids)
            if cdi is not None:
                return cdi
            continue
        if driver not in ("", "nvidia") or (driver == "" and "gpu" not in capabilities):
            continue
        count = int(request.get("Count") or 0)
        if ids:
            return GpuRequest(all_gpus=False, device_ids=ids, via="device-request")
        if count < 0:
            return GpuRequest(all_gpus=True, device_ids=(), via="device-request")
        if count > 0:  # Docker hands out the first `count` cards
            return GpuRequest(all_gpus=False, device_ids=tuple(str(i) for i in range(count)), via="device-request")
    return None


def _cdi(names: Iterable[str]) -> GpuRequest | None:
    """The GPUs among CDI device names (``nvidia.com/gpu=0``, ``nvidia.com/gpu=all``)."""
    gpu_ids = tuple(name.split("=", 1)[1] for name in names if name.startswith(_CDI_GPU))
    if not gpu_ids:
        return None
    if "all" in gpu_ids:
        return GpuRequest(all_gpus=True, device_ids=(), via="cdi")
    return GpuRequest(all_gpus=False, device_ids=gpu_ids, via="cdi")


def _device_paths(host: Mapping[str, Any]) -> list[str]:
    return [str(device.get("PathOnHost") or "") for device in host.get("Devices") or ()]


def _env(config: Mapping[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in config.get("Env") or ():
        key, _, value = str(item).partition("=")
        env[key] = value
    return env


def _visible_devices(value: str) -> tuple[bool, tuple[str, ...]] | None:
    """Parse ``NVIDIA_VISIBLE_DEVICES``; ``None`` when it asks for no GPU."""
    text = value.strip()
    if text in ("", "none", "void"):
        return None
    if text == "all":
        return True, ()
    return False, tuple(part.strip() for part in text.split(",") if part.strip())


__all__ = ["GpuRequest", "GpuRequestVia", "gpu_request_from_inspect"]
