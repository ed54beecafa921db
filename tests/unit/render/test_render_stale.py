"""compose/ and k8s/ hold the rendered files of the shipped profiles; they must match fresh renders."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from render_support import NO_EXTRACTED_CATALOGS, REPO

from servectl.render import GENERATED_MARK
from servectl.render.files import TARGET_DIRS, TARGETS, render_all, render_shipped, stale_generated_files

FIX = "run `servectl render --all` and commit compose/ and k8s/"


def test_committed_renders_match_fresh_renders_of_the_shipped_profiles() -> None:
    rendered = render_shipped(catalogs=NO_EXTRACTED_CATALOGS, project_dir=REPO)
    assert rendered.files, "no shipped profile rendered"
    for file in rendered.files:
        assert file.path is not None
        shown = file.path.relative_to(REPO)
        assert file.path.is_file(), f"{shown} is missing; {FIX}"
        assert file.path.read_text(encoding="utf-8") == file.text, f"{shown} is stale; {FIX}"


def test_no_committed_render_is_left_from_a_profile_that_is_gone() -> None:
    rendered = render_shipped(catalogs=NO_EXTRACTED_CATALOGS, project_dir=REPO)
    stale = stale_generated_files(rendered, project_dir=REPO, targets=TARGETS)
    assert stale == [], f"{[str(p.relative_to(REPO)) for p in stale]} belong to no shipped profile; {FIX}"


def test_renders_do_not_depend_on_home_working_folder_or_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = {f.path: f.text for f in render_shipped(catalogs=NO_EXTRACTED_CATALOGS, project_dir=REPO).files}
    monkeypatch.setenv("HOME", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("SERVECTL_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("MODEL_ROOT", "/data/models")
    monkeypatch.chdir(tmp_path)
    after = {f.path: f.text for f in render_shipped(catalogs=NO_EXTRACTED_CATALOGS, project_dir=REPO).files}
    assert after == before
    for text in after.values():
        assert str(REPO) not in text and str(tmp_path) not in text and "/data/models" not in text


def test_renders_do_not_depend_on_where_the_project_is_checked_out(tmp_path: Path) -> None:
    copy = tmp_path / "checkout"
    for folder in ("profiles", "examples", *TARGET_DIRS.values()):
        shutil.copytree(REPO / folder, copy / folder)
    moved = {
        f.path.relative_to(copy): f.text
        for f in render_shipped(catalogs=NO_EXTRACTED_CATALOGS, project_dir=copy).files
        if f.path
    }
    here = {
        f.path.relative_to(REPO): f.text
        for f in render_shipped(catalogs=NO_EXTRACTED_CATALOGS, project_dir=REPO).files
        if f.path
    }
    assert moved == here


def test_render_all_writes_the_files_and_removes_only_generated_leftovers(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(REPO / "profiles", project / "profiles")
    shutil.copytree(REPO / "examples", project / "examples")
    (project / "compose").mkdir()
    leftover = project / "compose" / "retired.yaml"
    leftover.write_text(f"# {GENERATED_MARK}\nname: x\n", encoding="utf-8")
    handwritten = project / "compose" / "mine.yaml"
    handwritten.write_text("services: {}\n", encoding="utf-8")

    result = render_all(catalogs=NO_EXTRACTED_CATALOGS, project_dir=project)

    assert result.removed == (leftover,)
    assert not leftover.exists() and handwritten.exists()
    for file in result.files:
        assert file.path is not None
        assert file.path.read_text(encoding="utf-8") == (REPO / file.path.relative_to(project)).read_text()
    skipped = {(s.profile, s.target) for s in result.skipped}
    assert ("glm53-exl3-524k", None) in skipped  # a template: filled in by `servectl adopt`
    assert ("glm53-exl3-q4-tp4", "k8s") in skipped  # loopback on the host network
