"""The image is the truth: catalogs extracted from real SGLang 0.5.23 test images, and argv parsed inside them.

The images (``servectl_ci.sglang_image``) hold the published sglang 0.5.23 wheel and what its
``server_args`` imports on a CPU; ``patched`` adds ``--exl3-cache-mode``, the ``exl3`` quantization choice, and
removes ``--enable-flashinfer-allreduce-fusion``. The first build takes minutes; later runs find them by hash.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from servectl_ci import sglang_image
from servectl_ci.sglang_image import SglangTestImages

from servectl.adapters.docker import LABEL_ONESHOT, DockerSdkEngine
from servectl.adapters.engine_image import parse_in_image
from servectl.plan.resolve import resolve
from servectl.profile.api_routes import load_routes
from servectl.profile.catalog import CATALOG_DIR, FlagCatalog
from servectl.profile.catalog_diff import diff_catalogs
from servectl.service.catalog import extract_catalog

REPO = Path(__file__).resolve().parents[2]
SRC = str(REPO / "src")
#: Shipped runnable profiles and the test image whose parser accepts them (EXL3 needs the patched build).
UPSTREAM_PROFILES = ("glm53-393k", "glm53-524k-bringup")
EXL3_PROFILES = ("glm53-exl3-q4-tp4",)


@pytest.fixture(scope="session")
def images(docker_client: Any) -> SglangTestImages:
    return sglang_image.build_test_images(docker_client=docker_client)


@pytest.fixture(scope="session")
def engine() -> Iterator[DockerSdkEngine]:
    sdk = DockerSdkEngine(environ=os.environ)
    yield sdk
    sdk.close()  # its client's sockets: an unclosed one is an unraisable ResourceWarning at some later GC


@pytest.fixture(scope="session")
def extracted(
    images: SglangTestImages, engine: DockerSdkEngine, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    store = tmp_path_factory.mktemp("catalogs")
    return {
        "store": store,
        "upstream": extract_catalog(image=images.upstream, engine=engine, store_dir=store),
        "patched": extract_catalog(image=images.patched, engine=engine, store_dir=store),
    }


def _catalog(document: Any, name: str) -> FlagCatalog:
    return FlagCatalog.from_dict(document, name=name)


def test_extraction_from_the_upstream_image_is_the_shipped_catalog(extracted: dict[str, Any]) -> None:
    result = extracted["upstream"]
    shipped = json.loads((CATALOG_DIR / "sglang-0.5.23.json").read_text())
    assert result.version == "0.5.23" and result.python == "python3"
    assert result.option_count == len(shipped["options"]) > 500
    assert result.document["options"] == shipped["options"]  # flags, dest, kind, type, nargs, choices, default
    assert diff_catalogs(_catalog(shipped, "shipped"), _catalog(result.document, "extracted")) == []
    stored = json.loads(result.stored_at.read_text())
    assert stored["image"]["id"] == result.image.id and stored["image"]["refs"] == [result.image.refs[0]]
    # the image's route table, read in the image, is the shipped one (every Anthropic and Ollama path with it)
    (routes,) = result.routes_written
    assert json.loads(routes.read_text())["routes"] == load_routes()["routes"] and result.routes_error is None


def test_diff_of_the_two_images_finds_exactly_the_three_patched_changes(extracted: dict[str, Any]) -> None:
    upstream = _catalog(extracted["upstream"].document, "upstream")
    patched = _catalog(extracted["patched"].document, "patched")
    changes = diff_catalogs(upstream, patched)
    assert [(c.kind, c.flag, c.field, c.after) for c in changes] == [
        ("changed", "--quantization", "choices", "+exl3"),
        ("added", sglang_image.PATCH_ADDED_FLAG, "", "[str] choices={fp16, q8}"),
        ("removed", sglang_image.PATCH_REMOVED_FLAG, "", ""),
    ]


def test_no_throwaway_container_is_left_behind(extracted: dict[str, Any], docker_client: Any) -> None:
    assert docker_client.containers.list(all=True, filters={"label": LABEL_ONESHOT}) == []


@pytest.mark.parametrize(("names", "variant"), [(UPSTREAM_PROFILES, "upstream"), (EXL3_PROFILES, "patched")])
def test_the_shipped_profiles_argv_parses_in_the_image_that_runs_it(
    images: SglangTestImages,
    engine: DockerSdkEngine,
    names: tuple[str, ...],
    variant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MODEL_ROOT", "/models")
    monkeypatch.setenv("RUNTIME_ASSETS", "/assets")
    image = getattr(images, variant)
    for name in names:
        verdict = parse_in_image(image=image, argv=resolve(name, environ=os.environ).plan.engine_argv, engine=engine)
        assert verdict.parsed, f"{name}: {verdict.error}"
        assert verdict.sglang_version == "0.5.23"


class Project:
    """A profile folder whose profiles extend the shipped ones onto the test images, run through the CLI."""

    def __init__(self, root: Path, images: SglangTestImages) -> None:
        self.root, self.images = root, images
        (root / "profiles").mkdir()
        self.home = root / "home"

    def profile(self, name: str, data: dict[str, Any]) -> None:
        (self.root / "profiles" / f"{name}.yaml").write_text(yaml.safe_dump({"name": name, **data}))

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": SRC, "SERVECTL_HOME": str(self.home), "COLUMNS": "200"}
        env.update(MODEL_ROOT="/models", RUNTIME_ASSETS="/assets")
        return subprocess.run(
            [sys.executable, "-m", "servectl", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=self.root,
            timeout=300,
        )


@pytest.fixture
def project(tmp_path: Path, images: SglangTestImages) -> Project:
    return Project(tmp_path, images)


def test_validate_in_image_accepts_on_upstream_and_rejects_a_flag_only_the_patched_image_knows(
    project: Project,
) -> None:
    up, patched = project.images.upstream, project.images.patched
    extract = project.cli("catalog", "extract", patched, "--out", "catalogs/custom.json")
    assert extract.returncode == 0, extract.stderr
    assert "extracted 531 options of SGLang 0.5.23" in extract.stdout
    assert (project.root / "catalogs" / "custom.json").is_file()
    project.profile("on-upstream", {"extends": "glm53-524k-bringup", "image": {"ref": up, "digest": None}})
    # the patched build's catalog says yes, the upstream image's own parser says no
    project.profile(
        "patched-flag-on-upstream",
        {
            "extends": "glm53-524k-bringup",
            "image": {"ref": up, "digest": None},
            "engine": {"catalog": "../catalogs/custom.json", "args": {"exl3-cache-mode": "q8"}},
        },
    )
    ok = project.cli("validate", "on-upstream", "--in-image")
    assert ok.returncode == 0, ok.stderr
    assert "in-image: parsed" in ok.stdout and "SGLang 0.5.23" in ok.stdout
    bad = project.cli("validate", "patched-flag-on-upstream", "--in-image")
    assert bad.returncode == 2
    assert "engine.parse" in bad.stderr
    assert "sglang serve: error: unrecognized arguments: --exl3-cache-mode q8" in bad.stderr


def test_a_profile_whose_catalog_is_the_patched_images_accepts_exl3_without_catalog_extend(project: Project) -> None:
    patched = project.images.patched
    profile = {
        "extends": "glm53-exl3-q4-tp4",
        "image": {"ref": patched, "digest": None},
        "engine": {"catalog": "image", "catalog_extend": None, "args": {"exl3-cache-mode": "q8"}},
    }
    project.profile("exl3-on-patched", profile)
    before = project.cli("validate", "exl3-on-patched")
    assert before.returncode == 2
    assert f"no catalog has been extracted from image {patched} yet" in before.stderr
    assert project.cli("catalog", "extract", "exl3-on-patched").returncode == 0
    after = project.cli("validate", "exl3-on-patched", "--in-image")
    assert after.returncode == 0, after.stderr
    assert "ok      exl3-on-patched" in after.stdout and "in-image: parsed" in after.stdout
    diff = project.cli("catalog", "diff", "sglang-0.5.23", "exl3-on-patched")
    assert "~ --quantization  choices: +exl3" in diff.stdout and "3 change(s)" in diff.stdout


def test_preflight_runs_engine_parse_and_fails_with_sglangs_message(project: Project) -> None:
    project.profile(
        "bad-choice",
        {
            "extends": "demo",
            "image": {"ref": project.images.upstream, "build": None, "digest": None},
            "engine": {"catalog": "../catalogs/custom.json", "args": {"exl3-cache-mode": "q8"}},
        },
    )
    assert project.cli("catalog", "extract", project.images.patched, "--out", "catalogs/custom.json").returncode == 0
    report = project.cli("preflight", "bad-choice", "--json")
    checks = {c["id"]: c for c in json.loads(report.stdout)["checks"]}
    assert checks["engine.parse"]["result"] == "fail"
    assert "unrecognized arguments: --exl3-cache-mode q8" in checks["engine.parse"]["message"]
    forced = project.cli("preflight", "bad-choice", "--json", "--force", "engine.parse")
    assert {c["id"]: c for c in json.loads(forced.stdout)["checks"]}["engine.parse"]["result"] == "skipped"


def test_preflight_fails_a_warm_standby_on_an_image_without_torch_memory_saver(project: Project) -> None:
    """The SGLang 0.5.23 test image has no torch_memory_saver (installed without it): SGLang would raise its
    ImportError at start with --enable-memory-saver, so preflight says so before anything starts (issue 38)."""
    project.profile(
        "warm-upstream",
        {"extends": "demo", "image": {"ref": project.images.upstream, "build": None, "digest": None},
         "swap": {"standby": "warm"}},
    )  # fmt: skip
    report = project.cli("preflight", "warm-upstream", "--json")
    check = {c["id"]: c for c in json.loads(report.stdout)["checks"]}["engine.parse"]
    assert check["result"] == "fail", check
    needs = "cannot import torch_memory_saver, which --enable-memory-saver (swap.standby: warm) needs"
    assert needs in check["message"]
    assert "No module named 'torch_memory_saver'" in check["message"]


def test_preflight_reads_a_warm_profiles_image_environment(project: Project, tmp_path: Path) -> None:
    """An image whose own ENV sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (torch_memory_saver then turns
    itself off): image.standby_env fails a warm profile on it, and passes once engine.env overrides the variable."""
    tag = f"servectl-test-standby-env:{os.getpid()}"
    dockerfile = f"FROM {project.images.upstream}\nENV PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
    subprocess.run(["docker", "build", "-q", "-t", tag, "-"], input=dockerfile, text=True, check=True, timeout=120)
    try:
        base = {"extends": "demo", "image": {"ref": tag, "build": None, "digest": None}, "swap": {"standby": "warm"}}
        project.profile("warm-env", base)
        project.profile("warm-env-fixed", {**base, "engine": {"env": {"PYTORCH_CUDA_ALLOC_CONF": "backend:native"}}})
        skip = ("--force", "engine.parse")  # the test image lacks torch_memory_saver: engine.parse says so
        report = json.loads(project.cli("preflight", "warm-env", "--json", *skip).stdout)
        check = {c["id"]: c for c in report["checks"]}["image.standby_env"]
        assert check["result"] == "fail", check
        assert check["message"].startswith("the image sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
        fixed = json.loads(project.cli("preflight", "warm-env-fixed", "--json", *skip).stdout)
        assert {c["id"]: c for c in fixed["checks"]}["image.standby_env"]["result"] == "pass"
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=60)
