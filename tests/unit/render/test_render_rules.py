"""Profile rules that rendering relies on: multi-node flags come from `nodes`, parallelism counts nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
from render_support import FIXTURE_FOLDERS, NO_EXTRACTED_CATALOGS, RENDER_PROFILES

from servectl.errors import ProfileError
from servectl.profile.loader import ProfileFolder, ProfileSearch
from servectl.profile.validate import load_profile


def write_variant(tmp_path: Path, old: str, new: str) -> Path:
    text = (RENDER_PROFILES / "multinode.yaml").read_text(encoding="utf-8")
    assert old in text
    (tmp_path / "multinode.yaml").write_text(text.replace(old, new), encoding="utf-8")
    return tmp_path


def problems_of(folder: Path) -> list[str]:
    with pytest.raises(ProfileError) as caught:
        load_profile(
            "multinode", folders=ProfileSearch((ProfileFolder(folder, "test"),), catalogs=NO_EXTRACTED_CATALOGS)
        )
    return [str(p) for p in caught.value.problems]


@pytest.mark.parametrize(
    "flag_line",
    ["nnodes: 2", "node-rank: 0", "dist-init-addr: 10.0.0.1:20000", "nccl-init-addr: 10.0.0.1:20000"],
)
def test_multinode_flags_in_engine_args_are_a_profile_error(tmp_path: Path, flag_line: str) -> None:
    folder = write_variant(tmp_path, "    trust-remote-code: true\n", f"    trust-remote-code: true\n    {flag_line}\n")
    key = flag_line.split(":")[0]
    (problem,) = problems_of(folder)
    line = (folder / "multinode.yaml").read_text().splitlines().index(f"    {flag_line}") + 1
    assert problem.startswith(f"{folder / 'multinode.yaml'}:{line}: engine.args.{key}: --{key} ")
    assert "filled in by `servectl render --to k8s` from `nodes:`; remove it" in problem


def test_the_multinode_fixture_is_valid_because_tp_counts_every_node() -> None:
    loaded = load_profile("multinode", folders=FIXTURE_FOLDERS)
    assert loaded.profile.nodes == 2 and loaded.profile.engine.tp == 16


def test_tp_must_cover_the_gpus_of_every_node(tmp_path: Path) -> None:
    folder = write_variant(tmp_path, "  tp: 16\n", "  tp: 8\n")
    (problem,) = problems_of(folder)
    assert "engine.tp: tp 8 does not match 8 GPU devices [0, 1, 2, 3, 4, 5, 6, 7] on each of 2 nodes" in problem
