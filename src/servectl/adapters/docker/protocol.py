"""The one interface servectl takes a container engine through (the runtime, the health gate, swap, conflicts,
preflight): :class:`DockerEngine`. The real one is :class:`servectl.adapters.docker.sdk.DockerSdkEngine`, the
fake ``servectl.testing.docker.FakeDockerEngine``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from servectl.adapters.docker.values import ContainerState, EngineInfo, ImageInfo, LogLines, OneShotResult

if TYPE_CHECKING:
    from servectl.plan.compile import DockerRunSpec


class DockerEngine(Protocol):
    """What servectl needs from a container engine. Every method returns plain values."""

    def ping(self) -> EngineInfo:
        """The engine's version, runtimes and CDI spec folders.

        Raises:
            EngineUnavailable: the engine does not answer (the message says the fix).
        """

    def image(self, ref: str) -> ImageInfo | None:
        """The local image for a reference (tag, ``repo@sha256:...``, bare digest or id), or ``None``."""

    def image_present(self, ref: str) -> bool:
        """Whether the image (``repo:tag`` or ``repo@sha256:...``) is on this host."""

    def create_and_start(self, spec: DockerRunSpec, *, environ: Mapping[str, str]) -> str:
        """Create and start the container of ``spec``; return its id.

        ``environ`` (the context's) supplies the pass-through variables (``environment`` values of None). If
        the engine creates the container but cannot start it, the container is removed before the error is
        raised.
        """

    def list_managed(self, label_filter: Mapping[str, str] | None = None) -> list[ContainerState]:
        """Every container servectl started (running or not), optionally narrowed by more labels."""

    def running_containers(self) -> list[ContainerState]:
        """Every running, paused or restarting container, servectl's or not."""

    def containers_named(self, name: str) -> list[ContainerState]:
        """The container with exactly this name, if any (a list, empty when there is none)."""

    def inspect(self, id_or_name: str) -> ContainerState | None:
        """The container's state, or None when there is no such container."""

    def container_document(self, id_or_name: str) -> dict[str, Any] | None:
        """``docker inspect`` of the container as the engine returns it (plain data), or None."""

    def image_document(self, ref: str) -> dict[str, Any] | None:
        """``docker image inspect`` of the image as the engine returns it (plain data), or None."""

    def logs(self, container_id: str, *, follow: bool, tail: int | None = None, since: float | None = None) -> LogLines:
        """Log lines (stdout and stderr), split on newlines and carriage returns.

        With ``follow`` the stream ends when the container stops (or on ``close()``).
        """

    def stop(self, container_id: str, *, timeout_s: int) -> None:
        """Send the stop signal (SIGTERM), wait up to ``timeout_s``, then SIGKILL."""

    def kill(self, container_id: str) -> None:
        """SIGKILL now."""

    def remove(self, container_id: str, *, force: bool) -> None:
        """Remove the container (``force`` kills it first); a container already gone is not an error."""

    def start(self, container_id: str) -> None:
        """Start a stopped container again (used for conflict containers that swap restores)."""

    def import_image(self, ref: str, *, write_rootfs: Callable[[BinaryIO], Sequence[str]]) -> None:
        """Make image ``ref`` (``repo:tag``) from a root filesystem, as ``docker import`` does: ``write_rootfs``
        writes the tar to the file it is given and returns the image's Dockerfile changes (``CMD``, ``ENV``,
        ``LABEL``). servectl's own images (the stand-in engine, the gateway) are built through it.

        Raises:
            EngineUnavailable: the engine does not answer. ServectlError: it refused the import or made no ``ref``.
        """

    def tag_image(self, ref: str, target: str) -> None:
        """Tag the local image ``ref`` as ``target`` (``repo:tag``), moving ``target`` if it named another image."""

    def run_oneshot(
        self, image: str, command: list[str], *, timeout_s: float, labels: Mapping[str, str] | None = None
    ) -> OneShotResult:
        """Run ``command`` in a throwaway container of ``image`` and remove it, whatever happens.

        The container has no network, no GPU, a read-only root file system (a small ``/tmp``), no
        capabilities, and is killed after ``timeout_s``; the image's entrypoint is not used.
        """


__all__ = ["DockerEngine"]
