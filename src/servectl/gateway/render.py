"""The gateway beside a rendered service (``servectl render NAME --to compose|k8s --gateway``). Pure.

Composes :mod:`servectl.render`'s output (an :data:`~servectl.render.files.Extension`): the rendered file
gets a gateway that runs ``servectl gateway run`` from the locally built gateway image, with a gateway file
whose ``endpoints:`` name the engine by its compose service name / Kubernetes Service (no container
discovery, no Docker socket). Its aliases are those of the user's gateway file that list the profile (the
profile's own name when none does); limits, auth and the swap drain/hold are the file's.

- compose: a ``gateway`` service; the gateway file as a ``configs`` entry; the key file as the secret
  ``servectl-gateway-keys``, the file ``$SERVECTL_GATEWAY_KEYS`` names (never rendered); the engine's own API key,
  when it has one, the engine's secret mounted into the gateway too; a named volume for the state folder.
- k8s: a ConfigMap (the gateway file), a Deployment and a Service ``<name>-gateway``; the key file from the
  Secret ``servectl-gateway-keys`` (created outside servectl), the engine key from the engine's Secret.
"""

from __future__ import annotations

from typing import Any

import yaml

from servectl.gateway.config import ANY_PROFILE, GatewayConfig
from servectl.gateway.container import CONFIG_IN_CONTAINER as CONFIG_FILE_IN_CONTAINER
from servectl.plan.compile import LaunchPlan
from servectl.render.common import flag_value, listen_of, split_mounts
from servectl.render.files import Extension, Target

STATE_IN_CONTAINER = "/var/lib/servectl"
KEYS_DIR_IN_CONTAINER = "/etc/servectl/keys"
KEYS_IN_CONTAINER = f"{KEYS_DIR_IN_CONTAINER}/keys.json"
ENGINE_KEY_DIR_IN_CONTAINER = "/etc/servectl/engine"
ENGINE_KEY_IN_CONTAINER = f"{ENGINE_KEY_DIR_IN_CONTAINER}/api-key"
KEYS_SECRET = "servectl-gateway-keys"
KEYS_VARIABLE = "SERVECTL_GATEWAY_KEYS"
COMPOSE_SERVICE = "gateway"


def gateway_extension(config: GatewayConfig, *, image: str) -> Extension:
    """What ``render --gateway`` adds: the gateway of ``config`` (the user's file) from image ``image``."""

    def extend(target: Target, plan: LaunchPlan, document: Any) -> list[str]:
        if target == "compose":
            return add_to_compose(document, plan, config, image=image)
        return add_to_k8s(document, plan, config, image=image)

    return extend


def rendered_config(
    plan: LaunchPlan, config: GatewayConfig, *, url: str, engine_key: bool, host_network: bool = False
) -> dict[str, Any]:
    """The gateway file that goes into the rendered file: ``config``'s aliases of this profile and its
    limits, listening on all addresses of its container (on the host network: ``config``'s address),
    routing to the engine at ``url``."""
    profile = plan.profile
    aliases = {
        alias: [profile]
        for alias, profiles in sorted((config.aliases or {}).items())
        if profile in profiles or ANY_PROFILE in profiles
    } or {profile: [profile]}
    endpoint: dict[str, Any] = {"url": url}
    served = flag_value(plan.engine_argv, "--served-model-name")
    if served:
        endpoint["served_model_name"] = served
    if engine_key:
        endpoint["api_key_file"] = ENGINE_KEY_IN_CONTAINER
    data: dict[str, Any] = {
        "listen": config.listen if host_network else f"0.0.0.0:{config.port}",
        "aliases": aliases,
        "auth": config.auth,
        "response_model": config.response_model,
        "endpoints": {profile: endpoint},
        "limits": config.limits.model_dump(),
        "swap": {"drain_s": config.swap.drain_s, "hold_s": config.swap.hold_s},
        "upstream": config.upstream.model_dump(exclude_none=True),
    }
    if config.auth == "keys":
        data["keys_file"] = KEYS_IN_CONTAINER
    GatewayConfig.model_validate(data)  # what we write, the gateway must read
    return data


def config_text(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def _has_engine_key(plan: LaunchPlan) -> bool:
    return plan.secret is not None and split_mounts(plan).api_key is not None


def _healthcheck_argv(port: int) -> list[str]:
    code = f"import urllib.request as u; u.urlopen('http://127.0.0.1:{port}/healthz', timeout=5)"
    return ["python3", "-c", code]


def add_to_compose(document: dict[str, Any], plan: LaunchPlan, config: GatewayConfig, *, image: str) -> list[str]:
    """Add the ``gateway`` service (and its config, secrets and volume) to a rendered compose file."""
    from servectl.render.compose import API_KEY_SECRET

    engine = document["services"][plan.profile]
    listen = listen_of(plan)
    host_network = engine.get("network_mode") == "host"
    host = listen.probe_host if host_network else plan.profile  # the compose service name resolves in its network
    engine_key = _has_engine_key(plan)
    url = f"http://{host}:{listen.port}"
    data = rendered_config(plan, config, url=url, engine_key=engine_key, host_network=host_network)
    config_name = "servectl-gateway-config"
    service: dict[str, Any] = {
        "image": image,
        "command": ["gateway", "run", "--config", CONFIG_FILE_IN_CONTAINER],
        "environment": {"SERVECTL_HOME": STATE_IN_CONTAINER},
        "configs": [{"source": config_name, "target": CONFIG_FILE_IN_CONTAINER}],
        "volumes": [{"type": "volume", "source": "servectl-gateway-state", "target": STATE_IN_CONTAINER}],
        "depends_on": {plan.profile: {"condition": "service_healthy"}},
        "init": True,
        "restart": "unless-stopped",
        "stop_grace_period": f"{int(config.swap.drain_s) + 5}s",
        "healthcheck": {"test": ["CMD", *_healthcheck_argv(config.port)], "interval": "10s", "timeout": "5s"},
    }
    if host_network:
        service["network_mode"] = "host"
    else:
        service["ports"] = [
            {"target": config.port, "published": str(config.port), "host_ip": config.host, "protocol": "tcp"}
        ]
    secrets = []
    if config.auth == "keys":
        document.setdefault("secrets", {})[KEYS_SECRET] = {"file": "${" + KEYS_VARIABLE + "}"}
        secrets.append({"source": KEYS_SECRET, "target": KEYS_IN_CONTAINER})
    if engine_key:
        secrets.append({"source": API_KEY_SECRET, "target": ENGINE_KEY_IN_CONTAINER})
    if secrets:
        service["secrets"] = secrets
    document.setdefault("configs", {})[config_name] = {"content": config_text(data).replace("$", "$$")}
    document["services"][COMPOSE_SERVICE] = service
    document.setdefault("volumes", {})["servectl-gateway-state"] = {}
    notes = [
        f"gateway: image {image} is built locally (servectl gateway up builds it); "
        f"clients use http://{config.host}:{config.port}/v1 with aliases {', '.join(data['aliases'])}"
    ]
    if config.auth == "keys":
        notes.append(
            f"gateway keys: compose mounts the key file named by ${KEYS_VARIABLE} "
            f"(export {KEYS_VARIABLE}=<state>/gateway/keys.json; servectl gateway keys create writes it)"
        )
    return notes


def add_to_k8s(manifests: list[dict[str, Any]], plan: LaunchPlan, config: GatewayConfig, *, image: str) -> list[str]:
    """Add the gateway's ConfigMap, Deployment and Service to rendered Kubernetes manifests."""
    from servectl.render.k8s import object_name

    engine = object_name(plan)
    name = f"{engine}-gateway"[:63].rstrip("-")
    engine_key = _has_engine_key(plan)
    url = f"http://{engine}:{listen_of(plan).port}"  # the engine's Service
    data = rendered_config(plan, config, url=url, engine_key=engine_key)
    labels = {
        "app.kubernetes.io/name": "servectl-gateway",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/managed-by": "servectl",
    }
    container, volumes = _k8s_container(plan, config, name, image=image, engine_key=engine_key)
    selector = {"app.kubernetes.io/instance": name}
    manifests += [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels},
            "data": {"gateway.yaml": config_text(data)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "terminationGracePeriodSeconds": int(config.swap.drain_s) + 5,
                        "containers": [container],
                        "volumes": volumes,
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "type": "ClusterIP",
                "selector": selector,
                "ports": [{"name": "http", "port": config.port, "targetPort": "http", "protocol": "TCP"}],
            },
        },
    ]
    notes = [
        f"gateway: image {image} is built locally (servectl gateway up builds it): push it or load it into the "
        f"nodes; clients use http://{name}:{config.port}/v1 with aliases {', '.join(data['aliases'])}"
    ]
    if config.auth == "keys":
        notes.append(
            f"gateway keys: kubectl create secret generic {KEYS_SECRET} --from-file=keys.json=<state>/gateway/keys.json"
        )
    return notes


def _k8s_container(
    plan: LaunchPlan, config: GatewayConfig, name: str, *, image: str, engine_key: bool
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The gateway container and the pod volumes it mounts: its file, its state, the key file, the engine key."""
    from servectl.render.k8s import API_KEY_SECRET_KEY, secret_name

    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": name}},
        {"name": "state", "emptyDir": {}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "config", "mountPath": CONFIG_FILE_IN_CONTAINER, "subPath": "gateway.yaml", "readOnly": True},
        {"name": "state", "mountPath": STATE_IN_CONTAINER},
    ]
    if config.auth == "keys":
        items = [{"key": "keys.json", "path": "keys.json"}]
        volumes.append({"name": "keys", "secret": {"secretName": KEYS_SECRET, "items": items}})
        mounts.append({"name": "keys", "mountPath": KEYS_DIR_IN_CONTAINER, "readOnly": True})
    if engine_key:
        items = [{"key": API_KEY_SECRET_KEY, "path": "api-key"}]
        volumes.append({"name": "engine-key", "secret": {"secretName": secret_name(plan), "items": items}})
        mounts.append({"name": "engine-key", "mountPath": ENGINE_KEY_DIR_IN_CONTAINER, "readOnly": True})
    probe = {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10, "timeoutSeconds": 5}
    container = {
        "name": "gateway",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["gateway", "run", "--config", CONFIG_FILE_IN_CONTAINER],
        "env": [{"name": "SERVECTL_HOME", "value": STATE_IN_CONTAINER}],
        "ports": [{"name": "http", "containerPort": config.port, "protocol": "TCP"}],
        "readinessProbe": probe,
        "volumeMounts": mounts,
    }
    return container, volumes
