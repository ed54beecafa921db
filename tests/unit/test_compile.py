"""The compiler: shipped profiles compile to the seeds' exact launches; plans are pure and stable."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from servectl.plan.compile import (
    ADAPTIVE_CONFIG_CONTAINER_PATH,
    LABEL_PLAN_HASH,
    LABEL_PROFILE,
    compile_plan,
    docker_run_argv,
)
from servectl.plan.script import dry_run_text
from servectl.profile.catalog import FlagCatalog
from servectl.profile.loader import search_path
from servectl.profile.validate import load_profile

REPO = Path(__file__).resolve().parents[2]
ENV = {"MODEL_ROOT": "/srv/models", "RUNTIME_ASSETS": "/srv/assets", "HOME": "/home/u"}

#: The registry recipe of seed 004 (glm53-flash-exl3-q4-rtxpro6000-sglang-tp4): its 24 flags, exactly.
EXL3_RECIPE_ARGV = [
    "--model-path",
    "/model",
    "--served-model-name",
    "glm-5.3-flash-exl3-q4",
    "--tp-size",
    "4",
    "--ep-size",
    "1",
    "--quantization",
    "exl3",
    "--context-length",
    "262144",
    "--kv-cache-dtype",
    "fp8_e4m3",
    "--attention-backend",
    "dsa",
    "--dsa-prefill-backend",
    "flashinfer_sparse_mla",
    "--dsa-decode-backend",
    "flashinfer_sparse_mla",
    "--linear-attn-backend",
    "triton",
    "--disable-shared-experts-fusion",
    "--chunked-prefill-size",
    "256",
    "--max-prefill-tokens",
    "256",
    "--max-running-requests",
    "256",
    "--mem-fraction-static",
    "0.80",
    "--cuda-graph-backend-decode",
    "full",
    "--cuda-graph-backend-prefill",
    "full",
    "--cuda-graph-max-bs-decode",
    "256",
    "--cuda-graph-max-bs-prefill",
    "1",
    "--reasoning-parser",
    "glm45",
    "--tool-call-parser",
    "glm47",
    "--host",
    "127.0.0.1",
    "--port",
    "8000",
]


@pytest.fixture(autouse=True)
def in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("SERVECTL_PROFILES", raising=False)


def plan_of(name: str, state: Path = Path("/state")):  # type: ignore[no-untyped-def]
    loaded = load_profile(name, folders=search_path(environ=os.environ))
    return compile_plan(
        loaded.profile,
        catalog=loaded.flag_catalog(),
        source=f"profiles/{name}.yaml",
        state_dir=state,
        home=Path("/home/u"),
        environ=ENV,
    )


def flags(argv: tuple[str, ...] | list[str]) -> list[str]:
    return sorted(t for t in argv if t.startswith("--"))


def test_exl3_recipe_reproduces_its_24_flags_values_env_and_mounts() -> None:
    plan = plan_of("glm53-exl3-q4-tp4")
    assert len(flags(EXL3_RECIPE_ARGV)) == 24
    assert flags(plan.engine_argv) == flags(EXL3_RECIPE_ARGV)
    catalog = FlagCatalog.load("sglang-0.5.23").extended({"choices": {"quantization": ["exl3"]}})
    # what SGLang's parser sees is identical (0.80 and 0.8 are the same float to argparse)
    assert catalog.parse_argv(list(plan.engine_argv)) == catalog.parse_argv(EXL3_RECIPE_ARGV)
    for flag, value in itertools.pairwise(EXL3_RECIPE_ARGV):
        if flag.startswith("--") and not value.startswith("--") and flag != "--mem-fraction-static":
            i = plan.engine_argv.index(flag)
            assert plan.engine_argv[i + 1] == value, flag
    assert plan.docker.environment == (("SGLANG_EXL3_MAX_BATCH_TOKENS", "256"),)
    mounts = {(m.source, m.target, m.read_only) for m in plan.docker.mounts}
    assert mounts == {
        ("/srv/models/GLM-5.3-Flash-EXL3-Q4", "/model", True),
        ("/srv/assets/chat-template-mm.jinja", "/chat-template.jinja", True),
    }
    assert plan.docker.network_mode == "host" and plan.docker.ports == ()
    assert plan.docker.device_ids == ("0", "1", "2", "3")


def test_promoted_393k_plan_carries_the_seed_facts() -> None:
    plan = plan_of("glm53-393k")
    argv = plan.engine_argv
    assert plan.docker.image.endswith("@sha256:0c0637959c3931829f05154087bbefd2c50003fb9b2010200ce0ec82f4d71a53")
    for flag, value in [
        ("--tp-size", "2"),
        ("--context-length", "393216"),
        ("--kv-cache-dtype", "fp8_e4m3"),
        ("--max-running-requests", "1"),
        ("--speculative-algorithm", "EAGLE"),
        ("--speculative-num-steps", "3"),
        ("--speculative-eagle-topk", "1"),
        ("--reasoning-parser", "glm45"),
        ("--tool-call-parser", "glm47"),
        ("--speculative-adaptive-config", ADAPTIVE_CONFIG_CONTAINER_PATH),
        ("--port", "8180"),
        ("--host", "0.0.0.0"),
    ]:
        assert argv[argv.index(flag) + 1] == value, flag
    assert "--disable-shared-experts-fusion" in argv and "--speculative-adaptive" in argv
    (ladder,) = plan.files
    assert json.loads(ladder.content) == {"1": {"candidate_steps": [3, 5]}}
    assert ladder.host_path == "/state/generated/glm53-393k/speculative-adaptive.json"
    assert any(m.target == ADAPTIVE_CONFIG_CONTAINER_PATH and m.read_only for m in plan.docker.mounts)
    assert [(p.host_ip, p.host_port, p.container_port) for p in plan.docker.ports] == [("127.0.0.1", 8180, 8180)]
    assert plan.docker.device_ids == ("0", "1") and plan.docker.ipc_mode == "host"
    assert ("memlock", -1, -1) in plan.docker.ulimits and plan.docker.init
    assert plan.docker.labels[LABEL_PROFILE] == "glm53-393k"
    assert plan.docker.labels[LABEL_PLAN_HASH] == plan.plan_hash


def test_bringup_profile_matches_the_script() -> None:
    argv = plan_of("glm53-524k-bringup").engine_argv
    for flag, value in [
        ("--context-length", "524288"),
        ("--max-total-tokens", "524288"),
        ("--max-running-requests", "4"),
        ("--max-mamba-cache-size", "28"),
        ("--mem-fraction-static", "0.99"),
        ("--port", "8180"),
    ]:
        assert argv[argv.index(flag) + 1] == value, flag
    assert "--enable-hierarchical-cache" not in argv


def test_plan_is_deterministic_and_hash_tracks_changes() -> None:
    a, b = plan_of("glm53-393k"), plan_of("glm53-393k")
    assert a == b and a.plan_hash == b.plan_hash
    assert plan_of("glm53-393k").plan_hash != plan_of("glm53-524k-bringup").plan_hash


def test_api_key_is_a_reference_and_never_in_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "k.yaml").write_text(
        "name: k\nimage: {ref: x/y:1}\nmodel: {path: /m, served_name: m}\n"
        "serve: {host: 0.0.0.0, port: 8181, role: bench, api_key_env: SECRET_API_KEY}\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SECRET_API_KEY", "sk-very-secret")
    loaded = load_profile("k", folders=search_path(environ=os.environ))
    plan = compile_plan(
        loaded.profile,
        catalog=loaded.flag_catalog(),
        source="k",
        state_dir=Path("/s"),
        home=Path("/h"),
        environ={"SECRET_API_KEY": "sk-very-secret"},
    )
    text = dry_run_text(plan) + plan.to_json()
    assert "sk-very-secret" not in text
    assert plan.secret is not None and plan.secret.name == "SECRET_API_KEY"
    assert "--api-key" not in plan.engine_argv
    assert plan.docker.command[:2] == ("python3", "-c") and "/run/secrets/servectl-api-key" in plan.docker.command[2]


def test_dry_run_docker_command_round_trips_through_the_shell() -> None:
    plan = plan_of("glm53-393k")
    text = dry_run_text(plan)
    command = text[text.index("docker run") : text.index("\n\n")]
    assert shlex.split(command.replace("\\\n", " ")) == docker_run_argv(plan.docker)


def test_docker_run_snapshot_of_demo() -> None:
    plan = plan_of("demo")
    assert docker_run_argv(plan.docker) == [
        "docker",
        "run",
        "-d",
        "--name",
        "servectl-demo",
        *[x for k, v in plan.docker.labels.items() for x in ("--label", f"{k}={v}")],
        "-p",
        "127.0.0.1:8190:8190",
        "-v",
        f"{REPO}/examples/demo-model:/model:ro",
        "-e",
        "STANDIN_CHUNK_TOKENS=2",
        "-e",
        "STANDIN_STARTUP_DELAY_S=3",
        "-e",
        "STANDIN_TOKEN_RATE=200",
        "--stop-timeout",
        "5",
        "--init",
        "servectl-standin:latest",
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/model",
        "--served-model-name",
        "demo",
        "--host",
        "0.0.0.0",
        "--port",
        "8190",
        "--tp-size",
        "1",
        "--context-length",
        "32768",
        "--max-running-requests",
        "4",
        "--reasoning-parser",
        "glm45",
        "--tool-call-parser",
        "glm47",
    ]


def test_unset_path_variable_is_one_clear_error() -> None:
    from servectl.errors import ProfileError

    loaded = load_profile("glm53-exl3-q4-tp4", folders=search_path(environ=os.environ))
    with pytest.raises(ProfileError, match=r"model.path: .*\$\{MODEL_ROOT\}, which is not set; export MODEL_ROOT="):
        compile_plan(
            loaded.profile, catalog=loaded.flag_catalog(), source="x", state_dir=Path("/s"), home=Path("/h"), environ={}
        )


def test_dry_run_imports_neither_docker_nor_nvml() -> None:
    code = (
        "import sys; sys.argv=['servectl','up','glm53-393k','--dry-run'];"
        "from servectl.cli.app import main\n"
        "try:\n main()\nexcept SystemExit as e:\n assert e.code == 0, e.code\n"
        "bad=[m for m in ('docker','pynvml','httpx','psutil') if m in sys.modules]\n"
        "assert not bad, bad"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin", "HOME": "/tmp"},
    )
    assert result.returncode == 0, result.stderr
    assert "docker run" in result.stdout


def test_warm_standby_compiles_to_the_memory_saver_and_cpu_backup_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "profiles").mkdir()
    base = "image: {ref: x/y:1}\nmodel: {path: /m, served_name: m}\nserve: {port: 8181, role: bench}\n"
    (tmp_path / "profiles" / "w.yaml").write_text("name: w\nswap: {standby: warm}\n" + base)
    (tmp_path / "profiles" / "c.yaml").write_text("name: c\n" + base)
    monkeypatch.chdir(tmp_path)

    def argv(name: str) -> tuple[str, ...]:
        loaded = load_profile(name, folders=search_path(environ=os.environ))
        plan = compile_plan(
            loaded.profile,
            catalog=loaded.flag_catalog(),
            source=name,
            state_dir=Path("/s"),
            home=Path("/h"),
            environ={},
        )
        return plan.engine_argv

    assert argv("w")[-2:] == ("--enable-memory-saver", "--enable-weights-cpu-backup")
    assert "--enable-memory-saver" not in argv("c") and "--enable-weights-cpu-backup" not in argv("c")
