"""The gateway container's user (never root), the Docker socket's group, and engine keys by reference."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from servectl.errors import UsageError
from servectl.gateway.container import NONROOT_ID, gateway_spec
from servectl.plan.compile import docker_run_argv
from servectl.profile.loader import search_path


def _world(tmp_path: Path) -> dict[str, str]:
    home, profiles = tmp_path / "home", tmp_path / "profiles"
    profiles.mkdir(mode=0o755)
    (profiles / "keyed.yaml").write_text("name: keyed\nextends: demo\nserve: {api_key_env: KEYED_ENGINE_KEY}\n")
    (tmp_path / "gw.yaml").write_text("listen: 127.0.0.1:9000\n")
    tmp_path.chmod(0o755)
    return {"SERVECTL_HOME": str(home), "SERVECTL_PROFILES": str(profiles), "KEYED_ENGINE_KEY": "sk-engine-secret"}


def test_the_container_runs_as_the_state_owner_or_nonroot_with_the_socket_group(tmp_path: Path) -> None:
    env = _world(tmp_path)
    socket = tmp_path / "docker.sock"
    socket.write_text("")
    env["DOCKER_HOST"] = f"unix://{socket}"
    spec = gateway_spec(image="img:1", config_file=tmp_path / "gw.yaml", environ=env)
    owner = Path(env["SERVECTL_HOME"]).stat().st_uid
    expected = NONROOT_ID if owner == 0 else owner
    assert spec.user is not None and spec.user.split(":")[0] == str(expected) and spec.user.split(":")[0] != "0"
    assert spec.group_add == (str(socket.stat().st_gid),)
    if os.geteuid() == 0 and owner == 0:  # the gateway folder is handed to the gateway's user
        assert (Path(env["SERVECTL_HOME"]) / "gateway").stat().st_uid == NONROOT_ID
    assert ("KEYED_ENGINE_KEY", None) in spec.environment  # by reference: the value comes from the environment
    argv = " ".join(docker_run_argv(spec))
    assert "sk-engine-secret" not in argv and f"--user {spec.user}" in argv and "-e KEYED_ENGINE_KEY " in argv + " "


def test_an_unset_engine_key_variable_is_not_passed(tmp_path: Path) -> None:
    env = _world(tmp_path)
    del env["KEYED_ENGINE_KEY"]
    spec = gateway_spec(image="img:1", config_file=tmp_path / "gw.yaml", environ=env)
    assert "KEYED_ENGINE_KEY" not in dict(spec.environment)


@pytest.mark.skipif(os.geteuid() != 0, reason="the nonroot user is only used when root owns the state folder")
def test_a_folder_the_nonroot_gateway_cannot_read_is_named_before_anything_starts(tmp_path: Path) -> None:
    env = _world(tmp_path)
    (tmp_path / "profiles").chmod(0o700)
    with pytest.raises(UsageError, match=r"profiles: the gateway container runs as uid 65532 .* chmod o\+rx"):
        gateway_spec(image="img:1", config_file=tmp_path / "gw.yaml", environ=env)


def test_an_engine_spec_without_a_user_prints_no_user_or_group() -> None:
    from servectl.plan.compile import DockerRunSpec

    spec = DockerRunSpec(image="i", name="n", command=(), labels={}, environment=(), device_ids=(), ipc_mode=None,
                         shm_size=None, ulimits=(), network_mode="host", ports=(), mounts=(),
                         stop_timeout_s=1)  # fmt: skip
    assert "--user" not in docker_run_argv(spec) and "--group-add" not in docker_run_argv(spec)


def test_engine_plans_keep_their_json_and_hash_without_the_new_fields() -> None:
    from servectl.plan.compile import compile_plan
    from servectl.profile.loader import read_profile

    loaded = read_profile("demo", folders=search_path(environ=os.environ))
    plan = compile_plan(
        loaded.profile,
        catalog=loaded.flag_catalog(),
        source="demo.yaml",
        state_dir=Path("/s"),
        home=Path("/h"),
        environ={},
    )
    assert "user" not in plan.to_dict()["docker"] and "group_add" not in plan.to_dict()["docker"]


def test_the_profiles_model_folders_are_mounted_read_only_at_their_host_paths(tmp_path: Path) -> None:
    # a swap on request in the container preflights and stages the weights as a swap here does
    env = _world(tmp_path)
    weights, draft = tmp_path / "weights" / "glm", tmp_path / "draft"
    weights.mkdir(parents=True, mode=0o755)
    draft.mkdir(mode=0o755)
    (tmp_path / "weights").chmod(0o755)
    profiles = Path(env["SERVECTL_PROFILES"])
    (profiles / "big.yaml").write_text(
        f"name: big\nextends: demo\nmodel: {{path: {weights}}}\n"
        f"engine: {{speculative: {{algorithm: EAGLE, draft_model_path: {draft}}}}}\n"
    )
    (profiles / "gone.yaml").write_text(f"name: gone\nextends: demo\nmodel: {{path: {tmp_path / 'nowhere'}}}\n")
    spec = gateway_spec(image="img:1", config_file=tmp_path / "gw.yaml", environ=env)
    mounts = {m.source: m for m in spec.mounts}
    for folder in (weights, draft):
        assert mounts[str(folder)].target == str(folder) and mounts[str(folder)].read_only
    assert str(tmp_path / "nowhere") not in mounts  # a folder that is not there is not made by Docker


def test_the_gateway_image_holds_servectl_at_its_host_path() -> None:
    # every path servectl derives from its own files (a shipped profile's ../examples/demo-model) is then
    # the host's path in the container too, so the engines it starts get bind mounts that exist here
    from servectl.gateway.image import image_files, package_dir

    files = dict(image_files())
    assert files[(package_dir() / "paths.py").as_posix()] == package_dir() / "paths.py"
    demo = package_dir() / "data" / "examples" / "demo-model" / "config.json"
    assert files[demo.as_posix()] == demo


def test_the_catalog_cache_with_the_route_tables_of_images_is_mounted_read_only(tmp_path: Path) -> None:
    # issue 41: a gateway in its container serves the paths the route table read from the image lists
    # (catalog extract writes it beside the catalog, in the user's cache, outside the state folder)
    env = _world(tmp_path)
    cache = tmp_path / "cache" / "catalogs"
    cache.mkdir(parents=True)
    (tmp_path / "cache").chmod(0o755)
    cache.chmod(0o755)
    env["SERVECTL_CATALOG_CACHE"] = str(cache)
    spec = gateway_spec(image="img:1", config_file=tmp_path / "gw.yaml", environ=env)
    mounts = {m.source: m for m in spec.mounts}
    assert mounts[str(cache)].target == str(cache) and mounts[str(cache)].read_only
    assert dict(spec.environment)["SERVECTL_CATALOG_CACHE"] == str(cache)
    from servectl.paths import catalog_cache_dir

    inside = {k: v for k, v in spec.environment if v is not None}
    assert catalog_cache_dir(inside) == cache  # the container finds the tables where the host keeps them


def test_a_catalog_cache_inside_the_state_folder_is_not_mounted_twice(tmp_path: Path) -> None:
    env = _world(tmp_path)  # SERVECTL_HOME: the cache is <home>/catalogs, inside the mounted state folder
    (Path(env["SERVECTL_HOME"]) / "catalogs").mkdir(parents=True)
    spec = gateway_spec(image="img:1", config_file=tmp_path / "gw.yaml", environ=env)
    assert "SERVECTL_CATALOG_CACHE" not in dict(spec.environment)
    assert sum(1 for m in spec.mounts if "catalogs" in m.source) == 0
