"""SGLang's ``--admin-api-key`` as the API key is: referenced by ``serve.admin_api_key_env``/``_file``, never
written in a profile, read into its flag inside the container (never in argv, env or ``docker inspect``), sent by
the warm standby on release and resume, rendered as a secret, and adopted from a running container as a
variable's name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servectl.errors import UsageError
from servectl.plan.adopt import ADMIN_KEY_ENV, adopt_container, adoption_yaml
from servectl.plan.compile import (
    ADMIN_KEY_CONTAINER_PATH,
    API_KEY_CONTAINER_PATH,
    LaunchPlan,
    compile_plan,
    key_wrapper,
)
from servectl.plan.container_match import container_diff, container_fields, split_engine_command
from servectl.plan.resolve import plan_for
from servectl.plan.script import dry_run_text
from servectl.profile.loader import ProfileFolder, ProfileSearch
from servectl.profile.validate import load_profile
from servectl.render.compose import render_compose
from servectl.render.k8s import k8s_notes, render_k8s
from servectl.service.host_files import (
    discard_key_file,
    read_admin_key,
    read_plan_keys,
    remove_key_file,
    write_plan_files,
)
from servectl.service.logs import referenced_secrets
from servectl.testing.inspect import container_inspect

API = "sk-user-0123456789abcdef"
ADMIN = "sk-admin-0123456789abcdef"
PROFILE = (
    "name: k\nimage: {ref: x/y:1}\nmodel: {path: /m, served_name: m}\n"
    "serve: {port: 8181, role: bench, api_key_env: USER_KEY, admin_api_key_file: admin.key}\n"
)


def load(tmp_path: Path, text: str = PROFILE):  # type: ignore[no-untyped-def]
    folder = tmp_path / "profiles"
    folder.mkdir(exist_ok=True)
    (folder / "k.yaml").write_text(text)
    (folder / "admin.key").write_text(ADMIN + "\n")
    return load_profile("k", folders=ProfileSearch((ProfileFolder(folder, "test"),), catalogs=tmp_path / "catalogs"))


def plan_of(tmp_path: Path, text: str = PROFILE) -> LaunchPlan:
    loaded = load(tmp_path, text)
    return compile_plan(
        loaded.profile,
        catalog=loaded.flag_catalog(),
        source="k.yaml",
        state_dir=tmp_path / "state",
        home=tmp_path,
        environ={},
    )


def test_the_wrapper_of_the_api_key_alone_is_the_text_it_always_was() -> None:
    """Running services were started with this exact text: a new one would change their plan hashes, and every
    one of them would read as 'changed' after an upgrade."""
    assert key_wrapper([API_KEY_CONTAINER_PATH], "sglang.launch_server") == (
        "import runpy,sys;"
        "k=open('/run/secrets/servectl-api-key').read().strip();"
        "sys.argv=['sglang.launch_server',*sys.argv[1:],'--api-key',k];"
        "runpy.run_module('sglang.launch_server',run_name='__main__',alter_sys=True)"
    )


def test_both_keys_are_references_and_the_wrapper_reads_each_into_its_flag(tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    text = dry_run_text(plan) + plan.to_json()
    assert ADMIN not in text and API not in text
    assert plan.secret is not None and plan.secret.setting == "serve.api_key_env"
    assert plan.admin_secret is not None and plan.admin_secret.setting == "serve.admin_api_key_file"
    assert plan.admin_secret.name == str(tmp_path / "profiles" / "admin.key")  # relative to the profile's file
    assert "--admin-api-key" not in plan.engine_argv
    targets = {m.target: m.source for m in plan.docker.mounts}
    assert targets[ADMIN_KEY_CONTAINER_PATH] == str(tmp_path / "profiles" / "admin.key")
    assert targets[API_KEY_CONTAINER_PATH] == str(tmp_path / "state" / "generated" / "k" / "api-key")
    assert "# admin key: read from" in dry_run_text(plan)
    assert LaunchPlan.from_dict(json.loads(plan.to_json())) == plan
    command = split_engine_command(list(plan.docker.command))
    assert command is not None and command.keys == ("api_key", "admin_api_key")

    # run the wrapper as the container would, with its two files, and a module that prints the argv it got
    (tmp_path / "probe.py").write_text("import json, sys\nprint(json.dumps(sys.argv))\n")
    (tmp_path / "user.key").write_text(API + "\n")
    files = {API_KEY_CONTAINER_PATH: str(tmp_path / "user.key"), ADMIN_KEY_CONTAINER_PATH: plan.admin_secret.name}
    wrapper = plan.docker.command[2].replace("sglang.launch_server", "probe")
    runner = (
        "import builtins, json, sys\n"
        "files = json.loads(sys.argv.pop(1)); real = builtins.open\n"
        "builtins.open = lambda p, *a, **k: real(files.get(p, p), *a, **k)\n"
        f"exec({wrapper!r})\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", runner, json.dumps(files), "--port", "8181"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    argv = json.loads(done.stdout)
    assert argv[1:] == ["--port", "8181", "--api-key", API, "--admin-api-key", ADMIN]


def test_without_an_admin_key_the_plan_has_no_admin_field_so_old_plans_hash_the_same(tmp_path: Path) -> None:
    loaded = load(tmp_path, PROFILE.replace(", admin_api_key_file: admin.key", ""))
    plan = plan_for(loaded, environ={})
    assert plan.admin_secret is None and "admin_secret" not in plan.to_dict()
    assert LaunchPlan.from_dict(plan.to_dict()) == plan


def test_the_host_writes_an_env_admin_key_0600_reads_it_for_the_standby_and_removes_it(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, PROFILE.replace("admin_api_key_file: admin.key", "admin_api_key_env: ADMIN_KEY"))
    environ = {"USER_KEY": API, "ADMIN_KEY": ADMIN}
    with pytest.raises(UsageError, match=r"k.yaml: serve.admin_api_key_env: \$ADMIN_KEY is not set; export"):
        read_plan_keys(plan, {"USER_KEY": API})  # before anything starts
    keys = read_plan_keys(plan, environ)
    written = write_plan_files(plan, keys=keys)
    admin_file = tmp_path / "state" / "generated" / "k" / "admin-api-key"
    assert admin_file in written and admin_file.read_text() == ADMIN + "\n"
    assert admin_file.stat().st_mode & 0o777 == 0o600
    assert read_admin_key(plan, environ) == ADMIN  # what the standby sends on release and resume
    assert ADMIN in referenced_secrets(plan, environ)  # redacted from the logs servectl shows
    mounts = [(m.source, m.target) for m in plan.docker.mounts]
    remove_key_file(mounts, tmp_path / "state")
    assert not admin_file.exists() and not (tmp_path / "state" / "generated" / "k" / "api-key").exists()
    write_plan_files(plan, keys=keys)
    discard_key_file(plan)
    assert not admin_file.exists()


def test_compose_and_kubernetes_take_the_admin_key_as_a_secret(tmp_path: Path) -> None:
    loaded = load(tmp_path, PROFILE.replace("admin_api_key_file: admin.key", "admin_api_key_env: ADMIN_KEY"))
    plan = plan_for(loaded, environ={})
    compose = render_compose(plan, loaded.profile)
    assert compose["secrets"]["servectl-admin-api-key"] == {"environment": "ADMIN_KEY"}
    targets = {s["source"]: s["target"] for s in compose["services"]["k"]["secrets"]}
    assert targets == {
        "servectl-api-key": API_KEY_CONTAINER_PATH,
        "servectl-admin-api-key": ADMIN_KEY_CONTAINER_PATH,
    }
    manifests = render_k8s(plan, loaded.profile)
    notes = " ".join(k8s_notes(plan, loaded.profile, manifests))
    assert '--from-literal=admin-api-key="$ADMIN_KEY"' in notes and '--from-literal=api-key="$USER_KEY"' in notes
    deployment = next(m for m in manifests if m["kind"] in ("Deployment", "StatefulSet"))
    mounts = deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "admin-api-key", "mountPath": ADMIN_KEY_CONTAINER_PATH, "subPath": "admin-api-key",
            "readOnly": True} in mounts  # fmt: skip


def test_adopting_a_container_with_an_admin_key_names_a_variable_and_matches_it(tmp_path: Path) -> None:
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "/model", "--host", "0.0.0.0"]
    argv += ["--port", "30000", "--admin-api-key", ADMIN]
    data = container_inspect(argv, binds=[("/m", "/model", True)])
    adoption = adopt_container(data, image=None)
    text = adoption_yaml(adoption)
    assert ADMIN not in text and ADMIN_KEY_ENV in adoption.exports
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / f"{adoption.name}.yaml").write_text(text)
    loaded = load_profile(
        adoption.name, folders=ProfileSearch((ProfileFolder(folder, "test"),), catalogs=tmp_path / "catalogs")
    )
    assert loaded.profile.serve.admin_api_key_env == ADMIN_KEY_ENV
    assert "admin-api-key" not in loaded.profile.engine.args
    plan = plan_for(loaded, environ={"HOME": "/home/u"})
    catalog = loaded.flag_catalog()
    assert container_fields(data, catalog)["engine"]["admin_api_key"] == "***"  # the key itself never compared
    assert not [d for d in container_diff(plan, data, catalog) if "admin" in d]
