"""``artifact-manifest.json``: every file of a run folder with its SHA-256, size, schema and provenance.

`servectl bench` and `servectl qualify` write it over their ``--out`` folder after their own files (both may
share a folder: the second run keeps the entries of files it did not write, as recorded, so that a file
changed between the two runs is still caught). A finding folder (`servectl report`) carries one too.

Layout::

    {"schema": "servectl.manifest/v1", "kind": "artifact-manifest",
     "runs": {"<run id>": {"command": "bench", "servectl_version": "0.1.0", "written_at": "...",
                           "provenance": {"profile", "plan_hash", "image_digest", "model_revision"},
                           "host": {"source": "nvml", "driver_version": "...", "cards": [...]}}},
     "files": [{"path": "c1-p4096-r3.json", "sha256": "...", "size_bytes": 1234,
                "schema": {"name": "servectl.bench", "version": 1}, "run_id": "<run id>"}]}

:func:`check_manifest` answers "does every listed file still have the bytes the manifest recorded?", one
problem per file (missing, changed).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl.files import write_atomic

if TYPE_CHECKING:
    from servectl.adapters.gpu import GpuInventory

MANIFEST_FILE = "artifact-manifest.json"
MANIFEST_SCHEMA = "servectl.manifest/v1"
MIB = 2**20


def sha256_file(path: Path) -> str:
    """The hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def servectl_version() -> str:
    """The running servectl's version."""
    from servectl.version import __version__

    return __version__


def split_schema(schema: object) -> dict[str, Any] | None:
    """``servectl.bench/v1`` -> ``{"name": "servectl.bench", "version": 1}`` (None for no schema)."""
    if not isinstance(schema, str) or not schema:
        return None
    name, _, version = schema.rpartition("/v")
    if name and version.isdigit():
        return {"name": name, "version": int(version)}
    return {"name": schema, "version": None}


def _file_schema(path: Path) -> dict[str, Any] | None:
    """The ``schema`` a servectl JSON file declares (None for other files)."""
    from servectl.files import FileRefused, read_text_bounded

    if path.suffix != ".json":
        return None
    try:
        data = json.loads(read_text_bounded(path, limit_bytes=64 * MIB, what="artifact"))
    except (OSError, FileRefused, ValueError):
        return None
    return split_schema(data.get("schema")) if isinstance(data, dict) else None


def host_facts(gpus: GpuInventory, devices: Sequence[int] | None = None) -> dict[str, Any]:
    """The host a run measured on, as NVML tells it: driver, and per card name, memory and power cap.

    Args:
        gpus: The GPU inventory; a null one records the host as unknown, with its reason.
        devices: The card indexes the service uses (None: every card).

    Every field NVML cannot give is None; with a null inventory or no driver, ``source`` is ``unknown``.
    Nothing that names the host or its user is recorded (no hostname, no card serial or UUID).
    """
    from servectl.errors import GpuUnavailable

    try:
        snapshot = gpus.snapshot()
    except GpuUnavailable as err:
        return {"source": "unknown", "reason": str(err)}
    wanted = set(devices) if devices is not None else None
    cuda = snapshot.cuda_driver_version
    return {
        "source": "nvml",
        "driver_version": snapshot.driver_version,
        "cuda_driver_version": f"{cuda[0]}.{cuda[1]}" if cuda else None,
        "cards": [
            {
                "index": d.index,
                "name": d.name,
                "compute_capability": d.arch,
                "memory_total_mib": None if d.memory_total_bytes is None else d.memory_total_bytes // MIB,
                "power_limit_w": d.power_limit_w,
            }
            for d in snapshot.devices
            if wanted is None or d.index in wanted
        ],
    }


UNKNOWN_HOST: Mapping[str, Any] = {"source": "unknown", "reason": "not recorded"}


@dataclass(frozen=True)
class RunEntry:
    """The run that wrote files into a folder: its command, id, provenance and host."""

    command: str
    run_id: str
    provenance: Mapping[str, Any]
    host: Mapping[str, Any] = field(default_factory=lambda: dict(UNKNOWN_HOST))

    def document(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "servectl_version": servectl_version(),
            "written_at": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "provenance": dict(self.provenance),
            "host": dict(self.host),
        }


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The manifest in ``folder`` (None when there is none or it cannot be read as one)."""
    from servectl.files import FileRefused, read_text_bounded

    try:
        data = json.loads(read_text_bounded(folder / MANIFEST_FILE, limit_bytes=64 * MIB, what="manifest"))
    except (OSError, FileRefused, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("files"), list) else None


def _folder_files(folder: Path, exclude: Iterable[str] = ()) -> list[Path]:
    skip = {MANIFEST_FILE, *exclude}
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.relative_to(folder).as_posix() not in skip)


def file_entry(folder: Path, path: Path, run_id: str | None) -> dict[str, Any]:
    """One manifest entry for ``path`` (inside ``folder``)."""
    return {
        "path": path.relative_to(folder).as_posix(),
        "sha256": sha256_file(path),
        "size_bytes": path.stat().st_size,
        "schema": _file_schema(path),
        "run_id": run_id,
    }


def write_manifest(folder: Path, *, run: RunEntry, written: Iterable[Path], exclude: Iterable[str] = ()) -> Path:
    """Write ``artifact-manifest.json`` over every file in ``folder`` (but the paths in ``exclude``); return
    its path.

    Files this run wrote (``written``) and files no earlier manifest lists are hashed now; files an earlier
    manifest lists and this run did not write keep their recorded entry, so a change to them stays visible.
    """
    old = read_manifest(folder) or {}
    old_files = {str(e.get("path")): e for e in old.get("files") or [] if isinstance(e, dict)}
    runs = dict(old.get("runs") or {})
    runs[run.run_id] = run.document()
    mine = {Path(p).resolve() for p in written}
    entries = []
    for path in _folder_files(folder, exclude):
        rel = path.relative_to(folder).as_posix()
        if path.resolve() in mine:
            entries.append(file_entry(folder, path, run.run_id))
        elif rel in old_files:
            entries.append(old_files[rel])
        else:
            entries.append(file_entry(folder, path, None))
    document = {"schema": MANIFEST_SCHEMA, "kind": "artifact-manifest", "runs": runs, "files": entries}
    target = folder / MANIFEST_FILE
    write_atomic(target, (json.dumps(document, indent=2) + "\n").encode("utf-8"))
    return target


def check_manifest(folder: Path, *, manifest: Mapping[str, Any] | None = None) -> list[str]:
    """Problems with the files ``folder``'s manifest lists: one line per missing or changed file.

    Raises nothing; a folder without a readable manifest is one problem.
    """
    data = manifest if manifest is not None else read_manifest(folder)
    if data is None:
        return [f"{folder / MANIFEST_FILE}: missing or unreadable; its files cannot be checked"]
    problems = []
    for entry in data.get("files") or []:
        rel = str(entry.get("path", ""))
        path = folder / rel
        if not path.is_file():
            problems.append(f"{path}: listed in {MANIFEST_FILE} but missing")
            continue
        size, sha = path.stat().st_size, sha256_file(path)
        if sha != entry.get("sha256") or size != entry.get("size_bytes"):
            problems.append(
                f"{path}: changed since {MANIFEST_FILE} was written (sha256 {sha[:12]}..., "
                f"recorded {str(entry.get('sha256'))[:12]}...; {size} bytes, recorded {entry.get('size_bytes')})"
            )
    return problems
