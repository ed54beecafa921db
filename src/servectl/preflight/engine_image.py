"""Ask the engine image itself: its parser's catalog, and whether it accepts a plan's argv.

Both run a standard-library program in a throwaway container of the image
(:meth:`~servectl.adapters.docker.DockerEngine.run_oneshot`: no network, no GPU, read-only, removed
afterwards, killed at a time limit) with the image's own Python: :mod:`servectl.profile.engine_dump` (the same
dumper that made the shipped catalogs) for the catalog, :mod:`servectl.adapters.sglang_probe` for the parse.
The Python comes from the profile's ``image.entrypoint`` when that is a Python, else is probed from
:data:`PYTHON_CANDIDATES`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl.adapters import sglang_probe
from servectl.adapters.docker import DockerEngine, OneShotResult
from servectl.errors import PreflightFailed, ServectlError
from servectl.profile import engine_dump
from servectl.profile.catalog import FlagCatalog
from servectl.profile.catalog_store import ImageSource, store_catalog, write_catalog

if TYPE_CHECKING:
    from servectl.plan.resolve import Resolved
    from servectl.profile.models import Profile

#: Where images keep the Python that has SGLang, most likely first.
PYTHON_CANDIDATES = ("python3", "/opt/venv/bin/python", "/usr/local/bin/python3", "/usr/bin/python3", "python")
DEFAULT_TIMEOUT_S = 120.0
_NO_SGLANG = re.compile(r"No module named '?sglang")


class ImageProbeError(ServectlError):
    """The image could not be asked (no Python, no SGLang, the program broke or ran out of time)."""

    exit_code = 3


class ProbeOutputError(ValueError):
    """What the program in the image printed is not the document it should print."""


def _source(module: Any) -> str:
    return Path(module.__file__).read_text(encoding="utf-8")


def python_candidates(entrypoint: Sequence[str] | None = None) -> list[str]:
    """The Pythons to try: the entrypoint's own when it is one (``python3 -m sglang...``), else the usual ones."""
    if entrypoint:
        first = entrypoint[0]
        if Path(first).name.startswith("python"):
            return [first]
    return list(PYTHON_CANDIDATES)


def parse_probe_output(stdout: str) -> dict[str, Any]:
    """The parse probe's JSON document from everything the container printed on stdout.

    Raises:
        ProbeOutputError: no framed document, or one that is not a JSON object.
    """
    start = stdout.rfind(sglang_probe.BEGIN)
    end = stdout.rfind(sglang_probe.END)
    if start < 0 or end < start:
        raise ProbeOutputError("the probe printed no result")
    return _json_object(stdout[start + len(sglang_probe.BEGIN) : end])


def parse_dump_output(stdout: str) -> dict[str, Any]:
    """``engine_dump.py flags``' catalog document from the container's stdout (SGLang may print before it).

    Raises:
        ProbeOutputError: no JSON object with an ``options`` list.
    """
    start = stdout.find("{\n")
    while start > 0 and stdout[start - 1] != "\n":
        start = stdout.find("{\n", start + 1)
    if start < 0:
        raise ProbeOutputError("the dumper printed no JSON document")
    data = _json_object(stdout[start:])
    if not isinstance(data.get("options"), list) or not data["options"]:
        raise ProbeOutputError("the dumper's document has no options")
    return data


def _json_object(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as err:
        raise ProbeOutputError(f"the result is not JSON: {err}") from err
    if not isinstance(data, dict):
        raise ProbeOutputError("the result is not a JSON object")
    return data


@dataclass(frozen=True)
class ProbeRun:
    """One answer from the image: its document, which Python gave it, and how long the container took."""

    data: dict[str, Any]
    python: str
    seconds: float


def _tail(text: str, lines: int = 2) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:])[-400:]


def run_in_image(
    engine: DockerEngine,
    image: str,
    *,
    source: str,
    args: Sequence[str],
    read: Callable[[OneShotResult], dict[str, Any]],
    entrypoint: Sequence[str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ProbeRun:
    """Run a program's ``source`` with ``args`` under the first of the image's Pythons that has SGLang.

    ``read`` turns the container's output into the program's document; it returns ``{"no_sglang": True}``
    when that Python cannot import SGLang, and raises :class:`ProbeOutputError` when the output is unusable.

    Raises:
        ImageProbeError: no candidate Python exists, none imports SGLang, or the program broke or timed out.
        PreflightFailed: the image is not on this host.
    """
    tried: list[str] = []
    no_sglang = False
    for python in python_candidates(entrypoint):
        result = engine.run_oneshot(image, [python, "-c", source, *args], timeout_s=timeout_s)
        if result.not_found is not None:
            tried.append(f"{python} (not in the image)")
            continue
        if result.timed_out:
            raise ImageProbeError(
                f"image {image}: SGLang's parser did not answer within {timeout_s:.0f} s; the container was "
                "stopped (raise --timeout, or check that the image starts without a GPU)"
            )
        try:
            data = read(result)
        except ProbeOutputError as err:
            detail = _tail(result.stderr) or _tail(result.stdout) or f"exit code {result.exit_code}"
            raise ImageProbeError(f"image {image}: {python}: {err}: {detail}") from err
        if data.get("no_sglang"):
            tried.append(f"{python} (no sglang)")
            no_sglang = True
            continue
        return ProbeRun(data=data, python=python, seconds=result.seconds)
    fix = "set image.entrypoint (or --python) to the image's Python that has SGLang, e.g. /opt/venv/bin/python"
    if no_sglang:
        raise ImageProbeError(f"image {image} has no SGLang: tried {', '.join(tried)}; {fix}")
    raise ImageProbeError(f"image {image} has no Python at {', '.join(python_candidates(entrypoint))}; {fix}")


def _read_dump(result: OneShotResult) -> dict[str, Any]:
    if result.exit_code != 0:
        if _NO_SGLANG.search(result.stderr):
            return {"no_sglang": True}
        raise ProbeOutputError(f"the dumper failed (exit {result.exit_code})")
    return parse_dump_output(result.stdout)


def _read_logs(result: OneShotResult) -> dict[str, Any]:
    if result.exit_code != 0:
        raise ProbeOutputError(f"the log dumper failed (exit {result.exit_code})")
    data = _json_object(result.stdout[result.stdout.find("{") :])
    if not isinstance(data.get("lines"), list):
        raise ProbeOutputError("the log dump has no lines")
    return data


def _read_probe(result: OneShotResult) -> dict[str, Any]:
    data = parse_probe_output(result.stdout)
    if data.get("error") and not data.get("no_sglang"):
        raise ProbeOutputError(str(data["error"]))
    return data


# -- catalog extract -----------------------------------------------------------------------------------------


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

    @property
    def version(self) -> str:
        return str(self.document.get("version", ""))

    @property
    def option_count(self) -> int:
        return len(self.document.get("options") or ())


def extract_catalog(
    *,
    image: str,
    engine: DockerEngine,
    entrypoint: Sequence[str] | None = None,
    out: Path | None = None,
    logs: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    store_dir: Path | None = None,
) -> ExtractedCatalog:
    """Dump the image's own parser into a flag catalog, kept in the user cache by image id (and in ``out``).

    With ``logs``, also the logger format strings of the image's ``sglang/srt`` (``engine_dump.py logs``),
    written beside the catalog as ``<name>.logs.json``.

    Raises:
        PreflightFailed: the image is not on this host.
        ImageProbeError: the image has no usable Python or SGLang, or its parser could not be read.
    """
    info = engine.image(image)
    if info is None:
        raise PreflightFailed(f"image {image} is not on this host: docker pull {image} (or docker load -i FILE)")
    run = run_in_image(
        engine, image, source=_source(engine_dump), args=["flags"], read=_read_dump, entrypoint=entrypoint,
        timeout_s=timeout_s,
    )  # fmt: skip
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
    logs_written: list[Path] = []
    if logs:
        log_run = run_in_image(
            engine, image, source=_source(engine_dump), args=["logs"], read=_read_logs, entrypoint=(run.python,),
            timeout_s=timeout_s,
        )  # fmt: skip
        for path in (stored, written):
            if path is not None:
                logs_written.append(write_catalog(log_run.data, path.with_name(path.stem + ".logs.json")))
    return ExtractedCatalog(document, source, stored, written, run.python, run.seconds, tuple(logs_written))


# -- argv parse in the image ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParseVerdict:
    """What the image's own SGLang said of an argv."""

    image: str
    parsed: bool
    error: str | None  # SGLang's (argparse's) message when it did not parse
    resolved: bool | None  # the post-parse resolution ran through (None: not reached)
    resolve_error: str | None  # its exception, which may only mean "needs a GPU or the model files"
    sglang_version: str
    python: str
    seconds: float


def parse_in_image(
    *,
    image: str,
    argv: Sequence[str],
    engine: DockerEngine,
    entrypoint: Sequence[str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ParseVerdict:
    """Parse ``argv`` (engine flags only) with the image's own parser and run its post-parse resolution.

    Raises:
        PreflightFailed: the image is not on this host.
        ImageProbeError: the image has no usable Python or SGLang, or the probe broke.
    """
    run = run_in_image(
        engine, image, source=_source(sglang_probe), args=["parse", *argv], read=_read_probe, entrypoint=entrypoint,
        timeout_s=timeout_s,
    )  # fmt: skip
    data = run.data
    return ParseVerdict(
        image=image,
        parsed=bool(data.get("parsed")),
        error=str(data["parse_error"]) if data.get("parse_error") else None,
        resolved=data.get("resolved") if isinstance(data.get("resolved"), bool) else None,
        resolve_error=str(data["resolve_error"]) if data.get("resolve_error") else None,
        sglang_version=str(data.get("sglang_version") or ""),
        python=run.python,
        seconds=run.seconds,
    )


# -- what the commands call ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageTarget:
    """An image to ask, and the Python to ask it with (from a profile's ``image.entrypoint``, if any)."""

    image: str
    entrypoint: tuple[str, ...] | None = None
    profile: Profile | None = None  # the profile it came from, read once


def looks_like_image_ref(name: str) -> bool:
    """Image references have a tag, a registry path or a digest; profile names have none of those."""
    return any(c in name for c in ":/@")


def image_target(name: str) -> ImageTarget:
    """``name`` as a profile (its image and entrypoint) when such a profile exists, else as an image reference.

    Raises:
        UsageError: neither a profile nor something that looks like an image reference.
    """
    from servectl.errors import UsageError
    from servectl.profile.loader import read_profile

    if not looks_like_image_ref(name):
        try:
            profile = read_profile(name).profile
        except UsageError:
            pass
        else:
            return ImageTarget(profile.image.pinned_ref, tuple(profile.image.entrypoint), profile)
    if not name.strip():
        raise UsageError("name an image (repository:tag) or a profile")
    return ImageTarget(name)


def load_catalog_target(name: str, *, engine: DockerEngine | None = None) -> tuple[str, FlagCatalog]:
    """A catalog for ``catalog diff``: a catalog spec (shipped name, ``sha256:...``, ``.json`` file), a
    profile (its catalog), or an image (its extracted catalog; extracted now when there is none yet and
    ``engine`` is given). Returns ``(label, FlagCatalog)``.

    Raises:
        UsageError: nothing by that name. ImageProbeError / PreflightFailed: extracting failed.
    """
    from servectl.errors import UsageError
    from servectl.profile.catalog_store import IMAGE, find_extracted, is_catalog_file, load_catalog

    if name in FlagCatalog.available() or is_catalog_file(name) or (name.startswith("sha256:") and name != IMAGE):
        try:
            return name, load_catalog(name).catalog
        except KeyError as err:
            raise UsageError(str(err.args[0])) from None
    target = image_target(name)
    if target.profile is not None:
        from servectl.plan.compile import catalog_for

        profile = target.profile
        try:
            return f"{name} ({profile.engine.catalog})", catalog_for(profile)
        except (KeyError, ValueError) as err:
            raise UsageError(f"profile {name}: engine.catalog: {err.args[0]}") from None
    stored = find_extracted(ref=target.image)
    if stored is None and engine is not None and engine.image(target.image) is not None:
        extract_catalog(image=target.image, engine=engine)
        stored = find_extracted(ref=target.image)
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
                      image_digest: str | None, store_dir: Path | None = None) -> str | None:  # fmt: skip
    """A note when the profile's catalog is older than what its image's own extracted catalog says.

    Only the catalog cache is read (no Docker): the image's catalog is the newest extracted under its
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


def profile_catalog_note(resolved_profile: Any) -> str | None:
    """:func:`catalog_staleness` for a profile (its catalog spec, image ref and digest)."""
    from servectl.profile.catalog_store import load_catalog

    engine_spec = resolved_profile.engine.catalog
    try:
        stored = load_catalog(
            engine_spec, image_ref=resolved_profile.image.ref, image_digest=resolved_profile.image.digest
        )
    except KeyError:
        return None
    return catalog_staleness(
        catalog_spec=engine_spec,
        catalog_version=stored.catalog.version,
        catalog_image_id=stored.image.id if stored.image else None,
        image_ref=resolved_profile.image.ref,
        image_digest=resolved_profile.image.digest,
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
