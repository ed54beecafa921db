"""Host probe parsing: cgroup lines to container ids, address overlap, model folders and revisions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from servectl.adapters.host import (
    PsutilHostProbe,
    addresses_overlap,
    container_id_from_cgroup,
    hf_snapshot_of,
    revision_matches,
)

ID = "3f4c1e2d" * 8  # 64 hex characters
INNER = "a1b2c3d4" * 8


@pytest.mark.parametrize(
    "text",
    [
        # cgroup v1, cgroupfs driver
        f"12:memory:/docker/{ID}\n11:cpu,cpuacct:/docker/{ID}\n1:name=systemd:/docker/{ID}\n",
        # cgroup v1, systemd driver
        f"4:pids:/system.slice/docker-{ID}.scope\n0::/system.slice/docker-{ID}.scope\n",
        # cgroup v2, systemd driver
        f"0::/system.slice/docker-{ID}.scope\n",
        # cgroup v2, cgroupfs driver
        f"0::/docker/{ID}\n",
        # Kubernetes with containerd, systemd driver
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678.slice/cri-containerd-{ID}.scope\n",
        # Kubernetes, cgroupfs driver
        f"0::/kubepods/burstable/pod12345678-aaaa-bbbb-cccc-1234567890ab/{ID}\n",
        # CRI-O and Podman
        f"0::/machine.slice/crio-{ID}.scope\n",
        f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container\n",
        # containerd without Kubernetes
        f"0::/system.slice/containerd.service/default/{ID}\n",
    ],
)
def test_container_id_is_read_from_every_cgroup_layout(text: str) -> None:
    assert container_id_from_cgroup(text) == ID


def test_nested_containers_name_the_innermost_one() -> None:
    assert container_id_from_cgroup(f"0::/docker/{ID}/docker/{INNER}\n") == INNER


@pytest.mark.parametrize(
    "text",
    [
        "0::/user.slice/user-1000.slice/session-3.scope\n",
        "0::/\n",  # a private cgroup namespace shows nothing
        "12:memory:/system.slice/ssh.service\n1:name=systemd:/init.scope\n",
        f"0::/docker/{ID[:63]}\n",  # too short to be an id
        "",
    ],
)
def test_host_processes_have_no_container(text: str) -> None:
    assert container_id_from_cgroup(text) is None


def test_container_id_of_reads_the_pid_cgroup_file(tmp_path: Path) -> None:
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "cgroup").write_text(f"0::/system.slice/docker-{ID}.scope\n")
    probe = PsutilHostProbe(proc_root=str(tmp_path))
    assert probe.container_id_of(77) == ID
    assert probe.container_id_of(78) is None  # gone


@pytest.mark.parametrize(
    ("wanted", "bound", "overlap"),
    [
        ("127.0.0.1", "127.0.0.1", True),
        ("127.0.0.1", "0.0.0.0", True),
        ("0.0.0.0", "127.0.0.1", True),
        ("127.0.0.1", "::", True),  # dual-stack wildcard covers IPv4
        ("::", "10.0.0.5", True),
        ("127.0.0.1", "::ffff:127.0.0.1", True),
        ("localhost", "127.0.0.1", True),
        ("127.0.0.1", "10.0.0.5", False),
        ("127.0.0.1", "::1", False),
        ("::1", "0.0.0.0", False),
        ("::1", "::", True),
        ("192.168.1.10", "192.168.1.11", False),
    ],
)
def test_address_overlap_follows_wildcard_and_dual_stack_rules(wanted: str, bound: str, overlap: bool) -> None:
    assert addresses_overlap(wanted, bound) is overlap


def test_hf_snapshot_paths_give_repo_and_revision(tmp_path: Path) -> None:
    path = tmp_path / "hub" / "models--ormandj--GLM-5.3-Flash" / "snapshots" / ("c3" * 20)
    found = hf_snapshot_of(str(path) + "/")
    assert found is not None
    repo, rev, cache = found
    assert repo == "ormandj/GLM-5.3-Flash" and rev == "c3" * 20
    assert cache == tmp_path / "hub" / "models--ormandj--GLM-5.3-Flash"
    assert hf_snapshot_of("/models/GLM-5.3-Flash") is None


def test_revision_matches_a_commit_its_prefix_or_a_ref_naming_it() -> None:
    commit = "c3cbb9891b67c741bcbf6b176dd7af9265b069db"
    assert revision_matches(commit, commit)
    assert revision_matches("c3cbb98", commit)
    assert not revision_matches("c3cb", commit)  # too short to be trusted as a prefix
    assert revision_matches("main", commit, {"main": commit})
    assert not revision_matches("main", commit, {"main": "0" * 40})
    assert not revision_matches("d" * 40, commit)


def _write(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.truncate(size)  # sparse: the size counts, the disk does not fill


def test_model_dir_counts_weights_through_hf_cache_symlinks_and_reads_the_snapshot(tmp_path: Path) -> None:
    commit = "c3cbb9891b67c741bcbf6b176dd7af9265b069db"
    repo = tmp_path / "models--org--name"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for n in range(3):
        _write(repo / "blobs" / f"blob{n}", 1_000_000 * (n + 1))
        os.symlink(repo / "blobs" / f"blob{n}", snapshot / f"model-0000{n}.safetensors")
    (repo / "blobs" / "cfg").write_text("{}")
    os.symlink(repo / "blobs" / "cfg", snapshot / "config.json")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit + "\n")
    info = PsutilHostProbe().model_dir(str(snapshot))
    assert info.exists and info.is_dir and info.has_config_json
    assert info.weight_file_count == 3 and info.weights_bytes == 6_000_000
    assert info.hf_repo_id == "org/name" and info.hf_snapshot_revision == commit
    assert info.hf_refs == {"main": commit}


def test_model_dir_reads_the_revision_hf_download_local_dir_recorded(tmp_path: Path) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    (tmp_path / "config.json").write_text("{}")
    _write(tmp_path / "model.gguf", 4096)
    _write(tmp_path / "sub" / "mtp.bin", 1024)
    _write(tmp_path / ".cache" / "huggingface" / "download" / "shadow.safetensors", 10**9)  # not counted
    meta = tmp_path / ".cache" / "huggingface" / "download" / "config.json.metadata"
    meta.write_text(f'{commit}\n"etag"\n1700000000.0\n')
    info = PsutilHostProbe().model_dir(str(tmp_path))
    assert info.weight_file_count == 2 and info.weights_bytes == 5120
    assert info.local_dir_revision == commit and info.hf_snapshot_revision is None


def test_model_dir_reports_a_missing_folder_or_a_file(tmp_path: Path) -> None:
    missing = PsutilHostProbe().model_dir(str(tmp_path / "nope"))
    assert not missing.exists and missing.weight_file_count == 0
    (tmp_path / "file").write_text("x")
    not_dir = PsutilHostProbe().model_dir(str(tmp_path / "file"))
    assert not_dir.exists and not not_dir.is_dir


def test_disk_space_of_a_folder_not_made_yet_is_measured_on_its_nearest_ancestor(tmp_path: Path) -> None:
    space = PsutilHostProbe().disk_space(str(tmp_path / "cache" / "v84"))
    assert space.checked_path == str(tmp_path)
    assert 0 < space.free_bytes <= space.total_bytes


def test_shm_memory_and_executables_are_read_from_this_host(tmp_path: Path) -> None:
    probe = PsutilHostProbe()
    memory = probe.memory()
    assert 0 < memory.available_bytes <= memory.total_bytes
    shm = probe.shm()
    assert shm is None or 0 <= shm.free_bytes <= shm.total_bytes
    assert PsutilHostProbe(shm_path=str(tmp_path / "none")).shm() is None
    assert probe.find_executable("sh") is not None
    assert probe.find_executable("servectl-no-such-tool") is None
    assert probe.path_exists(str(tmp_path)) and not probe.path_exists(str(tmp_path / "x"))
