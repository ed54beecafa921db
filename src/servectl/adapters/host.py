"""Host probe: port listeners, the container a pid lives in, memory, shared memory, disk, model folders.

:class:`HostProbe` is the interface the core takes; :class:`PsutilHostProbe` is the real one (psutil, /proc,
``os.statvfs``). The parsing parts (cgroup lines, address overlap, Hugging Face cache layout) are pure
functions so that unit tests cover every format without a real host.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from servectl.files import FileRefused, read_text_bounded

WEIGHT_SUFFIXES: tuple[str, ...] = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".ckpt", ".npz")
"""File endings counted as model weights."""


@dataclass(frozen=True)
class WeightFile:
    """One weight file of a model folder (symlinks followed, as in the Hugging Face cache)."""

    path: str
    size_bytes: int


def weight_files(folder: str | Path, *, max_depth: int = 3) -> tuple[WeightFile, ...]:
    """The weight files under ``folder`` (the suffixes preflight counts), in name order (shard order).

    Hidden entries are left out, as the Hugging Face cache's own metadata; dangling links and anything that is
    not a regular file (a FIFO would block the reading) are skipped.
    """
    found: list[WeightFile] = []
    stack: list[tuple[Path, int]] = [(Path(folder).expanduser(), 0)]
    while stack:
        current, depth = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth < max_depth:
                        stack.append((Path(entry.path), depth + 1))
                elif entry.name.endswith(WEIGHT_SUFFIXES) and entry.is_file(follow_symlinks=True):
                    found.append(WeightFile(entry.path, entry.stat(follow_symlinks=True).st_size))
            except OSError:  # a dangling symlink into a half-deleted cache
                continue
    return tuple(sorted(found, key=lambda f: f.path))


@dataclass(frozen=True)
class Listener:
    """A TCP socket in LISTEN state. ``pid``/``process_name`` are ``None`` when the OS does not tell us
    (another user's socket and we are not root)."""

    address: str
    port: int
    pid: int | None
    process_name: str | None


@dataclass(frozen=True)
class HostMemory:
    """Host RAM."""

    total_bytes: int
    available_bytes: int


@dataclass(frozen=True)
class ShmInfo:
    """The host's shared-memory file system (``/dev/shm``)."""

    path: str
    total_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class DiskSpace:
    """Room on the file system that holds ``path`` (measured on ``checked_path``, its nearest existing
    ancestor, when ``path`` itself does not exist yet)."""

    path: str
    checked_path: str
    total_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class ModelDirInfo:
    """What a model folder holds.

    ``hf_snapshot_revision`` is the commit of a Hugging Face cache snapshot
    (``.../models--org--name/snapshots/<commit>``), with that repository's refs (``main`` -> commit) in
    ``hf_refs``; ``local_dir_revision`` is the commit that ``hf download --local-dir`` recorded in
    ``.cache/huggingface/download/*.metadata``.
    """

    path: str
    exists: bool
    is_dir: bool
    has_config_json: bool
    weight_file_count: int
    weights_bytes: int
    hf_repo_id: str | None = None
    hf_snapshot_revision: str | None = None
    hf_refs: dict[str, str] = field(default_factory=dict)
    local_dir_revision: str | None = None


class HostProbe(Protocol):
    """What preflight needs to know about the host it runs on."""

    def listeners(self, port: int) -> tuple[Listener, ...]:
        """Every TCP listener on ``port``, on any address."""
        ...

    def process_name(self, pid: int) -> str | None:
        """The process's name, or ``None`` when it is gone or hidden."""
        ...

    def container_id_of(self, pid: int) -> str | None:
        """The full id of the container the process runs in, from its cgroup; ``None`` for host processes."""
        ...

    def memory(self) -> HostMemory:
        """Host RAM."""
        ...

    def shm(self) -> ShmInfo | None:
        """``/dev/shm``, or ``None`` when there is none."""
        ...

    def disk_space(self, path: str) -> DiskSpace:
        """Room on the file system that holds ``path`` (or would hold it)."""
        ...

    def model_dir(self, path: str) -> ModelDirInfo:
        """What the model folder holds."""
        ...

    def find_executable(self, name: str) -> str | None:
        """Where ``name`` is on ``PATH``, or ``None``."""
        ...

    def path_exists(self, path: str) -> bool:
        """Whether the path exists."""
        ...


# ---------------------------------------------------------------------------------------------------------
# Pure parsing


_HEX64 = re.compile(r"[0-9a-f]{64}")


def container_id_from_cgroup(text: str) -> str | None:
    """The container id in the text of ``/proc/<pid>/cgroup``, or ``None`` for a host process.

    Knows cgroup v1 (``12:memory:/docker/<id>``) and v2 (``0::/system.slice/docker-<id>.scope``) lines,
    the systemd (``docker-<id>.scope``), cgroupfs (``/docker/<id>``), containerd/Kubernetes
    (``cri-containerd-<id>.scope``, ``/kubepods/.../pod<uid>/<id>``), CRI-O (``crio-<id>.scope``) and
    Podman (``libpod-<id>.scope``) patterns. For nested containers the innermost id wins.
    """
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        found: str | None = None
        for segment in parts[2].split("/"):
            name = segment.removesuffix(".scope")
            candidate = name.rsplit("-", 1)[-1]
            if len(candidate) == 64 and _HEX64.fullmatch(candidate):
                found = candidate
        if found is not None:
            return found
    return None


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = address.strip().strip("[]")
    if text in ("", "*"):
        text = "0.0.0.0"
    if text == "localhost":
        text = "127.0.0.1"
    text = text.split("%", 1)[0]  # IPv6 zone id
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def addresses_overlap(wanted: str, bound: str) -> bool:
    """Whether binding ``wanted`` would collide with an existing listener on ``bound`` (same port).

    Wildcards overlap with every address of their family; ``::`` also covers IPv4 because Linux listens
    dual-stack by default, and a wanted ``::`` collides with any IPv4 listener for the same reason.
    Unparseable addresses (host names) are compared as text, and treated as overlapping with wildcards.
    """
    a, b = _ip(wanted), _ip(bound)
    if a is None or b is None:
        return wanted == bound or bound in ("0.0.0.0", "::", "*", "") or wanted in ("0.0.0.0", "::", "*", "")
    if a == b:
        return True
    for x, y in ((a, b), (b, a)):
        if x.is_unspecified:
            if x.version == 6:
                return True
            if y.version == 4:
                return True
    return False


_HF_SNAPSHOT_RE = re.compile(r"models--(?P<repo>[^/]+)/snapshots/(?P<rev>[^/]+)/?$")


def hf_snapshot_of(path: str) -> tuple[str, str, Path] | None:
    """``(repo_id, revision, repo_cache_folder)`` when ``path`` is a Hugging Face cache snapshot."""
    match = _HF_SNAPSHOT_RE.search(path.rstrip("/"))
    if match is None:
        return None
    repo_id = match.group("repo").replace("--", "/", 1)
    cache_folder = Path(path.rstrip("/")).parent.parent
    return repo_id, match.group("rev"), cache_folder


def revision_matches(pinned: str, actual: str, refs: dict[str, str] | None = None) -> bool:
    """Whether ``actual`` (a commit) is the pinned revision: the same commit, a prefix of at least 7
    characters, or a ref name (``main``) whose commit is ``actual``."""
    pinned = pinned.strip()
    if not pinned or not actual:
        return False
    if pinned == actual or (len(pinned) >= 7 and actual.startswith(pinned)):
        return True
    return refs is not None and refs.get(pinned) == actual


# ---------------------------------------------------------------------------------------------------------
# The real probe


class PsutilHostProbe:
    """The real :class:`HostProbe`: psutil, ``/proc`` and ``os.statvfs``.

    Args:
        proc_root: where ``/proc`` is (tests point it elsewhere).
        shm_path: where the shared-memory file system is mounted.
    """

    def __init__(self, *, proc_root: str = "/proc", shm_path: str = "/dev/shm") -> None:
        self._proc_root = proc_root
        self._shm_path = shm_path

    def listeners(self, port: int) -> tuple[Listener, ...]:
        """Every TCP listener on ``port`` (IPv4 and IPv6), with its owner where the OS tells."""
        import psutil

        found: list[Listener] = []
        try:
            connections = psutil.net_connections(kind="tcp")
        except psutil.AccessDenied:  # macOS without root; Linux reads /proc/net/tcp and never lands here
            connections = []
        for conn in connections:
            if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.laddr.port != port:
                continue
            pid = conn.pid if conn.pid else None
            found.append(
                Listener(
                    address=str(conn.laddr.ip),
                    port=int(conn.laddr.port),
                    pid=pid,
                    process_name=self.process_name(pid) if pid is not None else None,
                )
            )
        return tuple(sorted(set(found), key=lambda item: (item.address, item.pid or 0)))

    def process_name(self, pid: int) -> str | None:
        """The process's name, or ``None`` when it is gone or hidden."""
        import psutil

        try:
            return str(psutil.Process(pid).name())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None

    def container_id_of(self, pid: int) -> str | None:
        """The container id from ``/proc/<pid>/cgroup``; ``None`` for a host process or a pid that is gone."""
        try:
            text = read_text_bounded(Path(self._proc_root, str(pid), "cgroup"), limit_bytes=2**20)
        except (OSError, FileRefused):
            return None
        return container_id_from_cgroup(text)

    def memory(self) -> HostMemory:
        """Host RAM (total and available, as the kernel counts it)."""
        import psutil

        vm = psutil.virtual_memory()
        return HostMemory(total_bytes=int(vm.total), available_bytes=int(vm.available))

    def shm(self) -> ShmInfo | None:
        """``/dev/shm`` size and free room, or ``None`` when it is missing."""
        try:
            st = os.statvfs(self._shm_path)
        except OSError:
            return None
        return ShmInfo(path=self._shm_path, total_bytes=st.f_blocks * st.f_frsize, free_bytes=st.f_bavail * st.f_frsize)

    def disk_space(self, path: str) -> DiskSpace:
        """Room on the file system that holds ``path``, measured on its nearest existing ancestor."""
        checked = Path(path).expanduser()
        while not checked.exists() and checked != checked.parent:
            checked = checked.parent
        usage = shutil.disk_usage(checked)
        return DiskSpace(path=path, checked_path=str(checked), total_bytes=usage.total, free_bytes=usage.free)

    def model_dir(self, path: str) -> ModelDirInfo:
        """Whether the folder exists, holds ``config.json`` and weights (count and bytes, symlinks
        followed as in the Hugging Face cache), and which revision it is when that can be told."""
        folder = Path(path).expanduser()
        if not folder.is_dir():
            return ModelDirInfo(
                path=path,
                exists=folder.exists(),
                is_dir=False,
                has_config_json=False,
                weight_file_count=0,
                weights_bytes=0,
            )
        count, size = _weights(folder)
        repo_id = snapshot_rev = None
        refs: dict[str, str] = {}
        snapshot = hf_snapshot_of(str(folder))
        if snapshot is not None:
            repo_id, snapshot_rev, cache_folder = snapshot
            refs = _read_refs(cache_folder / "refs")
        return ModelDirInfo(
            path=path,
            exists=True,
            is_dir=True,
            has_config_json=(folder / "config.json").is_file(),
            weight_file_count=count,
            weights_bytes=size,
            hf_repo_id=repo_id,
            hf_snapshot_revision=snapshot_rev,
            hf_refs=refs,
            local_dir_revision=_local_dir_revision(folder),
        )

    def find_executable(self, name: str) -> str | None:
        """Where ``name`` is on ``PATH`` (also looking in the sbin folders dockerd sees), or ``None``."""
        extra = os.pathsep.join(("/usr/local/sbin", "/usr/sbin", "/sbin"))
        return shutil.which(name, path=os.environ.get("PATH", "") + os.pathsep + extra)

    def path_exists(self, path: str) -> bool:
        """Whether the path exists."""
        return Path(path).expanduser().exists()


def _weights(folder: Path) -> tuple[int, int]:
    files = weight_files(folder)
    return len(files), sum(f.size_bytes for f in files)


def _read_refs(refs_folder: Path) -> dict[str, str]:
    refs: dict[str, str] = {}
    try:
        for ref in refs_folder.rglob("*"):
            if ref.is_file():
                refs[str(ref.relative_to(refs_folder))] = read_text_bounded(ref, limit_bytes=4096).strip()
    except (OSError, FileRefused):
        pass
    return refs


def _local_dir_revision(folder: Path) -> str | None:
    """The commit ``hf download --local-dir`` wrote as the first line of its metadata files."""
    meta_folder = folder / ".cache" / "huggingface" / "download"
    for name in ("config.json.metadata", *sorted(p.name for p in meta_folder.glob("*.metadata"))[:1]):
        try:
            first = read_text_bounded(meta_folder / name, limit_bytes=2**16).splitlines()[0].strip()
        except (OSError, FileRefused, IndexError):
            continue
        if re.fullmatch(r"[0-9a-f]{40}", first):
            return first
    return None
