"""Staging: everything a swap's target needs that can be done while the old service still serves.

A swap is stop-then-start, so whatever the target's start waits for counts as downtime. Staging does it
before the stop, in the swap's forward path (:mod:`servectl.service.swap`, phase ``stage``):

1. **image**: the image that will run (``ref@digest`` when the profile pins one) is on this host and is the
   pinned one (:attr:`ImageSpec.digest <servectl.profile.models.ImageSpec>`);
2. **parse**: the image's own SGLang parses the plan's argv (:func:`servectl.adapters.engine_image.parse_in_image`);
   the stand-in image parses with servectl's own catalog, which the plan already passed;
3. **weights**: the model's weight files are read ahead into the page cache
   (:func:`servectl.adapters.readahead.read_ahead`), at most what free host RAM holds (the host probe's
   available memory less :func:`headroom_bytes`), with progress, so that the engine's start reads them from
   RAM, not from disk.

A failure is one line (:class:`~servectl.errors.PreflightFailed`, exit 3) raised before anything stops:
nothing changes when staging fails. ``swap --no-stage`` skips staging.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from servectl.errors import PreflightFailed, ServectlError
from servectl.service.health import Progress

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerEngine, ImageInfo
    from servectl.adapters.engine_image import ParseMemo, ParseVerdict
    from servectl.adapters.host import HostProbe
    from servectl.adapters.readahead import ReadAhead
    from servectl.plan.resolve import Resolved

#: The preflight check id whose ``--force`` also skips staging's parse (the same question asked of the image).
ENGINE_PARSE = "engine.parse"
#: Host RAM kept free of read-ahead weights, at least: the engine's own process and the rest of the host need it.
MIN_HEADROOM_BYTES = 2 * 2**30
#: ... and at least this share of the host's RAM.
HEADROOM_FRACTION = 0.1
_GIB = 2**30


@dataclass(frozen=True)
class StageReport:
    """What staging checked and read before the stop."""

    profile: str
    image: str
    image_id: str
    pinned: str | None
    parse: ParseVerdict | None
    parse_note: str
    read_ahead: ReadAhead | None
    weights_note: str
    seconds: float

    def summary(self) -> str:
        """One line: the image, the parse, the weights."""
        pin = f"pinned {self.pinned[:19]}" if self.pinned else "not pinned"
        return f"image {self.image_id[:19]} ({pin}); {self.parse_note}; {self.weights_note}"


class Stager(Protocol):
    """Stages ``resolved`` before the old service stops; raises :class:`PreflightFailed` when it cannot start."""

    def __call__(
        self,
        *,
        resolved: Resolved,
        docker: DockerEngine,
        skip: frozenset[str],
        on_progress: Callable[[Progress], None] | None = None,
        parses: ParseMemo | None = None,
    ) -> StageReport: ...


def headroom_bytes(total_bytes: int) -> int:
    """Host RAM that read-ahead leaves free: :data:`HEADROOM_FRACTION` of it, at least :data:`MIN_HEADROOM_BYTES`."""
    return max(MIN_HEADROOM_BYTES, int(total_bytes * HEADROOM_FRACTION))


def stage_target(
    resolved: Resolved,
    *,
    docker: DockerEngine,
    host: HostProbe,
    skip: frozenset[str] = frozenset(),
    on_progress: Callable[[Progress], None] | None = None,
    read_weights: bool = True,
    clock: Callable[[], float],
    parses: ParseMemo | None = None,
) -> StageReport:
    """Check the target's image and argv in the image, and read its weights ahead (see the module docstring).

    Args:
        resolved: the swap's target.
        docker: the Docker engine (image inspect, the throwaway parse container).
        host: the host probe: free RAM bounds the read-ahead.
        skip: preflight check ids forced by the user; ``engine.parse`` skips the parse here too.
        on_progress: ``Progress("image" | "parse" | "weights", detail, percent)`` as each step goes.
        read_weights: ``False`` checks image and argv only.
        clock: monotonic seconds.
        parses: the swap's memo of the image's parser verdicts: preflight's ``engine.parse`` asked it first, so
            the image is asked once per swap. None: ask the image.

    Raises:
        PreflightFailed: the image is missing or not the pinned one, the image rejects the argv or cannot be
            asked, or a weight file cannot be read; one line naming the profile file and field. Nothing stopped.
    """
    began = clock()
    tell = on_progress or (lambda _progress: None)
    tell(Progress("image", resolved.plan.docker.image))
    found_by, info = _staged_image(resolved, docker)
    verdict, parse_note = _staged_parse(resolved, docker, found_by, info, skip, tell, parses)
    read, weights_note = _staged_weights(resolved, host, tell, clock) if read_weights else (None, "weights not read")
    return StageReport(
        profile=resolved.name,
        image=resolved.plan.docker.image,
        image_id=info.id,
        pinned=resolved.loaded.profile.image.digest,
        parse=verdict,
        parse_note=parse_note,
        read_ahead=read,
        weights_note=weights_note,
        seconds=clock() - began,
    )


def stager(host: HostProbe, *, clock: Callable[[], float], read_weights: bool = True) -> Stager:
    """:func:`stage_target` as a swap's :class:`Stager`, with ``host`` (the context's probe) for free RAM and
    ``clock`` (the context's monotonic clock) for the read-ahead's pace."""

    def stage(
        *,
        resolved: Resolved,
        docker: DockerEngine,
        skip: frozenset[str],
        on_progress: Callable[[Progress], None] | None = None,
        parses: ParseMemo | None = None,
    ) -> StageReport:
        return stage_target(
            resolved,
            docker=docker,
            host=host,
            skip=skip,
            on_progress=on_progress,
            read_weights=read_weights,
            clock=clock,
            parses=parses,
        )

    return stage


def _where(resolved: Resolved, field: str) -> str:
    return f"{resolved.plan.source}: {field}: staging {resolved.name}:"


def _staged_image(resolved: Resolved, docker: DockerEngine) -> tuple[str, ImageInfo]:
    """The local image that will run (the reference it was found by, and the image), and that it is the pinned one."""
    run_ref = resolved.plan.docker.image
    image = resolved.loaded.profile.image
    # ``repo:tag@digest`` runs the digest: look it up as Docker resolves it, by repo digest, or by image id
    refs = [run_ref, *((f"{_repository(image.ref)}@{image.digest}", image.digest) if image.digest else ())]
    for ref in refs:
        info = docker.image(ref)
        if info is not None and (image.digest is None or image.digest in info.digests()):
            return ref, info
    tagged = docker.image(image.ref) if image.digest else None
    if tagged is not None and image.digest is not None:
        raise PreflightFailed(
            f"{_where(resolved, 'image.digest')} the pinned image {image.digest[:19]} is not on this host and "
            f"{image.ref} is {tagged.id[:19]}; load the pinned image, or re-pin after qualifying this one "
            "(nothing was stopped)"
        )
    raise PreflightFailed(
        f"{_where(resolved, 'image.ref')} image {run_ref} is not on this host; docker pull it where a "
        "registry is reachable, or docker load -i FILE (nothing was stopped)"
    )


def _repository(ref: str) -> str:
    """``registry:5000/name:tag`` without its tag."""
    head, _, last = ref.rpartition("/")
    name = last.split(":", 1)[0]
    return f"{head}/{name}" if head else name


def _staged_parse(
    resolved: Resolved,
    docker: DockerEngine,
    ref: str,
    info: ImageInfo,
    skip: frozenset[str],
    tell: Callable[[Progress], None],
    parses: ParseMemo | None = None,
) -> tuple[ParseVerdict | None, str]:
    """The image's own verdict on the argv, or why it was not asked."""
    from servectl.preflight.facts import STANDIN_LABEL

    if ENGINE_PARSE in skip:
        return None, f"argv not parsed in the image (--force {ENGINE_PARSE})"
    if resolved.loaded.profile.image.build == "standin" or STANDIN_LABEL in info.labels:
        return None, "argv checked by servectl's catalog (the stand-in image parses with it)"
    from servectl.adapters.engine_image import parse_in_image

    tell(Progress("parse", info.id[:19]))
    ask = parse_in_image if parses is None else parses.parse
    try:
        verdict = ask(
            image=ref,
            argv=resolved.plan.engine_argv,
            engine=docker,
            entrypoint=resolved.loaded.profile.image.entrypoint or None,
        )
    except ServectlError as err:
        raise PreflightFailed(
            f"{_where(resolved, 'image.entrypoint')} could not parse the argv in the image: {err.message} "
            f"(or swap with --force {ENGINE_PARSE}; nothing was stopped)"
        ) from err
    if not verdict.parsed:
        raise PreflightFailed(
            f"{_where(resolved, 'engine.args')} SGLang {verdict.sglang_version} in the image rejects the argv: "
            f"{verdict.error}; fix that setting (servectl validate {resolved.name} --in-image) (nothing was stopped)"
        )
    return verdict, f"argv parsed by SGLang {verdict.sglang_version} in the image ({verdict.seconds:.1f} s)"


def _staged_weights(
    resolved: Resolved, host: HostProbe, tell: Callable[[Progress], None], clock: Callable[[], float]
) -> tuple[ReadAhead | None, str]:
    """The model's weight files read ahead, bounded by free host RAM."""
    from servectl.adapters.host import weight_files
    from servectl.adapters.readahead import read_ahead

    folder = resolved.plan.docker.mounts[0].source
    files = weight_files(folder)
    if not files:
        return None, f"no weight files in {folder} to read ahead"
    memory = host.memory()
    budget = max(0, memory.available_bytes - headroom_bytes(memory.total_bytes))
    total = sum(f.size_bytes for f in files)
    tell(Progress("weights", f"{len(files)} files, {_size(total)}; {_size(budget)} of RAM to read them into"))

    def progress(done: int, target: int) -> None:
        percent = 100 * done // target if target else 100
        tell(Progress("weights", f"{_size(done)} of {_size(target)}", percent=percent))

    try:
        read = read_ahead(files, budget_bytes=budget, on_progress=progress, clock=clock)
    except ServectlError as err:
        raise PreflightFailed(f"{_where(resolved, 'model.path')} {err.message} (nothing was stopped)") from err
    rate = f", {_size(int(read.rate_bytes_per_s))}/s" if read.rate_bytes_per_s else ""
    note = f"read {_size(read.bytes_read)} of weights ahead in {read.seconds:.1f} s{rate}"
    if read.bounded:
        note += f" (of {_size(total)}: free host RAM bounds it; the rest is read at start)"
    return read, note


def _size(n: int) -> str:
    return f"{n / _GIB:.2f} GiB" if n >= _GIB else f"{n / 2**20:.1f} MiB"


__all__ = [
    "ENGINE_PARSE",
    "HEADROOM_FRACTION",
    "MIN_HEADROOM_BYTES",
    "StageReport",
    "Stager",
    "headroom_bytes",
    "stage_target",
    "stager",
]
