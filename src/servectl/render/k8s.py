"""A launch plan as Kubernetes manifests: a Deployment or, across nodes, a LeaderWorkerSet; a Service. Pure.

Single node (``nodes: 1``): a Deployment with one replica and the ``Recreate`` strategy (two copies cannot
share the cards), GPUs as ``nvidia.com/gpu`` limits, ``/dev/shm`` as a memory-backed ``emptyDir``, a startup
probe whose failure budget is the profile's startup timeout, readiness on ``/health``, and a Service.

Multi-node (``nodes: N > 1``): a LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``) of size N with
``RecreateGroupOnPodRestart``. Leader and workers run the plan's argv plus ``--nnodes N``, ``--node-rank``
from the LWS worker index and ``--dist-init-addr`` from the leader address, as the SGLang and LWS examples
do. Only the leader serves HTTP, has probes and is selected by the Service.

From the plan: ``docker run`` ``command`` becomes the container's ``args`` (the image entrypoint still runs),
labels become annotations (their values are free text, which label values are not), generated files become a
ConfigMap, host paths become ``hostPath`` volumes (the data must be on every node that may run the pod), and
secrets are references to one Secret that is created outside (never with a value here): the API key is
mounted from it as the file the plan's key wrapper reads, environment variables the plan passes through
from servectl's environment come from it by ``secretKeyRef``.

Host paths that depend on the machine are written as placeholders for ``envsubst``: ``~`` as ``${HOME}``,
a profile's ``${VAR}`` as itself, paths inside the profiles' project folder as ``${SERVECTL_PROJECT_DIR}``.
"""

from __future__ import annotations

import re
from typing import Any

from servectl.errors import RenderUnsupported
from servectl.plan.compile import LaunchPlan
from servectl.profile.models import Profile
from servectl.render.common import (
    DIST_INIT_PORT,
    HEALTH_PATH,
    PROBE_PERIOD_S,
    PROBE_TIMEOUT_S,
    Listen,
    dns_label,
    listen_of,
    split_mounts,
    startup_probe_failures,
    variables_in,
)

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
API_KEY_SECRET_KEY = "api-key"
ADMIN_KEY_SECRET_KEY = "admin-api-key"
CONTAINER_NAME = "sglang"
_SHM_UNITS = {"b": "", "k": "Ki", "m": "Mi", "g": "Gi"}


def render_k8s(plan: LaunchPlan, profile: Profile) -> list[dict[str, Any]]:
    """The manifests that run ``plan`` on Kubernetes, in apply order.

    Args:
        plan: the compiled launch plan.
        profile: the profile the plan came from (only ``nodes`` is read).

    Returns:
        ``[ConfigMap?, Deployment, Service]``, or ``[ConfigMap?, LeaderWorkerSet, Service]`` when
        ``profile.nodes > 1``. The ConfigMap is there when the plan generates files.

    Raises:
        RenderUnsupported: the engine binds loopback on the host network, which no Service can reach.
    """
    spec = plan.docker
    listen = listen_of(plan)
    host_network = spec.network_mode == "host"
    if host_network and listen.binds_loopback:
        raise RenderUnsupported(
            f"{plan.profile}: the engine binds {listen.bind_host} on the host network (serve.network: host), "
            f"which no Kubernetes Service can reach; use serve.network: bridge to render it for Kubernetes"
        )
    name = object_name(plan)
    labels = {
        "app.kubernetes.io/name": "sglang",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/managed-by": "servectl",
    }
    volumes, mounts, config_map = _storage(plan, name, labels)
    container = _container(plan, mounts)
    pod: dict[str, Any] = {
        "terminationGracePeriodSeconds": spec.stop_timeout_s,
        # docker run --init: the pause container becomes PID 1 and reaps the engine's child processes
        "shareProcessNamespace": spec.init,
    }
    if host_network:
        pod["hostNetwork"] = True
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"
    pod["volumes"] = volumes
    serving = _serving(plan, listen, host_network)
    if profile.nodes <= 1:
        workload = _deployment(name, labels, dict(spec.labels), pod, {**container, **serving})
        selector = {"app.kubernetes.io/instance": name}
    else:
        workload = _leader_worker_set(plan, profile.nodes, name, labels, pod, container, serving)
        selector = {"app.kubernetes.io/instance": name, "role": "leader"}
    service_port = {"name": "http", "port": listen.port, "targetPort": "http", "protocol": "TCP"}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"type": "ClusterIP", "selector": selector, "ports": [service_port]},
    }
    return [*([config_map] if config_map is not None else []), workload, service]


def _storage(
    plan: LaunchPlan, name: str, labels: dict[str, str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any] | None]:
    """The pod's volumes, the container's mounts, and the ConfigMap of the plan's generated files (if any)."""
    parts = split_mounts(plan)
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": _shm(plan.docker.shm_size)}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    used = {"dshm"}
    for mount in parts.host:
        volume = _volume_name(mount.target, used)
        volumes.append({"name": volume, "hostPath": {"path": host_path(mount.source)}})
        mounts.append({"name": volume, "mountPath": mount.target, "readOnly": mount.read_only})
    config_map: dict[str, Any] | None = None
    if parts.generated:
        data = {}
        for generated, mount in parts.generated:
            key = generated.host_path.rsplit("/", 1)[-1]
            data[key] = generated.content
            mounts.append({"name": "servectl-files", "mountPath": mount.target, "subPath": key, "readOnly": True})
        volumes.append({"name": "servectl-files", "configMap": {"name": f"{name}-files"}})
        config_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-files", "labels": labels},
            "data": data,
        }
    for key, key_mount in ((API_KEY_SECRET_KEY, parts.api_key), (ADMIN_KEY_SECRET_KEY, parts.admin_key)):
        if key_mount is None:
            continue
        items = [{"key": key, "path": key}]
        volumes.append({"name": key, "secret": {"secretName": secret_name(plan), "items": items, "defaultMode": 0o400}})
        mounts.append({"name": key, "mountPath": key_mount.target, "subPath": key, "readOnly": True})
    return volumes, mounts, config_map


def _container(plan: LaunchPlan, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """The engine's container: image, argv, environment (unset values from the Secret), GPUs, mounts."""
    spec = plan.docker
    env: list[dict[str, Any]] = []
    for env_name, value in spec.environment:
        if value is None:
            ref = {"secretKeyRef": {"name": secret_name(plan), "key": env_name}}
            env.append({"name": env_name, "valueFrom": ref})
        else:
            env.append({"name": env_name, "value": value})
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "args": [_literal(token) for token in spec.command],
    }
    if env:
        container["env"] = env
    if spec.device_ids:
        container["resources"] = {"limits": {"nvidia.com/gpu": len(spec.device_ids)}}
    container["volumeMounts"] = mounts
    return container


def _deployment(
    name: str, labels: dict[str, str], annotations: dict[str, str], pod: dict[str, Any], serving: dict[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # two copies cannot share the cards
            "selector": {"matchLabels": {"app.kubernetes.io/instance": name}},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {**pod, "containers": [_ordered(serving)]},
            },
        },
    }


def _leader_worker_set(
    plan: LaunchPlan,
    nodes: int,
    name: str,
    labels: dict[str, str],
    pod: dict[str, Any],
    container: dict[str, Any],
    serving: dict[str, Any],
) -> dict[str, Any]:
    """One engine over ``nodes`` pods: the leader serves, the workers join it (LeaderWorkerSet)."""
    annotations = dict(plan.docker.labels)
    port = dist_init_port(plan)
    leader = {**_multinode(container, nodes, port), **serving}
    worker = _multinode(container, nodes, port)
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": {**labels, "role": "leader"}, "annotations": annotations},
                    "spec": {**pod, "containers": [_ordered(leader)]},
                },
                "workerTemplate": {
                    "metadata": {"labels": {**labels, "role": "worker"}, "annotations": annotations},
                    "spec": {**pod, "containers": [_ordered(worker)]},
                },
            },
        },
    }


def k8s_notes(plan: LaunchPlan, profile: Profile, manifests: list[dict[str, Any]]) -> list[str]:
    """Header lines: the Secret to create, placeholders to fill, what a pod spec cannot express."""
    notes: list[str] = []
    spec = plan.docker
    secret_args = []
    for key, ref in ((API_KEY_SECRET_KEY, plan.secret), (ADMIN_KEY_SECRET_KEY, plan.admin_secret)):
        if ref is None:
            continue
        if ref.source == "env":
            secret_args.append(f'--from-literal={key}="${ref.name}"')
        else:
            secret_args.append(f"--from-file={key}={ref.name}")
    secret_args += [f'--from-literal={n}="${n}"' for n, value in spec.environment if value is None]
    if secret_args:
        notes.append(
            "create the Secret first (values from your shell; never written here): "
            f"kubectl create secret generic {secret_name(plan)} " + " ".join(secret_args)
        )
    paths = [v["hostPath"]["path"] for m in manifests for v in _volumes(m) if "hostPath" in v]
    variables = sorted({var for p in paths for var in variables_in(p)})
    if variables:
        listed = " ".join(f"${{{v}}}" for v in variables)
        notes.append(f"host paths hold placeholders; fill them in: envsubst '{listed}' < FILE | kubectl apply -f -")
    if paths:
        notes.append("hostPath volumes: the weights and files must be at these paths on every node")
    if spec.device_ids:
        notes.append(
            f"GPUs: nvidia.com/gpu {len(spec.device_ids)} per pod; the scheduler picks the cards "
            f"(docker device ids {','.join(spec.device_ids)} do not carry over)"
        )
    dropped = [f"ulimit {n}={s}" + ("" if s == h else f":{h}") for n, s, h in spec.ulimits]
    if spec.ipc_mode == "host":
        dropped.append("ipc=host (a memory-backed /dev/shm stands in)")
    if dropped:
        notes.append("not expressible in a pod spec (the node runtime's defaults apply): " + ", ".join(dropped))
    if profile.nodes > 1:
        notes.append(
            f"needs the LeaderWorkerSet controller ({LWS_API_VERSION}); leader and workers add --nnodes "
            f"{profile.nodes}, --node-rank and --dist-init-addr (leader port {dist_init_port(plan)})"
        )
    return notes


def object_name(plan: LaunchPlan) -> str:
    """Kubernetes name of the service's objects: the container name, as a DNS label."""
    return dns_label(plan.docker.name, limit=52)  # LWS and StatefulSet pod names append suffixes


def secret_name(plan: LaunchPlan) -> str:
    """The Secret (created outside servectl) holding the API key and passed-through variables."""
    return f"{object_name(plan)}-secrets"


def dist_init_port(plan: LaunchPlan) -> int:
    """The leader's rendezvous port: 20000, or the next one when the engine serves on 20000."""
    return DIST_INIT_PORT + 1 if listen_of(plan).port == DIST_INIT_PORT else DIST_INIT_PORT


def host_path(path: str) -> str:
    """A plan host path as a node path: ``~`` becomes ``${HOME}``, an ``envsubst`` placeholder like the
    ``${VAR}`` (and ``${SERVECTL_PROJECT_DIR}``) references a portable plan already holds."""
    if path == "~" or path.startswith("~/"):
        return "${HOME}" + path[1:]
    return path


def _serving(plan: LaunchPlan, listen: Listen, host_network: bool) -> dict[str, Any]:
    """Port and probes of the pod that serves HTTP."""
    http_get: dict[str, Any] = {"path": HEALTH_PATH, "port": "http"}
    if host_network and listen.bind_host not in ("0.0.0.0", "::", ""):
        http_get["host"] = listen.bind_host
    probe = {"httpGet": http_get, "periodSeconds": PROBE_PERIOD_S, "timeoutSeconds": PROBE_TIMEOUT_S}
    return {
        "ports": [{"name": "http", "containerPort": listen.port, "protocol": "TCP"}],
        "startupProbe": {**probe, "failureThreshold": startup_probe_failures(plan)},
        "readinessProbe": {**probe, "failureThreshold": 3},
    }


def _multinode(container: dict[str, Any], nodes: int, port: int) -> dict[str, Any]:
    """The container with the flags that join it to the group: same argv on leader and workers."""
    index_env = {
        "name": "LWS_WORKER_INDEX",
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{LWS_WORKER_INDEX_LABEL}']"}},
    }
    return {
        **container,
        "args": [
            *container["args"],
            "--nnodes",
            str(nodes),
            "--node-rank",
            "$(LWS_WORKER_INDEX)",
            "--dist-init-addr",
            f"$(LWS_LEADER_ADDRESS):{port}",
        ],
        "env": [*container.get("env", []), index_env],
    }


def _ordered(container: dict[str, Any]) -> dict[str, Any]:
    order = [
        "name",
        "image",
        "args",
        "env",
        "ports",
        "resources",
        "volumeMounts",
        "startupProbe",
        "readinessProbe",
    ]
    return {key: container[key] for key in order if key in container}


def _shm(size: str | None) -> dict[str, Any]:
    empty_dir: dict[str, Any] = {"medium": "Memory"}
    if size:
        match = re.fullmatch(r"(\d+)([bkmgBKMG]?)", size)
        if match is None:
            raise ValueError(f"shm size {size!r} is not <number>[bkmg]")
        empty_dir["sizeLimit"] = match.group(1) + _SHM_UNITS[(match.group(2) or "b").lower()]
    return empty_dir


def _volume_name(target: str, used: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", target.lower()).strip("-")[:50] or "host"
    name, counter = base, 2
    while name in used:
        name, counter = f"{base}-{counter}", counter + 1
    used.add(name)
    return name


def _volumes(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    spec = manifest.get("spec", {})
    if manifest.get("kind") == "Deployment":
        return list(spec["template"]["spec"].get("volumes", []))
    if manifest.get("kind") == "LeaderWorkerSet":
        return list(spec["leaderWorkerTemplate"]["leaderTemplate"]["spec"].get("volumes", []))
    return []


def _literal(token: str) -> str:
    """Kubernetes expands ``$(VAR)`` in args; ``$$`` keeps a plan token unchanged."""
    return token.replace("$(", "$$(")
