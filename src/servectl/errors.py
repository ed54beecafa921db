"""The one exception tree of servectl.

Every error a user can cause or meet is a :class:`ServectlError`; the CLI catches that base class in exactly
one place, prints ``str(err)`` (one line per problem, no traceback) and exits with ``err.exit_code``.
Errors from the Docker SDK, NVML or the OS are wrapped ``from e`` so that the cause is kept for debugging.

::

    ServectlError                   exit 1   runtime failure (base class)
    ├── UsageError                  exit 2   bad command-line use (unknown profile name, bad option value)
    │   └── RenderUnsupported       exit 2   the profile cannot be expressed in the requested render target
    ├── ProfileError                exit 2   profile files: schema, catalog or cross-field rule problems
    │   ├── CatalogError            exit 2   a flag or value the engine's flag catalog rejects
    │   └── ProfileTemplate         exit 2   the profile is a template still to be filled in (``template:``)
    ├── PreflightFailed             exit 3   a preflight check failed; nothing was started
    ├── StartupFailed               exit 3   the container did not pass the health gate; it was removed
    ├── EngineUnavailable           exit 1   the Docker engine (or NVML) cannot be reached
    │   └── GpuUnavailable          exit 1   NVML cannot be loaded or initialised (no driver, no library)
    ├── ServiceConflict             exit 1   another servectl service holds the GPUs, port or name; use ``swap``
    ├── LockTimeout                 exit 1   another servectl process is changing services
    ├── UnfinishedTransaction       exit 1   a killed swap/up left its journal: `servectl recover` settles it
    ├── StateDamaged                exit 1   a file in the state folder is damaged; the message names it
                                             and says what to do (read-only commands go on without it)
    ├── StateAccessDenied           exit 1   this user may not open a file of the state folder; the message
                                             names its owner, this user and the fix
    ├── BenchFailed                 exit 1   the benchmark could not run or had flagged requests
    ├── QualificationFailed         exit 1   a qualification gate failed (the evidence is still written)
    ├── ClaimsFailed                exit 1   a finding's claims no longer recount from its artifacts
    ├── SwapRolledBack              exit 4   swap target failed, the previous service is back and healthy
    ├── SwapFailed                  exit 5   swap target failed and the previous service failed too
    ├── UpInterrupted               exit 130 a signal stopped `up` before its service passed the gate; what it
    │                                        started was removed
    ├── CampaignInterrupted         exit 130 a signal stopped a campaign; what ran before it is back and
    │                                        `campaign resume` continues it
    └── SwapInterrupted             exit 130 a swap was interrupted where no rollback applied; the message
                                             says what runs now and what to run next

Exit code 0 means success. Exit code 130 is also used when the user interrupts (Ctrl-C) outside a swap.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


class ServectlError(Exception):
    """Base class: a failure servectl explains in one line per problem."""

    exit_code: int = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def lines(self) -> list[str]:
        """The message as printed, one problem per line."""
        return self.message.splitlines() or [self.message]


class UsageError(ServectlError):
    """The command line asks for something that cannot be (unknown profile, bad option)."""

    exit_code = 2


class RenderUnsupported(UsageError):
    """``servectl render`` cannot express this profile in the target asked for (e.g. multi-node compose)."""


@dataclass(frozen=True)
class Problem:
    """One problem in a profile: where it is, and what is wrong with a hint at the fix."""

    file: str
    line: int | None
    field: str
    message: str
    rule: str = ""  # what found it: a rule name (``engine.mamba_cache``), ``schema.<kind>``, ``yaml``, ``extends``

    def to_dict(self) -> dict[str, str | int | None]:
        """Plain dict for ``validate --json``."""
        return {"file": self.file, "line": self.line, "field": self.field, "rule": self.rule, "message": self.message}

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class ProfileError(ServectlError):
    """One or more problems in profile files, all reported at once."""

    exit_code = 2

    def __init__(self, problems: Iterable[Problem] | str) -> None:
        if isinstance(problems, str):
            self.problems: tuple[Problem, ...] = ()
            super().__init__(problems)
            return
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class CatalogError(ProfileError):
    """A flag or value that the profile's engine flag catalog does not accept."""


class ProfileTemplate(ProfileError):
    """The profile is a template (it has a ``template:`` key saying how to fill it in) and cannot run yet."""

    def __init__(self, name: str, instructions: str, *, file: str = "", line: int | None = None) -> None:
        super().__init__(f"profile {name} is a template: {instructions}")
        self.problems = (Problem(file, line, "template", f"a template: {instructions}", rule="template"),)
        self.name = name
        self.instructions = instructions


class PreflightFailed(ServectlError):
    """At least one preflight check failed; nothing was started."""

    exit_code = 3

    def __init__(self, message: str, *, report: object | None = None) -> None:
        super().__init__(message)
        self.report = report


class StartupFailed(ServectlError):
    """The service did not pass the health gate; what was started has been removed."""

    exit_code = 3

    def __init__(
        self,
        message: str,
        *,
        last_log_lines: Sequence[str] = (),
        exit_code_of_container: int | None = None,
        oom_killed: bool = False,
    ) -> None:
        super().__init__(message)
        self.last_log_lines = tuple(last_log_lines)
        self.exit_code_of_container = exit_code_of_container
        self.oom_killed = oom_killed


class EngineUnavailable(ServectlError):
    """The Docker engine or the NVIDIA driver cannot be reached."""


class GpuUnavailable(EngineUnavailable):
    """NVML cannot be used: the NVIDIA driver or its management library is missing or not loaded."""


class ServiceConflict(ServectlError):
    """Another service holds what this one needs (GPUs, port, container name, the same profile with another
    plan). Raised from preflight's ``services`` and ``container.name`` checks with the report attached."""

    def __init__(self, message: str, *, report: object | None = None) -> None:
        super().__init__(message)
        self.report = report


class LockTimeout(ServectlError):
    """Another servectl process held the state lock for longer than we wait."""


class UpInterrupted(ServectlError):
    """SIGINT/SIGTERM/SIGHUP stopped ``up`` before its service passed the health gate; it was removed."""

    exit_code = 130


class CampaignInterrupted(ServectlError):
    """SIGINT/SIGTERM/SIGHUP stopped a campaign: what ran before it was put back (a signal while it was put back
    stops that waiting, as in a swap's undo: the message says what runs and what to do), its measurements are kept
    and ``servectl campaign resume`` continues it."""

    exit_code = 130


class UnfinishedTransaction(ServectlError):
    """A swap, rollback or up was killed (its journal is still there); ``servectl recover`` settles it."""


class StateDamaged(ServectlError):
    """A file in servectl's state folder (history, journal, stopped conflicts, lock) cannot be used.

    ``path`` is the file; the message names it, says what is wrong and what to do.
    """

    def __init__(self, message: str, *, path: object = None) -> None:
        super().__init__(message)
        self.path = path


class StateAccessDenied(ServectlError):
    """This user may not open or share a file of servectl's state folder: not damage, a matter of owners.

    The message names the file, its owner and mode, the user servectl runs as, and how to fix it.
    """


class BenchFailed(ServectlError):
    """The benchmark could not run (server unreachable, no such model, calibration failed) or some of its
    requests were flagged (short, broken or failed streams) and left out of the results."""


class QualificationFailed(ServectlError):
    """``servectl qualify`` ran, and at least one gate failed; the evidence names every failed case."""


class ClaimsFailed(ServectlError):
    """``servectl claims verify``: claims of a finding no longer hold (one line per claim, naming it)."""


class SwapError(ServectlError):
    """A swap that did not end with the target up; ``result`` is the swap's record (phases, timings), ``signum``
    the user's signal that stopped it (None: the target failed, no signal)."""

    def __init__(self, message: str, *, result: object | None = None, signum: int | None = None) -> None:
        super().__init__(message)
        self.result = result
        self.signum = signum


class SwapRolledBack(SwapError):
    """The swap target failed; the previous service was started again and passed the health gate."""

    exit_code = 4


class SwapFailed(SwapError):
    """The swap target failed and so did the previous service; nothing is running."""

    exit_code = 5


class SwapInterrupted(SwapError):
    """SIGINT/SIGTERM stopped a swap where no rollback applied (before anything changed, nothing ran before,
    or a second signal while restoring); the message says what runs now and what to run next."""

    exit_code = 130
