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

__all__ = [*_EXPORTS]

# The one list of public names is _EXPORTS; __all__ is derived from it, and the block below says the same
# to type checkers (`X as X`: an explicit re-export). tests/unit/test_exports.py fails when it drifts.
if TYPE_CHECKING:
    from servectl.adapters.docker.protocol import DockerEngine as DockerEngine
    from servectl.adapters.docker.sdk import SDK_FIX as SDK_FIX
    from servectl.adapters.docker.sdk import UNREACHABLE_FIX as UNREACHABLE_FIX
    from servectl.adapters.docker.sdk import DockerSdkEngine as DockerSdkEngine
    from servectl.adapters.docker.sdk import unreachable_fix as unreachable_fix
    from servectl.adapters.docker.translate import CreateArgs as CreateArgs
    from servectl.adapters.docker.translate import container_state_from_inspect as container_state_from_inspect
    from servectl.adapters.docker.translate import create_container_args as create_container_args
    from servectl.adapters.docker.translate import engine_info_from_info as engine_info_from_info
    from servectl.adapters.docker.translate import image_info_from_inspect as image_info_from_inspect
    from servectl.adapters.docker.translate import published_ports_from_inspect as published_ports_from_inspect
    from servectl.adapters.docker.translate import run_kwargs as run_kwargs
    from servectl.adapters.docker.translate import split_log_chunks as split_log_chunks
    from servectl.adapters.docker.values import COMPOSE_CONFIG_FILES_LABEL as COMPOSE_CONFIG_FILES_LABEL
    from servectl.adapters.docker.values import COMPOSE_SERVICE_LABEL as COMPOSE_SERVICE_LABEL
    from servectl.adapters.docker.values import LABEL_ONESHOT as LABEL_ONESHOT
    from servectl.adapters.docker.values import ContainerState as ContainerState
    from servectl.adapters.docker.values import EngineInfo as EngineInfo
    from servectl.adapters.docker.values import ImageInfo as ImageInfo
    from servectl.adapters.docker.values import LogLines as LogLines
    from servectl.adapters.docker.values import OneShotResult as OneShotResult
    from servectl.adapters.docker.values import PublishedPort as PublishedPort
    from servectl.plan.gpu_request import GpuRequest as GpuRequest
    from servectl.plan.gpu_request import GpuRequestVia as GpuRequestVia
    from servectl.plan.gpu_request import gpu_request_from_inspect as gpu_request_from_inspect


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
