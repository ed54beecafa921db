"""The Docker engine behind one small interface: what servectl reads from it and what it does with it.

:class:`DockerEngine` (:mod:`.protocol`) is the one Protocol the runtime, the health gate, swap, conflicts and
preflight take. It speaks in plain values (:mod:`.values`: :class:`ContainerState`, :class:`ImageInfo`,
:class:`EngineInfo`, log lines as ``str``) and never leaks SDK objects. :class:`DockerSdkEngine` (:mod:`.sdk`)
is the real one (the Docker SDK is imported lazily, so ``servectl --help`` and ``up --dry-run`` never load it);
``servectl.testing.docker.FakeDockerEngine`` is the fake for unit tests. The translation between the two
(:mod:`.translate`: run arguments out, inspect documents in) is pure and kept apart from the SDK calls.

This package face re-exports those names and loads each module on first use; the modules import one another
directly, never through this face.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servectl.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "COMPOSE_CONFIG_FILES_LABEL": "servectl.adapters.docker.values",
    "COMPOSE_SERVICE_LABEL": "servectl.adapters.docker.values",
    "ContainerState": "servectl.adapters.docker.values",
    "CreateArgs": "servectl.adapters.docker.translate",
    "DockerEngine": "servectl.adapters.docker.protocol",
    "DockerSdkEngine": "servectl.adapters.docker.sdk",
    "EngineInfo": "servectl.adapters.docker.values",
    "GpuRequest": "servectl.plan.gpu_request",
    "GpuRequestVia": "servectl.plan.gpu_request",
    "ImageInfo": "servectl.adapters.docker.values",
    "LABEL_ONESHOT": "servectl.adapters.docker.values",
    "LogLines": "servectl.adapters.docker.values",
    "OneShotResult": "servectl.adapters.docker.values",
    "PublishedPort": "servectl.adapters.docker.values",
    "SDK_FIX": "servectl.adapters.docker.sdk",
    "UNREACHABLE_FIX": "servectl.adapters.docker.sdk",
    "container_state_from_inspect": "servectl.adapters.docker.translate",
    "create_container_args": "servectl.adapters.docker.translate",
    "engine_info_from_info": "servectl.adapters.docker.translate",
    "gpu_request_from_inspect": "servectl.plan.gpu_request",
    "image_info_from_inspect": "servectl.adapters.docker.translate",
    "published_ports_from_inspect": "servectl.adapters.docker.translate",
    "run_kwargs": "servectl.adapters.docker.translate",
    "split_log_chunks": "servectl.adapters.docker.translate",
    "unreachable_fix": "servectl.adapters.docker.sdk",
}

__all__ = [
    "COMPOSE_CONFIG_FILES_LABEL",
    "COMPOSE_SERVICE_LABEL",
    "LABEL_ONESHOT",
    "SDK_FIX",
    "UNREACHABLE_FIX",
    "ContainerState",
    "CreateArgs",
    "DockerEngine",
    "DockerSdkEngine",
    "EngineInfo",
    "GpuRequest",
    "GpuRequestVia",
    "ImageInfo",
    "LogLines",
    "OneShotResult",
    "PublishedPort",
    "container_state_from_inspect",
    "create_container_args",
    "engine_info_from_info",
    "gpu_request_from_inspect",
    "image_info_from_inspect",
    "published_ports_from_inspect",
    "run_kwargs",
    "split_log_chunks",
    "unreachable_fix",
]

if TYPE_CHECKING:
    from servectl.adapters.docker.protocol import (
        DockerEngine,
    )
    from servectl.adapters.docker.sdk import (
        SDK_FIX,
        UNREACHABLE_FIX,
        DockerSdkEngine,
        unreachable_fix,
    )
    from servectl.adapters.docker.translate import (
        CreateArgs,
        container_state_from_inspect,
        create_container_args,
        engine_info_from_info,
        image_info_from_inspect,
        published_ports_from_inspect,
        run_kwargs,
        split_log_chunks,
    )
    from servectl.adapters.docker.values import (
        COMPOSE_CONFIG_FILES_LABEL,
        COMPOSE_SERVICE_LABEL,
        LABEL_ONESHOT,
        ContainerState,
        EngineInfo,
        ImageInfo,
        LogLines,
        OneShotResult,
        PublishedPort,
    )
    from servectl.plan.gpu_request import GpuRequest, GpuRequestVia, gpu_request_from_inspect


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
