"""Every rendered file against the real schemas: Compose Specification, Kubernetes core, LWS CRD."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from render_support import NO_EXTRACTED_CATALOGS, compose_schema, documents, lws_schema, text_of

from servectl.render.files import render_shipped

#: Kubernetes version whose official schemas the core objects are checked against.
K8S_VERSION = "1.30"
FIXTURES = ("envkey", "keyfile")  # render to both targets; multinode renders to k8s only


def shipped(target: str) -> list[str]:
    return sorted(f.profile for f in render_shipped(catalogs=NO_EXTRACTED_CATALOGS).files if f.target == target)


COMPOSE_FILES = [*shipped("compose"), *FIXTURES]
K8S_FILES = [*shipped("k8s"), *FIXTURES, "multinode"]


@pytest.fixture(scope="module")
def compose_validator() -> jsonschema.Draft7Validator:
    schema = compose_schema()
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


@pytest.fixture(scope="module")
def lws_validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(lws_schema())


def test_every_shipped_runnable_profile_renders_to_compose_and_most_to_k8s() -> None:
    assert {"demo", "demo-rollback", "glm53-393k", "glm53-524k-bringup", "glm53-exl3-q4-tp4"} <= set(COMPOSE_FILES)
    assert {"demo", "glm53-393k"} <= set(K8S_FILES)


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_file_is_valid_compose_spec(name: str, compose_validator: jsonschema.Draft7Validator) -> None:
    (document,) = documents(text_of(name, "compose"))
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in compose_validator.iter_errors(document)]
    assert errors == []


def test_compose_schema_rejects_what_compose_would_reject(
    compose_validator: jsonschema.Draft7Validator,
) -> None:
    (document,) = documents(text_of("glm53-393k", "compose"))
    wrong = copy.deepcopy(document)
    wrong["services"]["glm53-393k"]["gpu_ids"] = ["0"]
    assert not compose_validator.is_valid(wrong)
    wrong = copy.deepcopy(document)
    del wrong["services"]["glm53-393k"]["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"]
    assert not compose_validator.is_valid(wrong)


def core_objects(name: str) -> list[dict[str, Any]]:
    return [m for m in documents(text_of(name, "k8s")) if m["kind"] != "LeaderWorkerSet"]


@pytest.mark.parametrize("name", K8S_FILES)
def test_kubernetes_core_objects_pass_the_official_schemas_strictly(name: str) -> None:
    for manifest in core_objects(name):
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


def test_kubernetes_validate_catches_an_unknown_field() -> None:
    deployment = next(m for m in core_objects("glm53-393k") if m["kind"] == "Deployment")
    wrong = copy.deepcopy(deployment)
    wrong["spec"]["template"]["spec"]["containers"][0]["gpus"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong, K8S_VERSION, strict=True)


def leader_worker_set() -> dict[str, Any]:
    (lws,) = [m for m in documents(text_of("multinode", "k8s")) if m["kind"] == "LeaderWorkerSet"]
    return lws


def test_leader_worker_set_is_valid_against_its_crd_schema(lws_validator: jsonschema.Draft7Validator) -> None:
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in lws_validator.iter_errors(leader_worker_set())]
    assert errors == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "leaderWorkerTemplate", "size"), "2"),
        (("spec", "leaderWorkerTemplate", "restartPolicy"), "RecreateGroup"),
        (("spec", "leaderWorkerTemplate", "leaderTemplat"), {}),
    ],
)
def test_crd_schema_rejects_wrong_types_values_and_unknown_fields(
    lws_validator: jsonschema.Draft7Validator, path: tuple[str, ...], value: Any
) -> None:
    wrong = copy.deepcopy(leader_worker_set())
    node = wrong
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    assert not lws_validator.is_valid(wrong)


@pytest.mark.parametrize("role", ["leaderTemplate", "workerTemplate"])
def test_leader_and_worker_pod_templates_pass_the_official_pod_schema(role: str) -> None:
    template = leader_worker_set()["spec"]["leaderWorkerTemplate"][role]
    pod_template = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": "t"},
        "template": template,
    }
    kubernetes_validate.validate(pod_template, K8S_VERSION, strict=True)
