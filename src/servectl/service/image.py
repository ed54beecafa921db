"""The service's image: present on this host, or built (the stand-in engine); servectl pulls from no registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from servectl.errors import PreflightFailed, ServectlError

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerEngine
    from servectl.plan.resolve import Resolved
    from servectl.service.health import Progress


ImageBuilder = Callable[[str], object]


FLOATING_STANDIN_REF = "servectl-standin:latest"


def build_standin(ref: str, *, docker: DockerEngine) -> object:
    """Build the stand-in engine image tagged ``ref`` on ``docker`` (servectl assembles it from its own files)."""
    try:
        from servectl.standin.image import IMAGE_REPOSITORY, build_standin_image
    except ImportError as e:
        raise ServectlError(f"cannot build {ref}: servectl's stand-in engine is not installed ({e})") from e
    if "@" in ref:  # a pinned build that is not here: a new build would have another id
        name, _, digest = ref.partition("@")
        raise PreflightFailed(
            f"image {ref}: image.digest pins a stand-in build ({digest}) that is not on this host; set image.digest "
            f"to the id of the build here (docker image inspect --format '{{{{.Id}}}}' {name}) or remove it"
        )
    if ref == f"{IMAGE_REPOSITORY}:latest":  # the content-addressed build, which also tags latest
        return build_standin_image(docker=docker)
    return build_standin_image(docker=docker, tag=ref)


def ensure_image(
    resolved: Resolved,
    *,
    docker: DockerEngine,
    build_image: ImageBuilder | None = None,
    on_phase: Callable[[Progress], None] | None = None,
) -> None:
    """Make sure the profile's image is on this host: build the stand-in when the profile says so.

    Raises:
        PreflightFailed: the image is missing and servectl cannot build it (it pulls from no registry).
    """
    from servectl.service.health import Progress  # the gate's module, not loaded on status's path

    build = build_image or (lambda ref: build_standin(ref, docker=docker))
    ref = resolved.plan.docker.image
    image = resolved.loaded.profile.image
    # ``servectl-standin:latest`` floats: another servectl version (or checkout) may have tagged it last, so it is
    # always handed to the builder, which finds the build of this servectl's sources by content hash and
    # re-points ``latest`` at it (no rebuild when that build exists).
    if image.build == "standin" and ref == FLOATING_STANDIN_REF:
        if on_phase is not None:
            on_phase(Progress("checking image", ref))
        build(ref)
        return
    if docker.image_present(ref):
        return
    if image.build == "standin":
        if on_phase is not None:
            on_phase(Progress("building image", ref))
        build(ref)
        return
    raise PreflightFailed(
        f"{resolved.plan.source}: image.ref: image {ref} is not on this host and servectl pulls from no "
        f"registry: run docker pull {ref} where a registry is reachable, or docker load -i FILE"
    )
