"""``servectl recover``: settle a transaction (swap, rollback, up) that was killed before it finished.

A transaction keeps a journal (:mod:`servectl.service.journal`) from its first change until it is resolved.
After ``kill -9``, a power cut or a crash, the journal is still there and every command that would change
services refuses until it is settled. ``recover`` settles it from the journal, not from today's files:

* the target passed its health gate (its gate record says so): the transaction had in fact finished; it is
  recorded in the history, nothing is stopped;
* otherwise the orphaned target is removed (it never proved it serves), the previous service is started
  again from the profile document kept in the journal (what ran, even if its file changed since), through
  the same health gate, and the conflicts the transaction stopped are restored.

The journal is removed once that is done (also when the previous service fails to come back: the failure is
then the state, reported with what to do). A damaged journal cannot say what ran before: ``recover`` then
removes only services that never passed their gate, sets the journal aside and says what runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from servectl.adapters.conflicts import ConflictHandler, RestoreOutcome, restore_conflicts
from servectl.adapters.state import History, StateLock, set_aside
from servectl.errors import ServectlError, StateDamaged, SwapFailed
from servectl.service.journal import JOURNAL_FILE, PreviousService, SwapJournal, clear_journal, read_journal
from servectl.service.services import ALIVE_STATES, passed_gate_ids

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerEngine
    from servectl.adapters.gpu import GpuInventory
    from servectl.plan.resolve import Resolved
    from servectl.service.runtime import ServiceRuntime

RecoverOutcome = Literal["nothing", "finished", "restored", "cleared"]


@dataclass(frozen=True)
class RecoverResult:
    """What ``recover`` did.

    Attributes:
        outcome: ``nothing`` (no journal), ``finished`` (the target had passed its gate), ``restored`` (the
            previous service is back), ``cleared`` (the target removed; nothing ran before, or the journal
            was damaged).
        message: one paragraph for the user: what runs now.
        removed: container names removed.
        restored: the profile brought back, if any.
        conflicts_restore: what restoring the transaction's conflicts did.
    """

    outcome: RecoverOutcome
    message: str
    removed: tuple[str, ...] = ()
    restored: str | None = None
    conflicts_restore: RestoreOutcome | None = None


def recover(
    *,
    docker: DockerEngine,
    gpus: GpuInventory | None = None,
    state_dir: Path | None = None,
    scope: Mapping[str, str] | None = None,
    runtime: ServiceRuntime | None = None,
    conflicts: ConflictHandler | None = None,
    history: History | None = None,
    lock_timeout_s: float | None = None,
    on_phase: Callable[..., None] | None = None,
    environ: Mapping[str, str] | None = None,
    resolve_profile: Callable[[str], Resolved] | None = None,
) -> RecoverResult:
    """Settle the transaction the journal names (see the module docstring).

    ``gpus``: what each stop waits on until the cards are free, as in ``swap`` (None: no wait).

    Raises:
        SwapFailed: the previous service did not pass its gate again; nothing of it runs (journal removed).
        LockTimeout: another servectl process is changing services.
    """
    from servectl.paths import state_dir as default_state_dir
    from servectl.service.runtime import lock_timeout_default

    env = os.environ if environ is None else environ
    state = state_dir or default_state_dir(env)
    timeout = lock_timeout_default(env) if lock_timeout_s is None else lock_timeout_s
    if runtime is None:
        from servectl.service.runtime import DockerRuntime

        runtime = DockerRuntime()
    if conflicts is None:
        from servectl.adapters.conflicts import DockerConflicts

        conflicts = DockerConflicts(docker=docker)
    history = history if history is not None else History(state)
    with StateLock(state, timeout, purpose="recover"):
        try:
            journal = read_journal(state)
        except StateDamaged as err:
            return _clear_damaged(err, docker=docker, gpus=gpus, state=state, scope=scope, runtime=runtime)
        if journal is None:
            return RecoverResult("nothing", "no unfinished swap, rollback or up: nothing to recover")
        return _settle(
            journal,
            docker=docker,
            gpus=gpus,
            state=state,
            scope=scope,
            runtime=runtime,
            conflicts=conflicts,
            history=history,
            on_phase=on_phase,
            environ=env,
            resolve_profile=resolve_profile,
        )


def _settle(
    journal: SwapJournal,
    *,
    docker: DockerEngine,
    gpus: GpuInventory | None,
    state: Path,
    scope: Mapping[str, str] | None,
    runtime: ServiceRuntime,
    conflicts: ConflictHandler,
    history: History,
    on_phase: Callable[..., None] | None,
    environ: Mapping[str, str],
    resolve_profile: Callable[[str], Resolved] | None,
) -> RecoverResult:
    running = list(runtime.services(docker=docker, probe=False, plan_hash_of=None, state_dir=state, scope=scope))
    targets = [s for s in running if s.profile == journal.to_profile]
    passed = passed_gate_ids(state, [(s.container_id, s.container_name) for s in targets])
    served = [s for s in targets if s.container_id in passed and s.state in ALIVE_STATES]
    what = f"the {journal.kind} from {journal.from_profile or 'nothing'} to {journal.to_profile}"
    if served:  # killed after the gate passed, before the bookkeeping: it had finished
        event = "up" if journal.kind == "up" else journal.kind
        history.record(
            {
                "event": event,
                "profile": journal.to_profile,
                "replaced": journal.from_profile,
                "container_id": served[0].container_id,
                "container_name": served[0].container_name,
                "recovered": True,
            }
        )
        clear_journal(state)
        return RecoverResult(
            "finished", f"{what} had finished: {journal.to_profile} passed its health gate and runs; recorded it"
        )
    removed: list[str] = []
    for service in targets:
        runtime.stop(service=service, docker=docker, gpus=gpus, state_dir=state)
        removed.append(service.container_name)
    removed_text = f"removed {', '.join(removed)} (it never passed its health gate)" if removed else ""
    restored: str | None = None
    failure: str | None = None
    drift = ""
    previous = journal.from_profile
    if previous is not None and journal.phase != "begin":
        # The transaction had begun stopping it: a stop may still be in flight in the engine (the client
        # died, the daemon carries on), so what looks alive is finished off and started again as it ran.
        for service in running:
            if service.profile == previous:
                runtime.stop(service=service, docker=docker, gpus=gpus, state_dir=state)
        running = [s for s in running if s.profile != previous]
    if previous is not None and not any(s.profile == previous and s.state in ALIVE_STATES for s in running):
        resolved, drift = _previous_resolved(journal, environ, resolve_profile)
        try:
            runtime.ensure_image(resolved, docker=docker, on_phase=on_phase)
            started = runtime.start(resolved=resolved, docker=docker, on_phase=on_phase, state_dir=state)
        except ServectlError as err:
            failure = err.lines()[0]
        else:
            restored = previous
            history.record(
                {
                    "event": "up",
                    "profile": previous,
                    "plan_hash": resolved.plan.plan_hash,
                    "container_id": started.service.container_id,
                    "container_name": started.service.container_name,
                    "restored_after": journal.to_profile,
                    "recovered": True,
                }
            )
    elif previous is not None:
        restored = previous  # it still runs (the transaction was killed before stopping it)
    outcome = restore_conflicts(journal.stopped_conflicts, handler=conflicts, state_dir=state)
    clear_journal(state)
    history.record(
        {
            "event": "recovered",
            "profile": journal.to_profile,
            "kind": journal.kind,
            "replaced": previous,
            "restored": restored,
            "t_journal": journal.started_at,
        }
    )
    parts = [f"{what} was killed during '{journal.phase}'"]
    if removed_text:
        parts.append(removed_text)
    if outcome.summary():
        parts.append(outcome.summary())
    if failure is not None:
        raise SwapFailed(
            "; ".join(parts)
            + f"; the previous service {previous} did not come back: {failure}{drift}. Nothing of servectl runs "
            f"now: fix it, then `servectl up {previous}`"
        )
    if restored is not None:
        parts.append(f"{restored} runs (it passed its health gate){drift}")
        return RecoverResult("restored", "; ".join(parts), tuple(removed), restored, outcome)
    parts.append("nothing ran before it, so nothing of servectl runs now")
    return RecoverResult("cleared", "; ".join(parts), tuple(removed), None, outcome)


def _previous_resolved(
    journal: SwapJournal, environ: Mapping[str, str], resolve_profile: Callable[[str], Resolved] | None
) -> tuple[Resolved, str]:
    """The previous service as it ran (the journal's snapshot), else its profile now; and a drift note."""
    assert journal.from_profile is not None
    if journal.previous is not None:
        try:
            resolved = resolved_from_snapshot(journal.previous, environ)
        except ServectlError:
            pass
        else:
            drift = ""
            if journal.previous.plan_hash and resolved.plan.plan_hash != journal.previous.plan_hash:
                drift = (
                    f" (note: it ran plan {journal.previous.plan_hash}; its profile as kept compiles to "
                    f"{resolved.plan.plan_hash} here now)"
                )
            return resolved, drift
    if resolve_profile is None:
        from servectl.plan.resolve import resolve

        resolve_profile = resolve
    return resolve_profile(journal.from_profile), " (from its profile file as it is now: the journal had no copy)"


def resolved_from_snapshot(previous: PreviousService, environ: Mapping[str, str]) -> Resolved:
    """Validate and compile the profile document kept in a journal.

    Raises:
        ProfileError: the document does not validate or breaks a cross-field rule (servectl changed in between).
    """
    from pydantic import ValidationError

    from servectl.errors import ProfileError
    from servectl.plan.resolve import Resolved, plan_for
    from servectl.plan.validate import checked
    from servectl.profile.loader import LoadedProfile, ProfileFile
    from servectl.profile.models import Profile

    try:
        profile = Profile.model_validate(dict(previous.data))
    except ValidationError as e:
        first = e.errors()[0]["msg"]
        raise ProfileError(f"the journal's copy of {previous.profile} no longer validates: {first}") from None
    source = Path(previous.source)
    loaded = LoadedProfile(
        profile=profile,
        file=ProfileFile(previous.profile, source, "journal"),
        chain=(source,),
        locations={},
        data=previous.data,
    )
    # the cross-field rules too, as every other load: recover starts nothing up or swap would refuse
    return Resolved(loaded=checked(loaded), plan=plan_for(loaded, environ=environ))


def _clear_damaged(
    err: StateDamaged,
    *,
    docker: DockerEngine,
    gpus: GpuInventory | None,
    state: Path,
    scope: Mapping[str, str] | None,
    runtime: ServiceRuntime,
) -> RecoverResult:
    running = list(runtime.services(docker=docker, probe=False, plan_hash_of=None, state_dir=state, scope=scope))
    passed = passed_gate_ids(state, [(s.container_id, s.container_name) for s in running])
    removed = []
    for service in running:
        if service.container_id not in passed and service.state in ALIVE_STATES:
            runtime.stop(service=service, docker=docker, gpus=gpus, state_dir=state)
            removed.append(service.container_name)
    moved = set_aside(state / JOURNAL_FILE, clock=time.time)
    alive = [s.profile for s in running if s.container_id in passed and s.state in ALIVE_STATES]
    message = (
        f"{err.message.split(';')[0]}; it cannot say what ran before, so: "
        + (f"removed {', '.join(removed)} (never passed its health gate); " if removed else "")
        + f"moved the journal to {moved}; running now: {', '.join(alive) or 'nothing of servectl'}"
    )
    return RecoverResult("cleared", message, tuple(removed))
