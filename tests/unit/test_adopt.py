"""``servectl adopt``'s translation (plan/adopt.py) and the container/plan match (plan/container_match.py).

Every test builds ``docker inspect`` documents with servectl.testing.inspect, translates them, loads the
written file with the real loader (so the profile must validate), compiles it and checks that the plan
matches the container on every field servectl controls.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from servectl.adapters.http import StandardHttp
from servectl.adapters.state import History
from servectl.plan.adopt import AdoptError, adopt_container, adoption_yaml, compose_service_inspect, profile_name_for
from servectl.plan.container_match import container_diff, container_fields, diff_fields, split_engine_command
from servectl.plan.resolve import plan_for
from servectl.profile.catalog import FlagCatalog
from servectl.profile.loader import LoadedProfile, ProfileFolder, ProfileSearch, search_path
from servectl.profile.validate import load_profile
from servectl.testing.inspect import container_inspect, image_inspect

SECRET = "hf_FAKEsecretVALUE0123456789"
API_KEY = "sk-adopt-test-key-0123456789"
ENTRY = ["python3", "-m", "sglang.launch_server"]
SNAPSHOT = "/data/hf/hub/models--zai-org--GLM-5.3-Flash/snapshots/" + "ab" * 20


def sglang_argv(*extra: str, model: str = "/model", port: int = 30000) -> list[str]:
    return [*ENTRY, "--model-path", model, "--host", "0.0.0.0", "--port", str(port), *extra]


def write_and_load(
    tmp_path: Path, data: dict[str, Any], image: dict[str, Any] | None = None, **kw: Any
) -> tuple[Any, LoadedProfile]:
    adoption = adopt_container(data, image=image, **kw)
    folder = tmp_path / "profiles"
    folder.mkdir(exist_ok=True)
    (folder / f"{adoption.name}.yaml").write_text(adoption_yaml(adoption), encoding="utf-8")
    loaded = load_profile(
        adoption.name, folders=ProfileSearch((ProfileFolder(folder, "test"),), catalogs=tmp_path / "catalogs")
    )
    return adoption, loaded


def assert_round_trip(loaded: LoadedProfile, data: dict[str, Any], image: dict[str, Any] | None) -> None:
    plan = plan_for(loaded, environ={"HOME": "/home/u"})
    assert container_diff(plan, data, loaded.flag_catalog(), image=image) == []


def test_bridge_container_with_typed_unknown_flags_secret_and_mounts(tmp_path: Path) -> None:
    image = image_inspect()
    data = container_inspect(
        sglang_argv(
            "--served-model-name",
            "glm",
            "--tp",
            "2",
            "--context-length",
            "524288",
            "--mem-fraction-static",
            "0.9",
            "--kv-cache-dtype",
            "fp8_e4m3",
            "--quantization",
            "exl3",
            "--speculative-algorithm",
            "EAGLE",
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "1",
            "--reasoning-parser",
            "glm45",
            "--disable-shared-experts-fusion",
            "--dflash-window",
            "64",
            "--exl3-fast",
            "--api-key",
            API_KEY,
        ),
        env={"HF_TOKEN": SECRET, "SGLANG_ENABLE_JIT_DEEPGEMM": "0"},
        binds=[("/srv/models/glm", "/model", True), ("/home/u/.cache", "/root/.cache", False)],
        ports={30000: ("127.0.0.1", 30000)},
        device_requests=[{"Driver": "", "Count": 0, "DeviceIDs": ["0", "1"], "Capabilities": [["gpu"]]}],
        ipc="host",
        ulimits=[("memlock", -1, -1), ("stack", 67108864, 67108864)],
        restart=("unless-stopped", 0),
        stop_timeout=60,
        labels={"team": "infra"},
    )
    adoption, loaded = write_and_load(tmp_path, data, image, name="glm53-exl3-524k")
    p = loaded.profile
    assert (p.engine.tp, p.engine.context_length, p.engine.mem_fraction_static) == (2, 524288, 0.9)
    assert (p.engine.kv_cache_dtype, p.engine.quantization) == ("fp8_e4m3", "exl3")
    assert p.engine.speculative is not None and (p.engine.speculative.algorithm, p.engine.speculative.num_steps) == (
        "EAGLE",
        3,
    )
    assert p.engine.args == {
        "reasoning-parser": "glm45",
        "disable-shared-experts-fusion": True,
        "dflash-window": "64",
        "exl3-fast": True,
    }
    assert p.engine.catalog_extend is not None
    assert p.engine.catalog_extend.choices == {"quantization": ["exl3"]}
    assert [o["flags"] for o in p.engine.catalog_extend.options] == [["--dflash-window"], ["--exl3-fast"]]
    assert adoption.unknown_flags == ("--dflash-window", "--exl3-fast")
    assert p.image.ref == "lmsysorg/sglang:v0.5.23" and p.image.digest == "sha256:" + "d1" * 32
    assert (p.model.path, p.model.container_path, p.model.served_name) == ("/srv/models/glm", "/model", "glm")
    assert p.gpus.devices == [0, 1]
    assert (p.serve.host, p.serve.port, p.serve.network, p.serve.api_key_env) == (
        "127.0.0.1",
        30000,
        "bridge",
        "SERVECTL_API_KEY",
    )
    assert p.engine.env == {"HF_TOKEN": "${HF_TOKEN}", "SGLANG_ENABLE_JIT_DEEPGEMM": "0"}
    assert (p.container.ipc, p.container.restart, p.container.stop_grace_s, p.container.init) == (
        "host",
        "unless-stopped",
        60,
        False,
    )
    assert p.container.ulimits == {"memlock": -1, "stack": 67108864}
    assert p.container.labels == {"team": "infra"}
    assert [m.target for m in p.container.mounts] == ["/root/.cache"]
    assert p.adopted is not None and p.adopted.container == "sglang-hand"
    assert set(adoption.exports) == {"HF_TOKEN", "SERVECTL_API_KEY"}
    text = adoption_yaml(adoption)
    assert SECRET not in text and API_KEY not in text
    assert "export SERVECTL_API_KEY HF_TOKEN" in text or "export HF_TOKEN SERVECTL_API_KEY" in text
    assert "#   engine.tp" not in text and "#   image.digest" in text  # the header names where values came from
    assert_round_trip(loaded, data, image)


def test_host_network_hf_snapshot_nvidia_runtime(tmp_path: Path) -> None:
    data = container_inspect(
        [*ENTRY, "--model-path", SNAPSHOT, "--host", "127.0.0.1", "--port", "8080", "--tp-size", "2"],
        image="lmsysorg/sglang@sha256:" + "d1" * 32,
        env={"NVIDIA_VISIBLE_DEVICES": "2,3"},
        runtime="nvidia",
        binds=[("/data/hf", "/data/hf", False)],
        network="host",
        shm_bytes=32 * 2**30,
    )
    adoption, loaded = write_and_load(tmp_path, data, None, name="daily")
    p = loaded.profile
    assert p.serve.network == "host" and (p.serve.host, p.serve.port) == ("127.0.0.1", 8080)
    assert p.image.ref == "lmsysorg/sglang" and p.image.digest == "sha256:" + "d1" * 32
    assert p.model.repo == "zai-org/GLM-5.3-Flash" and p.model.revision == "ab" * 20
    assert p.model.container_path == SNAPSHOT and p.model.path == SNAPSHOT
    assert [m.source for m in p.container.mounts] == ["/data/hf"]  # the cache folder stays mounted as it was
    assert p.gpus.devices == [2, 3] and "NVIDIA_VISIBLE_DEVICES" not in p.engine.env
    assert p.container.shm_size == "32g"
    assert any("NVIDIA_VISIBLE_DEVICES" in n for n in adoption.notes)
    assert_round_trip(loaded, data, None)


@pytest.mark.parametrize(
    ("requests", "devices", "expected"),
    [
        ([{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=1"]}], (), [1]),
        ([{"Driver": "nvidia", "Count": 2, "Capabilities": [["gpu"]]}], (), [0, 1]),
        (None, ("/dev/nvidia3", "/dev/nvidiactl"), [3]),
    ],
)
def test_gpu_requests_read_as_card_indices(tmp_path: Path, requests: Any, devices: Any, expected: list[int]) -> None:
    data = container_inspect(
        sglang_argv("--tp", str(len(expected))),
        device_requests=requests,
        devices=devices,
        binds=[("/m", "/model", True)],
        ports={30000: ("127.0.0.1", 30000)},
    )
    _, loaded = write_and_load(tmp_path, data, image_inspect(), name="gpu")
    assert loaded.profile.gpus.devices == expected


def test_model_inside_cache_mount_and_named_volume(tmp_path: Path) -> None:
    data = container_inspect(
        sglang_argv(model="/root/.cache/models/glm"),
        binds=[("/home/u/.cache", "/root/.cache", False)],
        volumes=[("scratch", "/var/lib/docker/volumes/scratch/_data", "/scratch")],
        ports={30000: ("127.0.0.1", 30000)},
    )
    _, loaded = write_and_load(tmp_path, data, image_inspect(), name="nested")
    p = loaded.profile
    assert (p.model.path, p.model.container_path) == ("/home/u/.cache/models/glm", "/root/.cache/models/glm")
    assert sorted(m.source for m in p.container.mounts) == ["/home/u/.cache", "/var/lib/docker/volumes/scratch/_data"]
    assert_round_trip(loaded, data, image_inspect())


def test_local_image_without_digest_is_said(tmp_path: Path) -> None:
    image = image_inspect(tags=["servectl-standin:latest"], repo_digests=[])
    data = container_inspect(sglang_argv(), image="servectl-standin:latest", binds=[("/m", "/model", True)])
    adoption, loaded = write_and_load(tmp_path, data, image, name="local")
    assert loaded.profile.image.digest is None
    assert any("no repo digest" in n for n in adoption.notes)
    assert any("was not published" in n for n in adoption.notes)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (container_inspect(["nginx", "-g", "daemon off;"]), "does not run SGLang"),
        (
            container_inspect(sglang_argv(), labels={"servectl.managed": "1", "servectl.profile": "demo"}),
            "started by servectl",
        ),
        (container_inspect(sglang_argv()), "not inside a folder mounted from the host"),
        (
            container_inspect(sglang_argv("--Bad_Flag"), binds=[("/m", "/model", True)]),
            "cannot be written in a profile",
        ),
    ],
)
def test_bad_containers_are_refused_in_one_line(data: dict[str, Any], message: str) -> None:
    with pytest.raises(AdoptError) as err:
        adopt_container(data, image=image_inspect())
    assert message in str(err.value) and "\n" not in str(err.value)
    assert err.value.exit_code == 2


def test_diff_names_each_changed_field_and_hides_secrets() -> None:
    catalog = FlagCatalog.load("sglang-0.5.23")
    a = container_inspect(sglang_argv("--tp", "2"), env={"HF_TOKEN": SECRET}, binds=[("/m", "/model", True)])
    b = container_inspect(
        sglang_argv("--tp-size", "4"), env={"HF_TOKEN": "hf_other0123456789"}, binds=[("/m", "/model", False)]
    )
    lines = diff_fields(container_fields(a, catalog), container_fields(b, catalog))
    assert "engine tp_size: 2 -> 4" in lines
    assert "env HF_TOKEN: *** -> ***" in lines
    assert 'mounts: ["/m:/model:ro"] -> ["/m:/model:rw"]' in lines
    assert not any(SECRET in line for line in lines)
    same = container_inspect(
        sglang_argv("--tensor-parallel-size", "2", "--port", "30000"),
        env={"HF_TOKEN": SECRET},
        binds=[("/m", "/model", True)],
    )
    assert diff_fields(container_fields(a, catalog), container_fields(same, catalog)) == []


def test_servectl_api_key_wrapper_reads_as_the_module_it_runs() -> None:
    wrapper = (
        "import runpy,sys;k=open('/run/secrets/servectl-api-key').read();"
        "runpy.run_module('sglang.launch_server',run_name='__main__')"
    )
    command = split_engine_command(["python3", "-c", wrapper, "--port", "1"])
    assert command is not None and command.entrypoint == ("python3", "-m", "sglang.launch_server") and command.wrapped
    assert split_engine_command(["/opt/nvidia/entrypoint.sh", *ENTRY, "--tp", "1"]) is not None
    assert split_engine_command(["vllm", "serve", "x"]) is None


def test_profile_name_from_container_name() -> None:
    assert profile_name_for("GLM_EXL3.524k") == "glm_exl3.524k"
    assert profile_name_for("/--x y") == "x-y"


# -- the service layer (service/adopt.py, service/adopted.py) on fake documents ---------------------------------
class FakeDocuments:
    """Docker documents by name, as DockerSdkEngine returns them."""

    def __init__(self, containers: dict[str, dict[str, Any]], images: dict[str, dict[str, Any]]) -> None:
        self.containers, self.images = containers, images

    def container_document(self, id_or_name: str) -> dict[str, Any] | None:
        return self.containers.get(id_or_name)

    def image_document(self, ref: str) -> dict[str, Any] | None:
        return self.images.get(ref)

    def volume_folder(self, name: str) -> str | None:
        return f"/var/lib/docker/volumes/{name}/_data"


def hand_started(**kw: Any) -> dict[str, Any]:
    return container_inspect(
        sglang_argv("--tp", "1", "--api-key", API_KEY),
        env={"HF_TOKEN": SECRET},
        binds=[("/srv/m", "/model", True)],
        ports={30000: ("127.0.0.1", 30000)},
        **kw,
    )


def test_adopt_writes_a_validated_file_and_refuses_a_taken_name_unless_forced(tmp_path: Path) -> None:
    from servectl.service.adopt import AdoptOptions, adopt

    folder = tmp_path / "profiles"
    folder.mkdir()
    docs = FakeDocuments({"sglang-hand": hand_started()}, {"sha256:" + "5b" * 32: image_inspect()})
    folders = ProfileSearch((ProfileFolder(folder, "./profiles"),), catalogs=tmp_path / "catalogs")
    dry = adopt(
        docker=docs, container="sglang-hand", name="hand", opts=AdoptOptions(dry_run=True, folders=folders, environ={})
    )
    assert not dry.written and not (folder / "hand.yaml").exists() and dry.diff == () and dry.problems == ()
    result = adopt(docker=docs, container="sglang-hand", name="hand", opts=AdoptOptions(folders=folders, environ={}))
    assert result.path == folder / "hand.yaml" and result.backup is None
    text = result.path.read_text()
    assert SECRET not in text and API_KEY not in text and text.startswith("# Written by `servectl adopt`")
    with pytest.raises(AdoptError, match="profile hand already exists") as taken:
        adopt(docker=docs, container="sglang-hand", name="hand", opts=AdoptOptions(folders=folders, environ={}))
    assert "--force" in taken.value.message
    forced = adopt(
        docker=docs, container="sglang-hand", name="hand", opts=AdoptOptions(force=True, folders=folders, environ={})
    )
    assert forced.backup == folder / "hand.yaml.bak" and forced.backup.read_text() == text
    with pytest.raises(AdoptError, match="no container 'gone'"):
        adopt(docker=docs, container="gone", opts=AdoptOptions(folders=folders, environ={}))
    with pytest.raises(AdoptError, match="disagree"):
        adopt(
            docker=docs,
            container="sglang-hand",
            name="x",
            out=tmp_path / "y.yaml",
            opts=AdoptOptions(folders=folders, environ={}),
        )
    named_by_file = adopt(
        docker=docs,
        container="sglang-hand",
        out=tmp_path / "elsewhere.yaml",
        opts=AdoptOptions(folders=folders, environ=os.environ),
    )
    assert named_by_file.adoption.name == "elsewhere" and named_by_file.problems == ()


def test_a_template_is_replaced_without_force_and_kept(tmp_path: Path) -> None:
    from servectl.service.adopt import AdoptOptions, adopt

    folder = tmp_path / "profiles"
    folder.mkdir()
    template = "name: glm53-exl3-524k\ntemplate: run servectl adopt <container> --name glm53-exl3-524k\n"
    (folder / "glm53-exl3-524k.yaml").write_text(template)
    docs = FakeDocuments({"exl3": hand_started(name="exl3")}, {})
    result = adopt(
        docker=docs,
        container="exl3",
        name="glm53-exl3-524k",
        opts=AdoptOptions(
            folders=ProfileSearch((ProfileFolder(folder, "./profiles"),), catalogs=tmp_path / "catalogs"), environ={}
        ),
    )
    assert result.backup is not None and result.backup.read_text() == template
    assert (
        load_profile(
            "glm53-exl3-524k", folders=ProfileSearch((ProfileFolder(folder, "x"),), catalogs=tmp_path / "catalogs")
        ).profile.adopted
        is not None
    )


def test_the_adopted_services_are_looked_up_on_the_runtimes_search_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an adopted profile in a folder only the runtime's environ names: status lists its container as adopted
    from servectl.service.adopt import AdoptOptions, adopt
    from servectl.service.adopted import adopted_profiles
    from servectl.service.clocks import Clocks
    from servectl.service.container import DockerRuntime
    from servectl.testing.docker import FakeDockerEngine

    monkeypatch.delenv("SERVECTL_PROFILES", raising=False)
    monkeypatch.chdir(tmp_path)
    data = hand_started()
    (tmp_path / "elsewhere").mkdir()
    write_and_load(tmp_path / "elsewhere", data, image_inspect(), name="hand")
    environ = {"HOME": "/home/u", "SERVECTL_PROFILES": str(tmp_path / "elsewhere" / "profiles")}
    assert [r.name for r in adopted_profiles(environ)] == ["hand"]
    assert "hand" not in [
        r.name for r in adopted_profiles(environ=os.environ)
    ]  # os.environ's search path does not have it
    engine = FakeDockerEngine()
    engine.documents[data["Id"]] = data
    engine.image_documents[data["Image"]] = image_inspect()
    runtime = DockerRuntime(
        docker=engine,
        http=StandardHttp(),
        environ=environ,
        state_dir=tmp_path / "state",
        history=History(tmp_path / "state", clock=time.time),
        clocks=Clocks(),
    )
    listed = runtime.services(probe=False)
    assert [(s.profile, s.adopted) for s in listed] == [("hand", True)]
    docs = FakeDocuments({"sglang-hand": data}, {data["Image"]: image_inspect()})
    with pytest.raises(AdoptError, match="profile hand already exists"):  # the name is taken on that path too
        adopt(
            docker=docs,
            container="sglang-hand",
            name="hand",
            opts=AdoptOptions(dry_run=True, environ=environ, folders=search_path(environ=environ)),
        )


GPU_RESERVATION = {"driver": "nvidia", "device_ids": ["0", "1"], "capabilities": ["gpu"]}


def test_compose_service_reads_as_the_container_compose_would_create(tmp_path: Path) -> None:
    config = {
        "name": "ds",
        "services": {
            "deepseek": {
                "image": "lmsysorg/sglang:v0.5.23",
                "command": "python3 -m sglang.launch_server --model-path /model --host 0.0.0.0 --port 8080 --tp 2",
                "environment": {"HF_TOKEN": SECRET, "UNSET": None},
                "volumes": [
                    {"type": "bind", "source": "/srv/m", "target": "/model", "read_only": True},
                    {"type": "volume", "source": "cache", "target": "/root/.cache"},
                ],
                "ports": [{"target": 8080, "published": "8080", "host_ip": "127.0.0.1", "protocol": "tcp"}],
                "deploy": {"resources": {"reservations": {"devices": [GPU_RESERVATION]}}},
                "ipc": "host",
                "ulimits": {"memlock": -1, "nofile": {"soft": 1024, "hard": 4096}},
                "restart": "on-failure:3",
                "stop_grace_period": "1m30s",
            }
        },
        "volumes": {"cache": {"name": "ds_cache"}},
    }  # fmt: skip
    data = compose_service_inspect(config, "deepseek", image=image_inspect())
    _, loaded = write_and_load(tmp_path, data, image_inspect(), name="ds", compose=("/c.yaml", "deepseek"))
    p = loaded.profile
    assert p.container.name == "ds-deepseek-1" and p.gpus.devices == [0, 1] and p.engine.tp == 2
    assert (p.container.ipc, p.container.restart, p.container.stop_grace_s) == ("host", "on-failure:3", 90)
    assert p.container.ulimits == {"memlock": -1, "nofile": [1024, 4096]}
    assert [m.source for m in p.container.mounts] == ["/var/lib/docker/volumes/ds_cache/_data"]
    assert p.adopted is not None and (p.adopted.compose_file, p.adopted.compose_service) == ("/c.yaml", "deepseek")
    assert p.engine.env == {"HF_TOKEN": "${HF_TOKEN}"}
    assert_round_trip(loaded, data, image_inspect())
    with pytest.raises(AdoptError, match="no service 'db'"):
        compose_service_inspect(config, "db")


def test_find_adopted_needs_the_container_and_a_matching_configuration(tmp_path: Path) -> None:
    from servectl.plan.resolve import Resolved
    from servectl.service.adopted import find_adopted
    from servectl.testing.docker import FakeDockerEngine

    data = hand_started()
    _, loaded = write_and_load(tmp_path, data, image_inspect(), name="hand")
    resolved = Resolved(loaded=loaded, plan=plan_for(loaded, environ={"HOME": "/home/u"}))
    engine = FakeDockerEngine()
    assert find_adopted(engine, [resolved]) == []  # no such container
    engine.documents[data["Id"]] = data
    engine.image_documents[data["Image"]] = image_inspect()
    (match,) = find_adopted(engine, [resolved])
    assert match.resolved.name == "hand" and match.document["Id"] == data["Id"]
    assert find_adopted(engine, [resolved], scope={"servectl.test-session": "other"}) == []
    changed = hand_started()
    changed["Config"]["Cmd"] = [*changed["Config"]["Cmd"], "--disable-cuda-graph"]
    engine.documents[data["Id"]] = changed
    assert find_adopted(engine, [resolved]) == []
