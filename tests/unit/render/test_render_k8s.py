"""The Kubernetes renderer: a Deployment on one node, a LeaderWorkerSet across nodes, a Service for both."""

from __future__ import annotations

import math
from typing import Any

import pytest
from render_support import documents, fresh_text_of, load, portable, text_of

from servectl.errors import RenderUnsupported
from servectl.plan.compile import API_KEY_CONTAINER_PATH, LABEL_PLAN_HASH
from servectl.render import render_k8s


def by_kind(name: str) -> dict[str, dict[str, Any]]:
    manifests = documents(text_of(name, "k8s"))
    kinds = [m["kind"] for m in manifests]
    assert len(set(kinds)) == len(kinds)
    return {m["kind"]: m for m in manifests}


def only_container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod_spec["containers"]
    return container


def test_single_node_is_a_recreate_deployment_of_one_replica_with_a_service() -> None:
    manifests = documents(text_of("glm53-393k", "k8s"))
    assert [m["kind"] for m in manifests] == ["ConfigMap", "Deployment", "Service"]
    deployment = manifests[1]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert deployment["metadata"]["name"] == "glm53-flash-sm120"


def test_the_container_runs_the_plans_image_and_command_as_args() -> None:
    plan = portable(load("glm53-393k"))
    container = only_container(by_kind("glm53-393k")["Deployment"]["spec"]["template"]["spec"])
    assert container["image"] == plan.docker.image
    assert container["args"] == list(plan.docker.command)
    assert "command" not in container  # the image's entrypoint still runs, as with docker run


def test_gpus_are_nvidia_gpu_limits_and_shm_is_a_memory_backed_empty_dir() -> None:
    pod = by_kind("glm53-393k")["Deployment"]["spec"]["template"]["spec"]
    container = only_container(pod)
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"] == {"name": "dshm", "emptyDir": {"medium": "Memory"}}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    sized = {v["name"]: v for v in by_kind("envkey")["Deployment"]["spec"]["template"]["spec"]["volumes"]}
    assert sized["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}


def test_startup_probe_budget_covers_the_startup_timeout_and_readiness_is_health() -> None:
    plan = portable(load("glm53-393k"))
    container = only_container(by_kind("glm53-393k")["Deployment"]["spec"]["template"]["spec"])
    startup, ready = container["startupProbe"], container["readinessProbe"]
    assert startup["httpGet"] == {"path": "/health", "port": "http"}
    assert startup["failureThreshold"] == math.ceil(plan.startup_timeout_s / startup["periodSeconds"]) == 180
    assert ready["httpGet"] == {"path": "/health", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 8180, "protocol": "TCP"}]


def test_service_selects_the_pods_and_forwards_the_serving_port() -> None:
    kinds = by_kind("glm53-393k")
    service, deployment = kinds["Service"], kinds["Deployment"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [{"name": "http", "port": 8180, "targetPort": "http", "protocol": "TCP"}]


def test_servectl_labels_are_annotations_and_home_paths_are_placeholders() -> None:
    plan = portable(load("glm53-393k"))
    deployment = by_kind("glm53-393k")["Deployment"]
    template = deployment["spec"]["template"]
    assert template["metadata"]["annotations"] == dict(plan.docker.labels)
    assert deployment["metadata"]["annotations"][LABEL_PLAN_HASH] == plan.plan_hash
    paths = {v["name"]: v["hostPath"]["path"] for v in template["spec"]["volumes"] if "hostPath" in v}
    assert paths == {
        "model": "${HOME}/models/GLM-5.3-Flash-ormandj-W4A16-NVFP4",
        "root-cache": "${HOME}/vllm/glm53-flash-sm120-v84-cache",
    }
    assert "envsubst '${HOME}'" in text_of("glm53-393k", "k8s")


def test_the_adaptive_ladder_is_a_config_map_mounted_at_the_argv_path() -> None:
    plan = portable(load("glm53-393k"))
    kinds = by_kind("glm53-393k")
    config_map = kinds["ConfigMap"]
    assert config_map["data"] == {"speculative-adaptive.json": plan.files[0].content}
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in only_container(pod)["volumeMounts"]}
    ladder = mounts["/etc/servectl/speculative-adaptive.json"]
    assert ladder["subPath"] == "speculative-adaptive.json" and ladder["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == ladder["name"])
    assert volume["configMap"] == {"name": config_map["metadata"]["name"]}


def test_secrets_are_references_to_a_secret_created_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_API_KEY", "sk-do-not-leak-4711")
    monkeypatch.setenv("HF_TOKEN", "hf-do-not-leak-0815")
    text = fresh_text_of("envkey", "k8s")
    assert "do-not-leak" not in text
    kinds = by_kind("envkey")
    assert "Secret" not in kinds
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    container = only_container(pod)
    assert {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "servectl-envkey-secrets", "key": "HF_TOKEN"}},
    } in container["env"]
    key_mount = next(m for m in container["volumeMounts"] if m["mountPath"] == API_KEY_CONTAINER_PATH)
    assert key_mount == {
        "name": "api-key",
        "mountPath": API_KEY_CONTAINER_PATH,
        "subPath": "api-key",
        "readOnly": True,
    }
    key_volume = next(v for v in pod["volumes"] if v["name"] == "api-key")
    assert key_volume["secret"]["secretName"] == "servectl-envkey-secrets"
    assert key_volume["secret"]["items"] == [{"key": "api-key", "path": "api-key"}]
    assert (
        'kubectl create secret generic servectl-envkey-secrets --from-literal=api-key="$SGLANG_API_KEY" '
        '--from-literal=HF_TOKEN="$HF_TOKEN"'
    ) in text


def test_project_paths_and_profile_variables_are_envsubst_placeholders() -> None:
    pod = by_kind("envkey")["Deployment"]["spec"]["template"]["spec"]
    paths = sorted(v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v)
    assert paths == ["${MODEL_ROOT}/Qwen3-30B-A3B", "${SERVECTL_PROJECT_DIR}/scratch"]
    assert "envsubst '${MODEL_ROOT} ${SERVECTL_PROJECT_DIR}'" in text_of("envkey", "k8s")


def test_host_network_on_all_addresses_uses_host_network_and_keeps_dollars_literal() -> None:
    plan = portable(load("keyfile"))
    pod = by_kind("keyfile")["Deployment"]["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    args = only_container(pod)["args"]
    assert "/templates/$$(cost)$HOME.jinja" in args  # Kubernetes expands $(VAR) in args; $$( keeps it
    assert [a.replace("$$(", "$(") for a in args] == list(plan.docker.command)
    assert "--from-file=api-key=~/.config/sglang/api-key" in text_of("keyfile", "k8s")


def test_loopback_on_the_host_network_cannot_be_served_by_kubernetes() -> None:
    loaded = load("glm53-exl3-q4-tp4")
    with pytest.raises(RenderUnsupported, match=r"binds 127\.0\.0\.1 on the host network.*serve\.network: bridge"):
        render_k8s(portable(loaded), loaded.profile)


def test_multinode_is_a_leader_worker_set_of_the_node_count() -> None:
    manifests = documents(text_of("multinode", "k8s"))
    assert [m["kind"] for m in manifests] == ["ConfigMap", "LeaderWorkerSet", "Service"]
    lws = manifests[1]
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert lws["spec"]["replicas"] == 1


def test_leader_and_workers_run_the_plan_argv_plus_the_multinode_flags() -> None:
    plan = portable(load("multinode"))
    assert "--nnodes" not in plan.engine_argv  # the compiler never adds them; the renderer does
    template = by_kind("multinode")["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    expected = [
        *plan.docker.command,
        "--nnodes",
        "2",
        "--node-rank",
        "$(LWS_WORKER_INDEX)",
        "--dist-init-addr",
        "$(LWS_LEADER_ADDRESS):20000",
    ]
    index_env = {
        "name": "LWS_WORKER_INDEX",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"}},
    }
    for role in ("leaderTemplate", "workerTemplate"):
        container = only_container(template[role]["spec"])
        assert container["args"] == expected, role
        assert index_env in container["env"], role
        assert container["resources"] == {"limits": {"nvidia.com/gpu": 8}}, role


def test_only_the_leader_serves_has_probes_and_is_selected_by_the_service() -> None:
    kinds = by_kind("multinode")
    template = kinds["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    leader = only_container(template["leaderTemplate"]["spec"])
    worker = only_container(template["workerTemplate"]["spec"])
    assert {"startupProbe", "readinessProbe", "ports"} <= leader.keys()
    assert not {"startupProbe", "readinessProbe", "ports"} & worker.keys()
    assert leader["startupProbe"]["failureThreshold"] == 240  # 2400 s / 10 s
    selector = kinds["Service"]["spec"]["selector"]
    assert selector.items() <= template["leaderTemplate"]["metadata"]["labels"].items()
    assert not selector.items() <= template["workerTemplate"]["metadata"]["labels"].items()
    assert kinds["Service"]["spec"]["ports"][0]["port"] == 30000


def test_dist_init_port_moves_when_the_engine_serves_on_it(tmp_path: Any) -> None:
    from servectl.plan.compile import compile_portable_plan
    from servectl.profile.loader import ProfileFolder, ProfileSearch
    from servectl.profile.validate import load_profile

    source = (load("multinode").file.path).read_text(encoding="utf-8").replace("port: 30000", "port: 20000")
    (tmp_path / "multinode.yaml").write_text(source, encoding="utf-8")
    loaded = load_profile(
        "multinode", folders=ProfileSearch((ProfileFolder(tmp_path, "test"),), catalogs=tmp_path / "catalogs")
    )
    plan = compile_portable_plan(loaded.profile, catalog=loaded.flag_catalog(), source="multinode.yaml")
    lws = render_k8s(plan, loaded.profile)[1]
    args = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["args"]
    assert args[-1] == "$(LWS_LEADER_ADDRESS):20001"


def test_object_names_are_dns_labels_of_the_container_name() -> None:
    # container.name glm53.multi_node is a valid docker name but not a Kubernetes one
    lws = by_kind("multinode")["LeaderWorkerSet"]
    assert lws["metadata"]["name"] == "glm53-multi-node"


def test_header_lists_what_a_pod_spec_cannot_express() -> None:
    text = text_of("glm53-393k", "k8s")
    assert "ulimit memlock=-1" in text and "ipc=host" in text
    assert "nvidia.com/gpu 2 per pod" in text
    assert "LeaderWorkerSet controller" in text_of("multinode", "k8s")
