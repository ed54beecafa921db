"""Flag catalogs from engine images, and an image's verdict on a profile: what ``catalog extract``,
``catalog diff``/``show`` and ``validate --in-image`` do with the answers of :mod:`servectl.adapters.engine_image`.

* :func:`extract_catalog`: the image's own parser as a flag catalog, kept in the host's catalog folder by image id;
* :func:`image_target` / :func:`load_catalog_target`: what a name given to those commands means (a shipped
  catalog, a catalog file, a profile, or an image);
* :func:`catalog_staleness` / :func:`profile_catalog_note`: whether a profile's catalog is older than its image's;
* :func:`validate_in_image`: a compiled profile's argv parsed by its image's own SGLang.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl.adapters.docker import DockerEngine
from servectl.adapters.engine_image import (
    DEFAULT_TIMEOUT_S,
    ImageProbeError,
    ParseVerdict,
    dump_flags,
    dump_logs,
    dump_routes,
    parse_in_image,
)
from servectl.errors import PreflightFailed
from servectl.profile.catalog import FlagCatalog
from servectl.profile.catalog_store import ImageSource, routes_beside, store_catalog, write_catalog

if TYPE_CHECKING:
    from servectl.plan.resolve import Resolved
    from servectl.profile.loader import LoadedProfile, ProfileSearch
    from servectl.profile.models import Profile


@dataclass(frozen=True)
class ExtractedCatalog:
    """A catalog taken from an image, and where it was written."""

    document: Mapping[str, Any]
    image: ImageSource
    stored_at: Path
    written_to: Path | None
    python: str
    seconds: float
    logs_written: tuple[Path, ...] = ()
    routes_written: tuple[Path, ...] = ()  # the image's route table, beside each catalog written
    routes_error: str | None = None  # why it could not be read (the gateway then uses the shipped table)

    @property
    def version(self) -> str:
        return str(self.document.get("version", ""))

    @property
    def option_count(self) -> int:
        return len(self.document.get("options") or ())

    @property
    def version_source(self) -> str:
        """Where the image's SGLang version was read: its distribution metadata, unless the image has none."""
        return str(self.document.get("version_source") or "its distribution metadata")


def extract_catalog(
    *,
    image: str,
    engine: DockerEngine,
    entrypoint: Sequence[str] | None = None,
    out: Path | None = None,
    logs: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    store_dir: Path,
) -> ExtractedCatalog:
    """Dump the image's own parser into a flag catalog, kept in the catalog folder ``store_dir`` (the host's) by
    image id (and in ``out``).

    The image's HTTP route table (``engine_dump.py routes``) is written beside each as ``<name>.routes.json``: the
    gateway refuses a path that table lacks (404 ``unknown_path``). With ``logs``, also the logger format strings
    of the image's ``sglang/srt`` (``engine_dump.py logs``), written beside the catalog as ``<name>.logs.json``.

    Raises:
        PreflightFailed: the image is not on this host.
        ImageProbeError: the image has no usable Python or SGLang, or its parser could not be read.
    """
    info = engine.image(image)
    if info is None:
        raise PreflightFailed(f"image {image} is not on this host: docker pull {image} (or docker load -i FILE)")
    run = dump_flags(engine, image, entrypoint=entrypoint, timeout_s=timeout_s)
    document = dict(run.data)
    document["extracted_from"] = f"image {image} ({info.id}): {document.get('extracted_from', '')}"
    if entrypoint:
        document["entrypoint"] = " ".join(entrypoint)
    elif run.python != "python3":
        document["entrypoint"] = f"{run.python} -m sglang.launch_server"
    try:
        FlagCatalog.from_dict(document, name="extracted")
    except (KeyError, TypeError, ValueError) as err:
        raise ImageProbeError(f"image {image}: the dumped parser is not a flag catalog: {err}") from err
    digests = tuple(sorted(d for d in info.digests() if d != info.id))
    source = ImageSource(id=info.id, refs=(image,), digests=digests, extracted_at=time.time())
    stored = store_catalog(document, source, directory=store_dir)
    written = write_catalog({**document, "image": source.to_dict()}, out) if out is not None else None
    routes_written: list[Path] = []
    routes_error = None
    try:
        route_run = dump_routes(engine, image, python=run.python, timeout_s=timeout_s)
    except ImageProbeError as err:
        routes_error = str(err)
    else:
        routes = {**route_run.data, "extracted_from": f"image {image} ({info.id}): engine_dump.py routes"}
        routes_written = [write_catalog(routes, routes_beside(p)) for p in (stored, written) if p is not None]
    logs_written: list[Path] = []
    if logs:
        log_run = dump_logs(engine, image, python=run.python, timeout_s=timeout_s)
        for path in (stored, written):
            if path is not None:
                logs_written.append(write_catalog(log_run.data, path.with_name(path.stem + ".logs.json")))
    return ExtractedCatalog(document, source, stored, written, run.python, run.seconds, tuple(logs_written),
                            tuple(routes_written), routes_error)  # fmt: skip


@dataclass(frozen=True)
class ImageTarget:
    """An image to ask, and the Python to ask it with (from a profile's ``image.entrypoint``, if any)."""

    image: str
    entrypoint: tuple[str, ...] | None = None
    profile: Profile | None = None  # the profile it came from, read once


def looks_like_image_ref(name: str) -> bool:
    """Image references have a tag, a registry path or a digest; profile names have none of those."""
    return any(c in name for c in ":/@")


def image_target(name: str, *, folders: ProfileSearch) -> ImageTarget:
    """``name`` as a profile on ``folders`` (its image and entrypoint; the host's search path) when such
    a profile exists, else as an image reference.

    Raises:
        UsageError: neither a profile nor something that looks like an image reference.
    """
    from servectl.errors import UsageError
    from servectl.profile.loader import read_profile

    if not looks_like_image_ref(name):
        try:
            profile = read_profile(name, folders=folders).profile
        except UsageError:
            pass
        else:
            return ImageTarget(profile.image.pinned_ref, tuple(profile.image.entrypoint), profile)
    if not name.strip():
        raise UsageError("name an image (repository:tag) or a profile")
    return ImageTarget(name)


def load_catalog_target(name: str, *, engine: DockerEngine | None, folders: ProfileSearch) -> tuple[str, FlagCatalog]:
    """A catalog for ``catalog diff``: a catalog spec (shipped name, ``sha256:...``, ``.json`` file), a
    profile on ``folders`` (its catalog), or an image (its extracted catalog; extracted now when there is none
    yet and an ``engine`` is given: None, a lookup that extracts nothing). Extracted catalogs are looked up in,
    and kept in, the search's catalog folder (``folders.catalogs``, the host's). Returns ``(label, FlagCatalog)``.

    Raises:
        UsageError: nothing by that name. ImageProbeError / PreflightFailed: extracting failed.
    """
    from servectl.errors import UsageError
    from servectl.profile.catalog_store import IMAGE, find_extracted, is_catalog_file, load_catalog

    store_dir = folders.catalogs
    if name in FlagCatalog.available() or is_catalog_file(name) or (name.startswith("sha256:") and name != IMAGE):
        try:
            return name, load_catalog(name, directory=store_dir).catalog
        except KeyError as err:
            raise UsageError(str(err.args[0])) from None
    target = image_target(name, folders=folders)
    if target.profile is not None:
        from servectl.profile.engine_args import catalog_for

        profile = target.profile
        try:
            return f"{name} ({profile.engine.catalog})", catalog_for(profile, catalogs=store_dir)
        except (KeyError, ValueError) as err:
            raise UsageError(f"profile {name}: engine.catalog: {err.args[0]}") from None
    stored = find_extracted(ref=target.image, directory=store_dir)
    if stored is None and engine is not None and engine.image(target.image) is not None:
        extract_catalog(image=target.image, engine=engine, store_dir=store_dir)
        stored = find_extracted(ref=target.image, directory=store_dir)
    if stored is None:
        raise UsageError(
            f"{name} is no shipped catalog, catalog file, profile, or image with an extracted catalog; "
            f"run `servectl catalog extract {name}` first (shipped: {', '.join(FlagCatalog.available())})"
        )
    return f"{name} ({stored.image.id[:19] if stored.image else stored.path.name})", stored.catalog


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def catalog_staleness(*, catalog_spec: str, catalog_version: str, catalog_image_id: str | None, image_ref: str,
                      image_digest: str | None, store_dir: Path) -> str | None:  # fmt: skip
    """A note when the profile's catalog is older than what its image's own extracted catalog says.

    Only the catalog folder ``store_dir`` is read (no Docker): the image's catalog is the newest extracted under its
    reference or pinned digest. None when nothing is known or nothing is older.
    """
    from servectl.profile.catalog_store import find_extracted

    stored = find_extracted(ref=image_ref, digest=image_digest, directory=store_dir)
    if stored is None or stored.image is None:
        return None
    image_version = stored.catalog.version
    if catalog_image_id is not None:
        if catalog_image_id != stored.image.id:
            return (
                f"catalog {catalog_spec} was extracted from image {catalog_image_id[:19]}, but {image_ref} is now "
                f"{stored.image.id[:19]} (SGLang {image_version}); run `servectl catalog extract {image_ref}`"
            )
        return None
    if _version_tuple(catalog_version) < _version_tuple(image_version):
        return (
            f"catalog {catalog_spec} is SGLang {catalog_version}, older than image {image_ref}'s SGLang "
            f"{image_version}; use engine.catalog: image (see `servectl catalog diff {catalog_spec} {image_ref}`)"
        )
    return None


def profile_catalog_note(loaded: LoadedProfile) -> str | None:
    """:func:`catalog_staleness` for a loaded profile (its catalog spec, image ref and digest), in the catalog
    folder it was loaded with."""
    from servectl.profile.catalog_store import load_catalog

    engine_spec, image, store_dir = loaded.profile.engine.catalog, loaded.profile.image, loaded.catalogs
    try:
        stored = load_catalog(engine_spec, image_ref=image.ref, image_digest=image.digest, directory=store_dir)
    except KeyError:
        return None
    return catalog_staleness(
        catalog_spec=engine_spec,
        catalog_version=stored.catalog.version,
        catalog_image_id=stored.image.id if stored.image else None,
        image_ref=image.ref,
        image_digest=image.digest,
        store_dir=store_dir,
    )


@dataclass(frozen=True)
class InImageValidation:
    """``validate NAME --in-image``: the image's verdict on the profile's argv."""

    profile: str
    argv: tuple[str, ...]
    verdict: ParseVerdict


def validate_in_image(
    resolved: Resolved, *, engine: DockerEngine, timeout_s: float = DEFAULT_TIMEOUT_S
) -> InImageValidation:
    """Parse a compiled profile's argv with its image's own SGLang.

    Raises:
        PreflightFailed: the image is not on this host.
        ImageProbeError: the image has no usable Python or SGLang.
    """
    name, profile, plan = resolved.name, resolved.loaded.profile, resolved.plan
    if engine.image(plan.docker.image) is None:
        raise PreflightFailed(
            f"image {plan.docker.image} of profile {name} is not on this host: docker pull {plan.docker.image}"
        )
    verdict = parse_in_image(
        image=plan.docker.image,
        argv=plan.engine_argv,
        engine=engine,
        entrypoint=profile.image.entrypoint,
        timeout_s=timeout_s,
    )
    return InImageValidation(profile=name, argv=plan.engine_argv, verdict=verdict)


__all__ = [
    "ExtractedCatalog",
    "ImageTarget",
    "InImageValidation",
    "catalog_staleness",
    "extract_catalog",
    "image_target",
    "load_catalog_target",
    "looks_like_image_ref",
    "profile_catalog_note",
    "validate_in_image",
]
