"""Where flag catalogs come from: shipped, extracted from an engine image, or committed into a project.

``engine.catalog`` in a profile names one of:

- a shipped catalog (``sglang-0.5.23``, :meth:`FlagCatalog.load`);
- ``image``: the catalog ``servectl catalog extract`` took from the profile's own image, found by the pinned
  ``image.digest`` when there is one, else by the image reference it was extracted under;
- ``sha256:...``: the catalog extracted from the image with that id or repo digest;
- a ``.json`` file (relative to the profile file): one written by ``servectl catalog extract --out``.

Extracted catalogs live in a catalog folder, one file per image id, each naming the image id, the references and
repo digests it was extracted under, and the SGLang version the image reports. Every function here is given that
folder (the host's :func:`servectl.paths.catalog_cache_dir`, carried by the profile search it loads through):
none falls back to the folder of this process's own environment.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servectl.files import FileRefused, read_bounded, write_atomic
from servectl.profile.catalog import MAX_CATALOG_BYTES, FlagCatalog

#: ``engine.catalog`` value meaning "the catalog extracted from this profile's image".
IMAGE = "image"
#: The suffix of a route table kept beside a catalog extracted from an image.
ROUTES_SUFFIX = ".routes.json"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class ImageSource:
    """The image an extracted catalog came from."""

    id: str  # sha256:... (the local image id)
    refs: tuple[str, ...] = ()  # references it was extracted under
    digests: tuple[str, ...] = ()  # sha256:... repo digests, when the image came from a registry
    extracted_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "refs": list(self.refs),
            "digests": list(self.digests),
            "extracted_at": self.extracted_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ImageSource:
        return cls(
            id=str(data.get("id", "")),
            refs=tuple(str(r) for r in data.get("refs") or ()),
            digests=tuple(str(d) for d in data.get("digests") or ()),
            extracted_at=float(data.get("extracted_at") or 0.0),
        )


@dataclass(frozen=True)
class StoredCatalog:
    """A catalog file on disk, with the image it was extracted from (None for a shipped one)."""

    path: Path
    catalog: FlagCatalog
    image: ImageSource | None


def is_catalog_file(spec: str) -> bool:
    return spec.endswith(".json")


def _stored_path(image_id: str, directory: Path) -> Path:
    return directory / f"{image_id.removeprefix('sha256:')}.json"


def routes_beside(catalog: Path) -> Path:
    """Where the route table extracted with a catalog is kept: ``<catalog>.routes.json`` beside it."""
    return catalog.with_name(catalog.name.removesuffix(".json") + ROUTES_SUFFIX)


def extracted_routes(
    spec: str, *, image_ref: str | None = None, image_digest: str | None = None, directory: Path
) -> Path | None:
    """The route table extracted from a profile's image with its flag catalog (``engine.catalog`` ``image``, a
    digest or a catalog file that ``catalog extract`` wrote): its path, None when there is none (a shipped
    catalog's routes are shipped: :mod:`servectl.profile.api_routes`)."""
    if not (is_catalog_file(spec) or spec == IMAGE or _DIGEST.fullmatch(spec)):
        return None
    try:
        stored = load_catalog(spec, image_ref=image_ref, image_digest=image_digest, directory=directory)
    except KeyError:
        return None
    beside = routes_beside(stored.path)
    return beside if beside.is_file() else None


def write_catalog(document: Mapping[str, Any], path: Path) -> Path:
    """Write a catalog document atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(document, indent=1) + "\n").encode("utf-8"))
    return path


def store_catalog(document: Mapping[str, Any], image: ImageSource, *, directory: Path) -> Path:
    """Keep an extracted catalog in the catalog folder ``directory``, keyed by its image id; merge the refs it is
    known by."""
    path = _stored_path(image.id, directory)
    previous = _read_stored(path)
    if previous is not None and previous.image is not None:
        refs = tuple(dict.fromkeys((*image.refs, *previous.image.refs)))
        digests = tuple(dict.fromkeys((*image.digests, *previous.image.digests)))
        image = ImageSource(id=image.id, refs=refs, digests=digests, extracted_at=image.extracted_at)
    return write_catalog({**document, "image": image.to_dict()}, path)


_READ: dict[tuple[Path, int, int], StoredCatalog | None] = {}


def _read_stored(path: Path) -> StoredCatalog | None:
    """The catalog file at ``path``, or None when it is missing or not a catalog (memoized by mtime and size:
    ``validate`` looks the cache up once per profile)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    key = (path, stat.st_mtime_ns, stat.st_size)
    if key not in _READ:
        _READ[key] = _parse_stored(path)
    return _READ[key]


def _parse_stored(path: Path) -> StoredCatalog | None:
    try:
        data = json.loads(read_bounded(path, limit_bytes=MAX_CATALOG_BYTES, what="flag catalog"))
        catalog = FlagCatalog.from_dict(data, name=path.stem)
    except (OSError, FileRefused, ValueError, KeyError, TypeError, RecursionError):
        return None
    image = ImageSource.from_dict(data["image"]) if isinstance(data.get("image"), Mapping) else None
    return StoredCatalog(path=path, catalog=catalog, image=image)


def stored_catalogs(directory: Path) -> Iterator[StoredCatalog]:
    """Every readable extracted catalog in the catalog folder ``directory``, newest first."""
    paths = [p for p in sorted(directory.glob("*.json")) if not p.name.endswith((".logs.json", ROUTES_SUFFIX))]
    found = [s for p in paths if (s := _read_stored(p)) is not None]
    yield from sorted(found, key=lambda s: -(s.image.extracted_at if s.image else 0.0))


def find_extracted(*, ref: str | None = None, digest: str | None = None, directory: Path) -> StoredCatalog | None:
    """The extracted catalog of an image, by id or repo digest (exact) or else by reference (newest)."""
    for stored in stored_catalogs(directory):
        image = stored.image
        if image is None:
            continue
        if digest is not None and (digest == image.id or digest in image.digests):
            return stored
        if digest is None and ref is not None and _normal_ref(ref) in {_normal_ref(r) for r in image.refs}:
            return stored
    return None


def _normal_ref(ref: str) -> str:
    """``repo`` and ``repo:latest`` are the same image reference."""
    last = ref.rsplit("/", 1)[-1]
    return ref if ":" in last or "@" in last else f"{ref}:latest"


def load_catalog(
    spec: str, *, image_ref: str | None = None, image_digest: str | None = None, directory: Path
) -> StoredCatalog:
    """Resolve an ``engine.catalog`` value to a catalog; ``image`` and an image id are looked up in the catalog
    folder ``directory``.

    Raises:
        KeyError: nothing by that name, no catalog extracted yet from that image, or an unreadable file
            (the message says which and how to get one).
    """
    if is_catalog_file(spec):
        path = Path(spec).expanduser()
        stored = _read_stored(path)
        if stored is None:
            fix = f"write one with `servectl catalog extract IMAGE --out {spec}`"
            raise KeyError(f"catalog file {spec} is missing or not a flag catalog; {fix}")
        return stored
    if spec == IMAGE or _DIGEST.fullmatch(spec):
        digest = spec if spec != IMAGE else image_digest
        stored = find_extracted(ref=image_ref, digest=digest, directory=directory)
        if stored is None:
            what = digest if spec != IMAGE and digest else (f"image {image_ref}" + (f" ({digest})" if digest else ""))
            target = image_ref or digest or "IMAGE"
            raise KeyError(f"no catalog has been extracted from {what} yet; run `servectl catalog extract {target}`")
        return stored
    shipped = _SHIPPED.get(spec)
    if shipped is None:
        shipped = _SHIPPED[spec] = StoredCatalog(path=Path(spec), catalog=FlagCatalog.load(spec), image=None)
    return shipped


#: Shipped catalogs by name: rules ask for a profile's catalog many times per validation.
_SHIPPED: dict[str, StoredCatalog] = {}
