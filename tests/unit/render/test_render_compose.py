"""The compose renderer: every part of the launch plan lands in the compose key that does the same."""

from __future__ import annotations

import pytest
from render_support import REPO, documents, fresh_text_of, load, portable, text_of

from servectl.errors import RenderUnsupported
from servectl.plan.compile import API_KEY_CONTAINER_PATH, LABEL_PLAN_HASH, LABEL_SOURCE
from servectl.render import render_compose
from servectl.render.yaml_out import GENERATED_MARK


def compose_service(name: str) -> dict:
    (document,) = documents(text_of(name, "compose"))
    return document["services"][name]


def test_demo_service_runs_the_plans_image_command_and_labels() -> None:
    loaded = load("demo")
    plan = portable(loaded)
    service = compose_service("demo")
    assert service["image"] == plan.docker.image
    assert service["container_name"] == "servectl-demo"
    assert service["command"] == list(plan.docker.command)
    assert service["labels"] == dict(plan.docker.labels)
    assert service["labels"][LABEL_SOURCE] == "profiles/demo.yaml"
    assert service["labels"][LABEL_PLAN_HASH] == plan.plan_hash


def test_demo_ports_are_bound_to_the_profiles_host_address() -> None:
    service = compose_service("demo")
    assert service["ports"] == [{"target": 8190, "published": "8190", "host_ip": "127.0.0.1", "protocol": "tcp"}]
    assert "network_mode" not in service


def test_a_relative_model_path_is_written_relative_to_the_compose_folder() -> None:
    (volume,) = compose_service("demo")["volumes"]
    assert volume["source"] == "../examples/demo-model"
    assert (REPO / "compose" / volume["source"] / "config.json").is_file()
    assert volume["read_only"] is True
    assert volume["bind"] == {"create_host_path": False}


def test_healthcheck_probes_health_with_a_start_period_of_the_startup_timeout() -> None:
    health = compose_service("demo")["healthcheck"]
    assert health["test"][0] == "CMD"
    assert "http://127.0.0.1:8190/health" in health["test"][-1]
    assert health["start_period"] == "120s"
    assert compose_service("glm53-393k")["healthcheck"]["start_period"] == "1800s"


def test_stop_grace_init_ulimits_and_environment_follow_the_plan() -> None:
    service = compose_service("demo")
    assert service["stop_grace_period"] == "5s"
    assert service["init"] is True
    assert "ulimits" not in service  # the plan gives the stand-in none (it locks no memory)
    assert compose_service("glm53-393k")["ulimits"] == {"memlock": -1, "stack": 67108864}
    assert service["environment"] == {
        "STANDIN_CHUNK_TOKENS": "2",
        "STANDIN_STARTUP_DELAY_S": "3",
        "STANDIN_TOKEN_RATE": "200",
    }


def test_no_gpus_means_no_device_reservation() -> None:
    assert "deploy" not in compose_service("demo")


def test_gpus_are_reserved_by_device_id_with_the_gpu_capability() -> None:
    service = compose_service("glm53-393k")
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "device_ids": ["0", "1"], "capabilities": ["gpu"]}]
    assert service["ipc"] == "host"
    assert service["image"].endswith("@sha256:0c0637959c3931829f05154087bbefd2c50003fb9b2010200ce0ec82f4d71a53")


def test_the_adaptive_ladder_is_an_inline_config_at_the_path_the_argv_names() -> None:
    loaded = load("glm53-393k")
    plan = portable(loaded)
    (document,) = documents(text_of("glm53-393k", "compose"))
    service = document["services"]["glm53-393k"]
    (config_ref,) = service["configs"]
    assert config_ref["target"] == "/etc/servectl/speculative-adaptive.json"
    assert plan.engine_argv[plan.engine_argv.index("--speculative-adaptive-config") + 1] == config_ref["target"]
    assert document["configs"][config_ref["source"]]["content"] == plan.files[0].content
    # the generated file is not also bind-mounted from the state folder
    assert [v["target"] for v in service["volumes"]] == ["/model", "/root/.cache"]


def test_home_paths_stay_home_relative_and_no_machine_path_is_written() -> None:
    text = text_of("glm53-393k", "compose")
    assert "source: ~/models/GLM-5.3-Flash-ormandj-W4A16-NVFP4" in text
    assert str(REPO) not in text
    assert ".local/state" not in text
    assert "/root" not in text.replace("/root/.cache", "")


def test_profile_variables_stay_for_compose_to_interpolate() -> None:
    text = text_of("glm53-exl3-q4-tp4", "compose")
    service = documents(text)[0]["services"]["glm53-exl3-q4-tp4"]
    assert [v["source"] for v in service["volumes"]] == [
        "${MODEL_ROOT}/GLM-5.3-Flash-EXL3-Q4",
        "${RUNTIME_ASSETS}/chat-template-mm.jinja",
    ]
    assert "# host paths use ${MODEL_ROOT}, ${RUNTIME_ASSETS}: export them first" in text


def test_host_networking_publishes_no_ports() -> None:
    service = compose_service("glm53-exl3-q4-tp4")
    assert service["network_mode"] == "host"
    assert "ports" not in service
    assert "http://127.0.0.1:8000/health" in service["healthcheck"]["test"][-1]


def test_api_key_from_the_environment_is_a_compose_secret_never_a_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SGLANG_API_KEY", "sk-do-not-leak-4711")
    monkeypatch.setenv("HF_TOKEN", "hf-do-not-leak-0815")
    text = fresh_text_of("envkey", "compose")
    assert "do-not-leak" not in text
    (document,) = documents(text)
    service = document["services"]["envkey"]
    assert document["secrets"] == {"servectl-api-key": {"environment": "SGLANG_API_KEY"}}
    assert service["secrets"] == [{"source": "servectl-api-key", "target": API_KEY_CONTAINER_PATH}]
    assert service["environment"] == {"HF_TOKEN": None}  # passed through from the shell
    assert "/model" in [v["target"] for v in service["volumes"]]
    assert API_KEY_CONTAINER_PATH not in [v["target"] for v in service["volumes"]]
    # the command is the plan's key wrapper, which reads the mounted secret
    assert service["command"][:2] == ["python3", "-c"] and API_KEY_CONTAINER_PATH in service["command"][2]


def test_api_key_from_a_file_is_a_compose_file_secret() -> None:
    (document,) = documents(text_of("keyfile", "compose"))
    assert document["secrets"] == {"servectl-api-key": {"file": "~/.config/sglang/api-key"}}


def test_dollars_in_values_are_escaped_so_compose_passes_them_unchanged() -> None:
    plan = portable(load("keyfile"))
    service = compose_service("keyfile")
    assert "/templates/$$(cost)$$HOME.jinja" in service["command"]
    assert service["environment"]["PRICE_LABEL"] == "5$$ a day"
    assert [t.replace("$$", "$") for t in service["command"]] == list(plan.docker.command)


def test_project_paths_fall_back_to_the_project_variable_without_a_project_folder() -> None:
    loaded = load("envkey")
    plan = portable(loaded)
    service = render_compose(plan, loaded.profile)["services"]["envkey"]
    assert service["volumes"][1]["source"] == "${SERVECTL_PROJECT_DIR}/scratch"
    with_project = render_compose(plan, loaded.profile, project_dir="..")["services"]["envkey"]
    assert with_project["volumes"][1]["source"] == "../scratch"


def test_a_multinode_profile_cannot_be_rendered_to_compose() -> None:
    loaded = load("multinode")
    with pytest.raises(RenderUnsupported, match=r"nodes: 2 .*--to k8s"):
        render_compose(portable(loaded), loaded.profile)


def test_header_names_profile_plan_hash_and_says_generated() -> None:
    plan = portable(load("demo"))
    lines = text_of("demo", "compose").splitlines()
    assert lines[0] == f"# {GENERATED_MARK}"
    assert lines[1] == f"# profile demo (profiles/demo.yaml), plan hash {plan.plan_hash}"
    assert lines[2] == "# regenerate: servectl render --all"
    assert "servectl up demo" in lines[3]  # the stand-in image is built by servectl, not by compose


def test_each_profile_gets_its_own_compose_project() -> None:
    assert documents(text_of("demo", "compose"))[0]["name"] == "servectl-demo"
    assert documents(text_of("glm53-393k", "compose"))[0]["name"] == "servectl-glm53-393k"
