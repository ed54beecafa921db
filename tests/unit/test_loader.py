"""Loading profiles: search path, extends, located errors with did-you-mean."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from servectl.errors import ProfileError, UsageError
from servectl.profile.loader import discover, search_path
from servectl.profile.validate import load_profile

Write = Callable[[str, str], Path]
Minimal = Callable[[str], str]


def problems_of(name: str) -> list[str]:
    with pytest.raises(ProfileError) as info:
        load_profile(name, folders=search_path(environ=os.environ))
    return info.value.lines()


def test_minimal_profile_loads_with_defaults(write_profile: Write, minimal: Minimal) -> None:
    write_profile("p", minimal("p"))
    loaded = load_profile("p", folders=search_path(environ=os.environ))
    assert loaded.profile.engine.tp == 1
    assert loaded.profile.gpus.vram_reserve_mib == 3072
    assert loaded.profile.serve.network == "bridge"


def test_unknown_key_names_file_line_and_suggests_the_close_key(write_profile: Write, minimal: Minimal) -> None:
    write_profile("p", minimal("p") + "engine:\n  tp: 1\n  contxt_length: 8192\n")
    (line,) = problems_of("p")
    assert line == "profiles/p.yaml:7: engine.contxt_length: unknown key; did you mean 'context_length'?"


def test_all_problems_are_reported_at_once_one_per_line(write_profile: Write, minimal: Minimal) -> None:
    write_profile(
        "p",
        minimal("p").replace("role: bench", "role: benchmark") + "engine: {tp: zero}\ngpus: {vram_reserve_mib: -1}\n",
    )
    lines = problems_of("p")
    assert len(lines) == 3
    assert any("serve.role" in line and "'benchmark'" in line for line in lines)
    assert any("engine.tp" in line and "'zero'" in line for line in lines)
    assert any("gpus.vram_reserve_mib" in line for line in lines)


def test_name_must_equal_file_name(write_profile: Write, minimal: Minimal) -> None:
    write_profile("p", minimal("other"))
    (line,) = problems_of("p")
    assert line.startswith("profiles/p.yaml:1: name: 'other' must equal the file name 'p'")


def test_yaml_syntax_error_has_a_line(write_profile: Write) -> None:
    write_profile("p", "name: p\nimage: [unclosed\n")
    (line,) = problems_of("p")
    assert line.startswith("profiles/p.yaml:") and "YAML syntax" in line


def test_repeated_key_is_an_error(write_profile: Write, minimal: Minimal) -> None:
    write_profile("p", minimal("p") + "description: a\ndescription: b\n")
    (line,) = problems_of("p")
    assert line == "profiles/p.yaml:6: description: key repeats; keep one"


def test_extends_merges_maps_and_replaces_lists(write_profile: Write, minimal: Minimal) -> None:
    write_profile(
        "_base",
        minimal("_base") + "gpus: {devices: [0, 1], arch: sm120}\nengine: {tp: 2, args: {chunked-prefill-size: 256}}\n",
    )
    write_profile("child", "name: child\nextends: _base\ngpus: {devices: [2, 3]}\nengine: {context_length: 4096}\n")
    p = load_profile("child", folders=search_path(environ=os.environ)).profile
    assert p.gpus.devices == [2, 3]
    assert p.gpus.arch == "sm120"  # map merged
    assert p.engine.tp == 2 and p.engine.context_length == 4096


def test_inherited_problem_points_at_the_base_file(write_profile: Write, minimal: Minimal) -> None:
    write_profile("_base", minimal("_base") + "engine:\n  tp: 3\n")
    write_profile("child", "name: child\nextends: _base\ngpus: {devices: [0, 1]}\n")
    (line,) = problems_of("child")
    assert line.startswith("profiles/_base.yaml:6: engine.tp: tp 3 does not match 2 GPU devices [0, 1]")


def test_extends_cycle_is_an_error(write_profile: Write) -> None:
    write_profile("a", "name: a\nextends: b\n")
    write_profile("b", "name: b\nextends: a\n")
    (line,) = problems_of("a")
    assert "extends: cycle: a -> b -> a" in line


def test_unknown_base_is_an_error(write_profile: Write) -> None:
    write_profile("a", "name: a\nextends: _nowhere\n")
    (line,) = problems_of("a")
    assert line.startswith("profiles/a.yaml:2: extends: profile '_nowhere' not found")


def test_unknown_profile_suggests_close_names(write_profile: Write, minimal: Minimal) -> None:
    write_profile("glm-fast", minimal("glm-fast"))
    with pytest.raises(UsageError, match="did you mean glm-fast"):
        load_profile("glm-fsat", folders=search_path(environ=os.environ))


def test_first_folder_on_the_search_path_wins(
    write_profile: Write, minimal: Minimal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_profile("p", minimal("p"))
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "p.yaml").write_text(minimal("p").replace("8180", "9000"))
    (extra / "q.yaml").write_text(minimal("q") + "extends: p\n")
    monkeypatch.setenv("SERVECTL_PROFILES", str(extra))
    files = discover(folders=search_path(environ=os.environ))
    assert files["p"].origin == "./profiles" and files["p"].shadows == (extra / "p.yaml",)
    assert load_profile("p", folders=search_path(environ=os.environ)).profile.serve.port == 8180
    # a user's profile in another folder can extend one found earlier on the path
    assert load_profile("q", folders=search_path(environ=os.environ)).profile.serve.port == 8180
    origins = [f.origin for f in search_path(environ=os.environ)]
    assert origins == ["./profiles", "SERVECTL_PROFILES", "user", "shipped"]


def test_relative_model_path_resolves_against_the_profile_file(
    write_profile: Write, minimal: Minimal, profile_dir: Path
) -> None:
    write_profile("p", minimal("p").replace("/models/m", "../weights/m"))
    assert load_profile("p", folders=search_path(environ=os.environ)).profile.model.path == str(
        profile_dir.parent / "weights" / "m"
    )
