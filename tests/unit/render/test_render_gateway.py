"""`render --gateway`: the gateway beside the rendered service (compose service / k8s ConfigMap+Deployment+Service).

Snapshots in tests/snapshots/render/*.gateway.*.yaml; accept a deliberate change with
SERVECTL_UPDATE_SNAPSHOTS=1 (see test_render_snapshots.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from render_support import REPO, compose_schema, documents, load
from test_render_cli import servectl

from servectl.gateway.config import GatewayConfig
from servectl.gateway.render import (
    ENGINE_KEY_IN_CONTAINER,
    KEYS_IN_CONTAINER,
    KEYS_SECRET,
    gateway_extension,
)
from servectl.render.files import Target, render_text

IMAGE = "servectl-gateway:0123456789ab"
K8S_VERSION = "1.30"
SNAPSHOTS = REPO / "tests" / "snapshots" / "render"
USER_FILE = {
    "listen": "127.0.0.1:8181",
    "aliases": {"chat": ["envkey", "keyfile"], "other": ["demo"], "any": ["*"]},
    "limits": {"rate_per_minute": 60},
    "swap": {"drain_s": 10, "hold_s": 20},
}


def rendered(name: str, target: Target, config: dict[str, Any] | None = None) -> str:
    extend = gateway_extension(GatewayConfig.model_validate(USER_FILE if config is None else config), image=IMAGE)
    command = f"servectl render {name} --to {target} --gateway"
    return render_text(load(name), target=target, out_dir=REPO / target, command=command, extend=extend)


def gateway_file(text: str) -> GatewayConfig:
    return GatewayConfig.model_validate(yaml.safe_load(text))


CASES: list[tuple[str, Target]] = [("keyfile", "compose"), ("envkey", "k8s")]


@pytest.mark.parametrize(("name", "target"), CASES, ids=[f"{n}.{t}" for n, t in CASES])
def test_rendered_gateway_matches_its_snapshot(name: str, target: Target) -> None:
    path = SNAPSHOTS / f"{name}.gateway.{target}.yaml"
    text = rendered(name, target)
    if os.environ.get("SERVECTL_UPDATE_SNAPSHOTS") == "1":
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"differs from {path.relative_to(REPO)}"


@pytest.mark.parametrize("name", ["demo", "envkey", "keyfile"])
def test_compose_with_gateway_is_valid_compose_and_routes_to_the_engine_service(name: str) -> None:
    (document,) = documents(rendered(name, "compose"))
    validator = jsonschema.Draft7Validator(compose_schema())
    assert [e.message for e in validator.iter_errors(document)] == []
    gateway = document["services"]["gateway"]
    assert gateway["image"] == IMAGE
    assert gateway["command"] == ["gateway", "run", "--config", "/etc/servectl/gateway.yaml"]
    config = gateway_file(document["configs"]["servectl-gateway-config"]["content"].replace("$$", "$"))
    engine = document["services"][name]
    engine_port = int(engine["command"][engine["command"].index("--port") + 1])
    assert config.endpoints is not None
    if engine.get("network_mode") == "host":  # no service DNS there: both on the host's addresses
        assert gateway["network_mode"] == "host" and "ports" not in gateway
        assert config.endpoints[name].url == f"http://127.0.0.1:{engine_port}"
        assert config.listen == "127.0.0.1:8181"
    else:
        assert gateway["ports"] == [{"target": 8181, "published": "8181", "host_ip": "127.0.0.1", "protocol": "tcp"}]
        assert config.endpoints[name].url == f"http://{name}:{engine_port}"
        assert config.listen == "0.0.0.0:8181"
    expected = {"any": [name], "chat": [name]} if name != "demo" else {"any": [name], "other": [name]}
    assert config.aliases == expected
    assert (config.port, config.limits.rate_per_minute, config.swap.hold_s) == (8181, 60, 20)
    assert config.keys_file == KEYS_IN_CONTAINER
    assert document["secrets"][KEYS_SECRET] == {"file": "${SERVECTL_GATEWAY_KEYS}"}


def test_an_engine_with_an_api_key_shares_its_secret_with_the_gateway() -> None:
    (document,) = documents(rendered("envkey", "compose"))
    targets = {s["source"]: s["target"] for s in document["services"]["gateway"]["secrets"]}
    assert targets["servectl-api-key"] == ENGINE_KEY_IN_CONTAINER
    config = gateway_file(document["configs"]["servectl-gateway-config"]["content"].replace("$$", "$"))
    assert config.endpoints is not None and config.endpoints["envkey"].api_key_file == ENGINE_KEY_IN_CONTAINER
    (plain,) = documents(rendered("demo", "compose"))
    assert [s["source"] for s in plain["services"]["gateway"]["secrets"]] == [KEYS_SECRET]


def test_auth_none_renders_no_key_secret() -> None:
    (document,) = documents(rendered("demo", "compose", {"auth": "none"}))
    assert "secrets" not in document["services"]["gateway"]
    assert KEYS_SECRET not in document.get("secrets", {})
    config = gateway_file(document["configs"]["servectl-gateway-config"]["content"])
    assert config.aliases == {"demo": ["demo"]} and config.keys_file is None


@pytest.mark.parametrize("name", ["demo", "envkey", "keyfile", "multinode"])
def test_k8s_with_gateway_passes_the_official_schemas_and_routes_to_the_engine_service(name: str) -> None:
    manifests = documents(rendered(name, "k8s"))
    for manifest in manifests:
        if manifest["kind"] != "LeaderWorkerSet":
            kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
    engine_service = next(m for m in manifests if m["kind"] == "Service")
    config_map, deployment, service = manifests[-3:]
    assert [config_map["kind"], deployment["kind"], service["kind"]] == ["ConfigMap", "Deployment", "Service"]
    config = gateway_file(config_map["data"]["gateway.yaml"])
    port = engine_service["spec"]["ports"][0]["port"]
    assert config.endpoints is not None
    assert config.endpoints[name].url == f"http://{engine_service['metadata']['name']}:{port}"
    pod = deployment["spec"]["template"]["spec"]
    secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert KEYS_SECRET in secrets
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert "keys.json" not in str(config_map["data"]).replace(KEYS_IN_CONTAINER, "")


def test_cli_renders_the_gateway_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))  # no user gateway file: the defaults
    monkeypatch.setenv("SERVECTL_HOME", str(tmp_path / "state"))
    with_gateway = servectl("render", "demo", "--to", "compose", "--gateway", "--out", "-", cwd=REPO)
    without = servectl("render", "demo", "--to", "compose", "--out", "-", cwd=REPO)
    assert with_gateway.returncode == 0, with_gateway.stderr
    assert "# regenerate: servectl render demo --to compose --gateway" in with_gateway.stdout
    document = yaml.safe_load(with_gateway.stdout)
    assert document["services"]["gateway"]["image"].startswith("servectl-gateway:")
    assert "gateway" not in yaml.safe_load(without.stdout)["services"]
