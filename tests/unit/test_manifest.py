"""artifact-manifest.json: every file of a run folder with its hash, size, schema and provenance."""

from __future__ import annotations

import json
from pathlib import Path

from servectl.adapters.gpu import NullGpuInventory
from servectl.bench.manifest import (
    MANIFEST_FILE,
    RunEntry,
    check_manifest,
    host_facts,
    read_manifest,
    split_schema,
    write_manifest,
)
from servectl.testing.fakes import FakeGpuInventory, make_device

PROV = {"profile": "q", "plan_hash": "p" * 16, "image_digest": "sha256:" + "c" * 64, "model_revision": "d" * 40}


def write(folder: Path, name: str, data: object) -> Path:
    path = folder / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_host_facts_record_driver_cards_and_power_cap_of_the_profiles_cards_only() -> None:
    gpus = FakeGpuInventory.of(make_device(0), make_device(1, power_limit_w=None), make_device(2))
    facts = host_facts(gpus, [0, 1])
    assert facts["source"] == "nvml" and facts["driver_version"] == "580.95.05"
    assert facts["cuda_driver_version"] == "13.0"
    assert [(c["index"], c["power_limit_w"], c["memory_total_mib"]) for c in facts["cards"]] == [
        (0, 300.0, 97_887),
        (1, None, 97_887),  # the driver cannot tell: an explicit unknown
    ]
    assert "uuid" not in facts["cards"][0]  # nothing that identifies the machine
    assert host_facts(FakeGpuInventory(error="NVML unavailable: no driver"), [0]) == {
        "source": "unknown",
        "reason": "NVML unavailable: no driver",
    }
    assert host_facts(NullGpuInventory("profile p uses no GPUs")) == {
        "source": "unknown",
        "reason": "profile p uses no GPUs",
    }  # the null inventory's own reason, where None said "no GPU inventory (no NVIDIA driver, or ...)"


def test_the_manifest_lists_every_file_with_hash_size_schema_and_the_runs_provenance(tmp_path: Path) -> None:
    summary = write(tmp_path, "summary.json", {"schema": "servectl.bench/v1", "kind": "summary"})
    (tmp_path / "taper.png").write_bytes(b"\x89PNG....")
    host = {"source": "nvml", "driver_version": "580.95.05", "cards": []}
    write_manifest(tmp_path, run=RunEntry("bench", "r1", PROV, host), written=[summary])
    manifest = read_manifest(tmp_path)
    assert manifest is not None and manifest["schema"] == "servectl.manifest/v1"
    files = {f["path"]: f for f in manifest["files"]}
    assert set(files) == {"summary.json", "taper.png"}
    assert files["summary.json"]["schema"] == {"name": "servectl.bench", "version": 1}
    assert files["summary.json"]["size_bytes"] == summary.stat().st_size and len(files["summary.json"]["sha256"]) == 64
    assert files["summary.json"]["run_id"] == "r1" and files["taper.png"]["schema"] is None
    run = manifest["runs"]["r1"]
    assert run["provenance"] == PROV and run["host"] == host and run["servectl_version"]
    assert check_manifest(tmp_path) == []


def test_a_changed_or_missing_file_is_detected_one_line_each(tmp_path: Path) -> None:
    a = write(tmp_path, "a.json", {"decode": 112.07})
    b = write(tmp_path, "b.json", {"decode": 99.79})
    write_manifest(tmp_path, run=RunEntry("bench", "r1", PROV), written=[a, b])
    a.write_text(json.dumps({"decode": 112.08}), encoding="utf-8")  # same size, other bytes
    b.unlink()
    problems = check_manifest(tmp_path)
    assert len(problems) == 2
    assert problems[0].startswith(f"{a}: changed since {MANIFEST_FILE} was written")
    assert problems[1] == f"{b}: listed in {MANIFEST_FILE} but missing"
    assert check_manifest(tmp_path / "nowhere")[0].endswith("missing or unreadable; its files cannot be checked")


def test_a_second_run_in_the_same_folder_keeps_the_first_runs_entries(tmp_path: Path) -> None:
    """qualify after bench in one folder: a bench file edited in between stays visible as changed."""
    summary = write(tmp_path, "summary.json", {"schema": "servectl.bench/v1", "p50": 112.07})
    write_manifest(tmp_path, run=RunEntry("bench", "r1", PROV), written=[summary])
    summary.write_text(json.dumps({"schema": "servectl.bench/v1", "p50": 120.00}), encoding="utf-8")
    qualify = write(tmp_path, "qualify.json", {"schema": "servectl.qualify/v1"})
    write_manifest(tmp_path, run=RunEntry("qualify", "q1", PROV), written=[qualify])
    manifest = read_manifest(tmp_path)
    assert manifest is not None and set(manifest["runs"]) == {"r1", "q1"}
    assert {f["path"]: f["run_id"] for f in manifest["files"]} == {"summary.json": "r1", "qualify.json": "q1"}
    assert [p.split(":")[0] for p in check_manifest(tmp_path)] == [str(summary)]


def test_schema_names_split_into_name_and_version() -> None:
    assert split_schema("servectl.qualify/v1") == {"name": "servectl.qualify", "version": 1}
    assert split_schema("odd") == {"name": "odd", "version": None}
    assert split_schema(None) is None
