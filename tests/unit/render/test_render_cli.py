"""`servectl render` on the command line: output, files, errors, and no heavy imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from render_support import RENDER_PROFILES, REPO


def servectl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        [sys.executable, "-m", "servectl", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_render_to_stdout_prints_the_compose_file_with_paths_relative_to_here() -> None:
    done = servectl("render", "demo", "--to", "compose", "--out", "-", cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "# regenerate: servectl render demo --to compose" in done.stdout
    document = yaml.safe_load(done.stdout)
    assert document["services"]["demo"]["volumes"][0]["source"] == "./examples/demo-model"


def test_render_writes_the_default_file_under_the_working_folder(tmp_path: Path) -> None:
    done = servectl("render", "glm53-393k", "--to", "k8s", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = tmp_path / "k8s" / "glm53-393k.yaml"
    assert done.stdout.strip() == f"wrote {written}"
    kinds = [d["kind"] for d in yaml.safe_load_all(written.read_text())]
    assert kinds == ["ConfigMap", "Deployment", "Service"]


def test_render_writes_where_out_says(tmp_path: Path) -> None:
    out = tmp_path / "deploy" / "x.yaml"
    done = servectl("render", str(RENDER_PROFILES / "multinode.yaml"), "--to", "k8s", "--out", str(out), cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "kind: LeaderWorkerSet" in out.read_text()


def test_unknown_target_is_one_error_line_with_exit_2() -> None:
    done = servectl("render", "demo", "--to", "helm", cwd=REPO)
    assert done.returncode == 2
    assert done.stderr == "error: --to helm: unknown render target; use one of compose, k8s\n"


def test_multinode_to_compose_is_one_error_line_with_the_fix() -> None:
    done = servectl("render", str(RENDER_PROFILES / "multinode.yaml"), "--to", "compose", "--out", "-", cwd=REPO)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("error: multinode: nodes: 2 needs several hosts")
    assert "render it with --to k8s" in done.stderr


def test_missing_target_and_mixing_all_with_a_name_are_usage_errors() -> None:
    done = servectl("render", "demo", cwd=REPO)
    assert (done.returncode, done.stderr) == (2, "error: --to is required: compose or k8s\n")
    done = servectl("render", "demo", "--all", cwd=REPO)
    assert done.returncode == 2 and "--all renders every shipped profile" in done.stderr


def test_render_imports_neither_the_docker_sdk_nor_nvml() -> None:
    code = (
        "import sys\n"
        "from servectl.cli.app import main\n"
        "sys.argv = ['servectl', 'render', 'glm53-393k', '--to', 'k8s', '--out', '-']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('docker', 'pynvml'))\n"
        "print('HEAVY', heavy)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "HEAVY []"
