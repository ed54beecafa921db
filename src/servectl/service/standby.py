"""Warm standby: a swap away from a ``swap.standby: warm`` service releases its cards instead of stopping it,
and a swap back resumes it in seconds instead of a cold start.

The steps, each small and called from one place of the transaction:

* :func:`prepare_release` (before the swap's first change): for a warm service whose container runs the
  profile's plan, take its greedy answer to the gate's prompt, check host RAM for the CPU copy of its weights
  (:func:`servectl.preflight.checks.host.standby_ram_shortfall`) and wait until the engine's own load
  (``GET /v1/loads``) shows no request: SGLang's scheduler asserts it is idle and the server dies otherwise,
  and the gateway's drain does not cover clients of the engine's port. A refusal here changes nothing.
* :func:`release_or_stop` (swap's ``stop-old``): ``POST /release_memory_occupation`` with
  ``{"tags": ["weights", "kv_cache"]}`` once (never again: a second release, or a resume of what was not
  released, kills SGLang; a call without an answer is a crash, the swap's undo starts the service again), then
  measure with the GPU inventory that every card the target uses
  has what the target needs free (its mem fraction of the card plus its ``gpus.vram_reserve_mib``) and
  record the container as on standby. Any other service is stopped as before.
* :func:`resume_or_cold_start` (swap's ``start-target``, when the target's profile is on standby):
  ``POST /resume_memory_occupation``, then the gate: one real completion must give the answer the service
  gave before its release. A resume that fails either way removes the container and starts the same profile
  cold, inside the same transaction; only when that fails too does the swap take its usual way back.
* :func:`resume_released` (a step of the one undo, :func:`servectl.service.transaction.undo.undo`): the
  previous service was released, not stopped, so the way back resumes it (gate included) before falling
  back to stopping it and starting it again from its snapshot.

The journal says which of these was under way (``standby``: ``releasing``, ``released``, ``resuming``) so that
``recover`` settles a killed one with the same undo. Endpoint paths and tags come from SGLang's source
through :mod:`servectl.profile.memory_saver`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from servectl.adapters.gpu import MIB, reads_cards
from servectl.adapters.standby import StandbyEntry, StandbyRecord, Trust
from servectl.errors import ServectlError
from servectl.plan.labels import LABEL_GPUS
from servectl.profile.engine_args import mem_fraction_static
from servectl.profile.memory_saver import load_memory_saver
from servectl.service.container import StartResult, StopResult
from servectl.service.fingerprint import Fingerprint, difference
from servectl.service.health import GatePassage
from servectl.service.journal import SwapJournal
from servectl.service.services import ServiceInfo
from servectl.service.standby_engine import RELEASE_TAGS, EngineClient, EngineGone
from servectl.service.transaction.context import TxContext

if TYPE_CHECKING:
    from servectl.adapters.gpu import GpuInventory, GpuSnapshot
    from servectl.adapters.host import HostProbe
    from servectl.plan.compile import LaunchPlan
    from servectl.plan.resolve import Resolved

#: The share of a card a target without ``--mem-fraction-static`` (typed or in ``engine.args``) is taken to
#: need (SGLang's default for large cards is of this order; the stand-in uses it).
DEFAULT_MEM_FRACTION = 0.88
VERIFY_DEADLINE_S = 10.0
VERIFY_POLL_S = 0.25
RESUME_TIMEOUT_S = 600.0
HOST_RAM_KEEP_BYTES = 8 * 2**30

JournalMark = Callable[[str], None]
"""``mark(standby)``: write the journal with its ``standby`` step (``releasing``, ``released``, ``resuming``)."""


def keeps_warm(tx: TxContext, service: ServiceInfo) -> bool:
    """Whether a swap away releases ``service`` instead of stopping it: its profile says ``warm``, its
    container runs that profile's plan (so it was started with the memory saver), and it has not yet been
    through ``swap.standby_max_cycles`` release/resume cycles."""
    try:
        resolved = tx.resolve(service.profile)
    except ServectlError:
        return False
    plan = resolved.plan
    swap = resolved.loaded.profile.swap
    if swap.standby_max_cycles is not None:
        trust = StandbyRecord(tx.ctx.state_dir).trust(service.container_id)
        if trust is not None and trust.cycles >= swap.standby_max_cycles:
            return False  # its cycles are spent: stopped now, so the way back is a cold start
    return (
        swap.standby == "warm" and plan.plan_hash == service.plan_hash and "--enable-memory-saver" in plan.engine_argv
    )


def _died(tx: TxContext, service: ServiceInfo, err: EngineGone) -> ServectlError:
    """The error for a release/resume without an answer: the container's fate, read from the engine."""
    for _ in range(20):  # SGLang kills its process tree at once; Docker sees the exit within moments
        seen = [s for s in tx.ctx.runtime.services(probe=False) if s.container_id == service.container_id]
        if not seen or not seen[0].running:
            code = seen[0].exit_code if seen else None
            return ServectlError(
                f"{err.message}: {service.profile}'s server died (exit status {code}), as SGLang's does on a "
                "release or resume it cannot take; handled as a crash: the swap's undo starts it again"
            )
        tx.ctx.clocks.sleep(0.1)
    return err


def _cards(plan: LaunchPlan) -> set[int]:
    """The cards a plan's service holds, as its container label says (what ``ServiceInfo.gpus`` reads)."""
    raw = plan.docker.labels.get(LABEL_GPUS, "")
    return {int(part) for part in raw.split(",") if part.strip().isdigit()}


@dataclass(frozen=True)
class ReleasePlan:
    """What a release needs, taken before the swap changes anything: the engine, its answer, the host RAM."""

    resolved: Resolved
    engine: EngineClient
    reference: str
    backup_bytes: int


def prepare_release(tx: TxContext, current: ServiceInfo) -> ReleasePlan | None:
    """Before the swap's first change: for a warm ``current``, its greedy answer, the host RAM for its CPU copy,
    and the wait until the engine itself runs no request (SGLang kills a server released while busy). None:
    ``current`` is stopped, not released.

    Raises:
        ServectlError: released already, host RAM short, or still busy after :data:`IDLE_WAIT_S` (nothing
            changed: the service keeps serving).
    """
    if not keeps_warm(tx, current):
        return None
    if StandbyRecord(tx.ctx.state_dir).entry(current.container_id) is not None:  # a second release kills SGLang
        raise ServectlError(f"{current.profile} is on standby already; servectl releases a server once")
    resolved = tx.resolve(current.profile)
    engine = EngineClient.of(resolved.plan, tx)
    record = StandbyRecord(tx.ctx.state_dir)
    trust = record.trust(current.container_id)
    if trust is None:  # a container not started by up/swap (the undo's restart): its fingerprint is taken now
        trust = _first_trust(tx, resolved, engine.fingerprint(current.profile, tx.ctx.clocks.monotonic))
        record.set_trust(current.container_id, trust)
    reference = "".join(Fingerprint.from_list(trust.fingerprint).samples[0].tokens)
    backup = _host_ram_for_backup(tx, resolved, current.profile, paid=trust.pinned)
    engine.wait_idle(current.profile, tx)
    return ReleasePlan(resolved, engine, reference, backup)


def release_or_stop(
    tx: TxContext,
    current: ServiceInfo,
    target: Resolved,
    *,
    mark: JournalMark,
    prepared: ReleasePlan | None,
) -> StopResult:
    """swap's ``stop-old``: release a warm ``current`` to standby (see the module docstring and
    :func:`prepare_release`, which ``prepared`` came from), else stop it.

    Raises:
        ServectlError: a request came in since the idle check, the release was refused or got no answer (the
            server died: handled as a crash by the undo), or the cards did not come free (the undo resumes it).
    """
    if prepared is None:
        stopped = _stop_beside_standbys(tx, current)
        StandbyRecord(tx.ctx.state_dir).forget(current.container_id)  # its trust (a spent standby's) goes with it
        return stopped
    clocks = tx.ctx.clocks
    began = clocks.monotonic()
    record = StandbyRecord(tx.ctx.state_dir)
    engine, reference, backup = prepared.engine, prepared.reference, prepared.backup_bytes
    busy = engine.running(current.profile)  # once more, the moment before: the window is this call's length
    if busy:
        raise ServectlError(f"{current.profile} took {busy} request(s) on its own port just before the release")
    mark("releasing")
    try:
        engine.call("release", current.profile, timeout_s=120.0)
    except EngineGone as gone:
        raise _died(tx, current, gone) from gone
    # Recorded the moment SGLang answered: its tags are released now, and only a released server is resumed.
    record.mark(
        StandbyEntry(
            current.profile, current.container_id, clocks.wall(), clocks.monotonic() - began, backup, reference
        )
    )
    mark("released")
    kept = _verify_released(tx, current, target)
    release_s = clocks.monotonic() - began
    record.mark(StandbyEntry(current.profile, current.container_id, clocks.wall(), release_s, backup, reference))
    record.note_release(current.profile, release_s, clocks.wall())
    _paid(record, current.container_id)
    tx.record(
        {
            "event": "standby",
            "profile": current.profile,
            "container_id": current.container_id,
            "release_s": release_s,
            "kept_mib": {str(card): held // MIB for card, held in sorted(kept.items())},
        }
    )
    return StopResult(current.profile, current.container_name, release_s, forced=False, released=True)


def _stop_beside_standbys(tx: TxContext, service: ServiceInfo) -> StopResult:
    """Stop ``service``; the wait for its cards to come free ignores the warm standbys that stay on them."""
    if not service.gpus or not reads_cards(tx.gpus):
        return tx.stop(service)
    waiting = {
        s.container_id
        for s in tx.ctx.runtime.services(probe=False)
        if s.state == "standby" and set(s.gpus) & set(service.gpus)
    }
    if not waiting:
        return tx.stop(service)
    host = tx.ctx.probe
    theirs = {
        p.pid
        for d in tx.gpus.snapshot().devices
        if d.index in service.gpus
        for p in d.processes or ()
        if host.container_id_of(p.pid) in waiting
    }
    return replace(tx, gpus=_Ignoring(tx.gpus, frozenset(theirs))).stop(service)


@dataclass(frozen=True)
class _Ignoring:
    """The GPU inventory without the processes of the warm standbys (their memory still counts as used)."""

    inner: GpuInventory
    pids: frozenset[int]

    def snapshot(self) -> GpuSnapshot:
        snap = self.inner.snapshot()
        devices = tuple(
            d if d.processes is None else replace(d, processes=tuple(p for p in d.processes if p.pid not in self.pids))
            for d in snap.devices
        )
        return replace(snap, devices=devices)


def backup_bytes(resolved: Resolved, host: HostProbe) -> int:
    """Host RAM the CPU copy of a plan's weights takes: their size on disk (0 without a CPU copy)."""
    if "--enable-weights-cpu-backup" not in resolved.plan.engine_argv:
        return 0
    return host.model_dir(resolved.plan.docker.mounts[0].source).weights_bytes


def _first_trust(tx: TxContext, resolved: Resolved, first: Fingerprint) -> Trust:
    """A container's trust record at its first start: its fingerprint and its CPU copy's host RAM."""
    retained = resolved.loaded.profile.swap.standby_retain_backup
    return Trust(first.to_list(), 0, backup_bytes(resolved, tx.ctx.probe), retained=retained)


def _paid(record: StandbyRecord, container_id: str) -> None:
    """A retained container was released: its pinned buffer is allocated now, for as long as it runs."""
    trust = record.trust(container_id)
    if trust is not None and trust.retained and not trust.pinned:
        record.set_trust(container_id, replace(trust, pinned=True))


def _host_ram_for_backup(tx: TxContext, resolved: Resolved, profile: str, *, paid: bool = False) -> int:
    """Host RAM the CPU copy of the weights takes (their size on disk), after checking it fits (unless ``paid``:
    a retained buffer is allocated already and takes no more)."""
    host = tx.ctx.probe
    weights = backup_bytes(resolved, host)
    if not weights or paid:
        return weights
    from servectl.preflight.checks.host import standby_ram_shortfall

    short = standby_ram_shortfall(weights, host.memory(), HOST_RAM_KEEP_BYTES)
    if short is not None:
        raise ServectlError(f"{profile} cannot go on standby: {short}; free host RAM or set swap.standby: none")
    return weights


def _verify_released(tx: TxContext, current: ServiceInfo, target: Resolved) -> dict[int, int]:
    """Measure (NVML, through the GPU inventory) that each card the target shares with ``current`` has what
    the target needs free: its mem fraction of the card plus its reserve. Returns what the released engine's
    own processes still hold on each of its cards (measured: CUDA context, graphs, buffers outside the
    memory saver's regions - 712 MiB a card on an H100 in benchmarks/results/gpu-h100-issue38)."""
    cards = sorted(set(current.gpus) & _cards(target.plan))
    if not current.gpus or not reads_cards(tx.gpus):  # a service on no card keeps nothing, opens no driver
        return {}
    if not cards:
        return _kept_by(tx, current, tx.gpus.snapshot())
    p = target.loaded.profile
    fraction = mem_fraction_static(p, catalogs=target.loaded.catalogs) or DEFAULT_MEM_FRACTION
    until = tx.ctx.clocks.monotonic() + VERIFY_DEADLINE_S
    while True:
        snapshot = tx.gpus.snapshot()
        kept = _kept_by(tx, current, snapshot)
        short = release_shortfall(
            snapshot,
            cards,
            fraction=fraction,
            reserve_mib=p.gpus.vram_reserve_mib,
            kept=kept,
            holder=current.profile,
            target=target.name,
        )
        if not short:
            return kept
        if tx.ctx.clocks.monotonic() >= until:
            raise ServectlError(
                f"{current.profile} answered the release but did not free its memory: {'; '.join(short)}"
            )
        tx.ctx.clocks.sleep(VERIFY_POLL_S)


def release_shortfall(
    snapshot: GpuSnapshot,
    cards: Sequence[int],
    *,
    fraction: float,
    reserve_mib: int,
    kept: dict[int, int],
    holder: str,
    target: str,
) -> list[str]:
    """What each of ``cards`` lacks for ``target`` in ``snapshot``: one phrase per card that has less free than
    ``fraction`` of the card plus ``reserve_mib`` (or cannot be read); empty when every card has it. ``kept``:
    bytes per card the released ``holder``'s own processes still hold, named in the phrase."""
    short = []
    for index in cards:
        d = snapshot.device(index)
        if d is None or d.memory_free_bytes is None or d.memory_total_bytes is None:
            short.append(f"card {index} cannot be read")
            continue
        need = int(d.memory_total_bytes * fraction) + reserve_mib * MIB
        if d.memory_free_bytes < need:
            keeps = f"; {holder} keeps {kept[index] // MIB:,} MiB there" if index in kept else ""
            short.append(
                f"card {index} has {d.memory_free_bytes // MIB:,} MiB free, {target} needs "
                f"{need // MIB:,} MiB (mem fraction {fraction:g} + reserve {reserve_mib:,} MiB){keeps}"
            )
    return short


def _kept_by(tx: TxContext, service: ServiceInfo, snapshot: GpuSnapshot) -> dict[int, int]:
    """Bytes per card that ``service``'s container's processes hold (NVML's per-process figures)."""
    host = tx.ctx.probe
    kept: dict[int, int] = {}
    for d in snapshot.devices:
        if d.index not in service.gpus:
            continue
        for proc in d.processes or ():
            if proc.used_memory_bytes is not None and host.container_id_of(proc.pid) == service.container_id:
                kept[d.index] = kept.get(d.index, 0) + proc.used_memory_bytes
    return kept


def resume_from_standby(tx: TxContext, service: ServiceInfo, resolved: Resolved) -> StartResult:
    """``POST /resume_memory_occupation``, then the gate: the same answer as before the release.

    Raises:
        ServectlError: the resume was refused, or the answer after it is not the one before.
    """
    record = StandbyRecord(tx.ctx.state_dir)
    entry = record.entry(service.container_id)
    if entry is None:  # a resume of what SGLang did not release kills it (offload_tags.remove: KeyError)
        source = load_memory_saver()["tag_state"]["resume_removes"]
        raise ServectlError(
            f"{service.profile}: no record that servectl released it, and a resume of what SGLang did not release "
            f"kills the server ({source}); not resumed"
        )
    began = tx.ctx.clocks.monotonic()
    engine = EngineClient.of(resolved.plan, tx)
    try:
        engine.call("resume", service.profile, timeout_s=RESUME_TIMEOUT_S)
    except EngineGone as gone:
        record.forget(service.container_id)
        raise _died(tx, service, gone) from gone
    trust = record.trust(service.container_id)
    now = engine.fingerprint(service.profile, tx.ctx.clocks.monotonic)
    if trust is not None:
        departs = difference(Fingerprint.from_list(trust.fingerprint), now)
        if departs is not None:
            raise ServectlError(
                f"{service.profile} resumed but its fingerprint departs from the one of its first release after "
                f"{trust.cycles} cycle(s): {departs}; its weights did not come back intact"
            )
    elif "".join(now.samples[0].tokens) != entry.reference_answer:  # a record from before fingerprints
        raise ServectlError(
            f"{service.profile} resumed but answers {''.join(now.samples[0].tokens)[:40]!r} where it answered "
            f"{entry.reference_answer[:40]!r} before its release: its weights did not come back"
        )
    resume_s = tx.ctx.clocks.monotonic() - began
    record.clear(service.container_id)
    if trust is not None:
        record.set_trust(service.container_id, replace(trust, cycles=trust.cycles + 1))
    record.note_resume(service.profile, resume_s, tx.ctx.clocks.wall())
    back = replace(
        service,
        state="ready",
        standby_host_ram_bytes=None,
        standby_resume_s=None,
        standby_release_s=None,
        standby_cycles=None,
    )
    return StartResult(
        service=back,
        gate=GatePassage(startup_s=resume_s, phases=[("resume", 0.0)]),
        url=resolved.plan.url,
        resumed=True,
    )


def resume_or_cold_start(tx: TxContext, service: ServiceInfo, resolved: Resolved, *, mark: JournalMark) -> StartResult:
    """swap's ``start-target`` for a profile on standby: resume it; if that fails, remove the container and
    start the profile cold (the transaction's failure path takes over only when that fails too)."""
    mark("resuming")
    with tx.phase("resume-target", resolved.name) as phase:
        try:
            return resume_from_standby(tx, service, resolved)
        except ServectlError as err:
            phase.failed = True
            why = err.message
    tx.record({"event": "standby-resume-failed", "profile": resolved.name, "reason": why})
    with tx.phase("cold-start-target", f"resume failed: {why}"):
        tx.stop(service)
        StandbyRecord(tx.ctx.state_dir).forget(service.container_id)
        mark("")
        return first_start(tx, tx.ctx.runtime.start(resolved=resolved, on_phase=tx.progress("start-target")), resolved)


def resume_released(tx: TxContext, journal: SwapJournal, previous: str | None) -> bool:
    """The undo's step for a warm standby: the previous service was released (or being released), not
    stopped; resume it through the gate. False: nothing to resume, or the resume failed (then the undo stops
    it and starts it again from its snapshot, as for any stopped service)."""
    # "releasing": cut short before SGLang answered; whether its memory went is unknown, and a resume of tags
    # it never released fails in its scheduler, so that one is stopped and started again instead.
    if previous is None or journal.standby != "released":
        return False
    mine = [s for s in tx.ctx.runtime.services(probe=False) if s.profile == previous and s.running]
    if len(mine) != 1:
        return False
    with tx.phase("resume-previous", previous) as phase:
        try:
            resume_from_standby(tx, mine[0], tx.resolve(previous))
        except ServectlError:
            phase.failed = True
            return False
    return True


def first_start(tx: TxContext, started: StartResult, resolved: Resolved) -> StartResult:
    """Right after a warm service's container first passed its gate (before it is admitted): take its
    fingerprint, the one every resume of this container is held to, and record the host RAM of its CPU copy
    (``standby/trust-<id>.json``); with ``swap.standby_prime``, then release and resume it once, so the retained
    pinned buffer is paid for now and not by the first swap away. Any other start is returned as it is.

    Raises:
        ServectlError: the fingerprint could not be taken, the release or resume failed or died, or the
            fingerprint departs after it; the new container is removed first (the caller's failure path then runs
            as for a start that failed its gate).
    """
    swap = resolved.loaded.profile.swap
    if started.resumed or swap.standby != "warm" or "--enable-memory-saver" not in resolved.plan.engine_argv:
        return started
    service = started.service
    record = StandbyRecord(tx.ctx.state_dir)
    with tx.phase("fingerprint-standby", resolved.name) as phase:
        try:
            engine = EngineClient.of(resolved.plan, tx)
            first = engine.fingerprint(resolved.name, tx.ctx.clocks.monotonic)
            record.set_trust(service.container_id, _first_trust(tx, resolved, first))
        except ServectlError:
            phase.failed = True
            record.forget(service.container_id)
            tx.stop(service)
            raise
    if swap.standby_retain_backup and swap.standby_prime:
        _prime(tx, service, resolved, engine, first)
    return started


def _prime(tx: TxContext, service: ServiceInfo, resolved: Resolved, engine: EngineClient, first: Fingerprint) -> None:
    """``swap.standby_prime``: release and resume a new warm container once before it is admitted (see
    :func:`first_start`)."""
    record = StandbyRecord(tx.ctx.state_dir)
    clocks = tx.ctx.clocks
    began = clocks.monotonic()
    with tx.phase("prime-standby", resolved.name) as phase:
        try:
            engine.wait_idle(resolved.name, tx)
            try:
                engine.call("release", resolved.name, timeout_s=RESUME_TIMEOUT_S)
            except EngineGone as gone:
                raise _died(tx, service, gone) from gone
            released = clocks.monotonic()
            reference = "".join(first.samples[0].tokens)
            entry = StandbyEntry(resolved.name, service.container_id, clocks.wall(), released - began, 0, reference)
            record.mark(entry)  # released: what allows the resume (and recover's) to send one
            _paid(record, service.container_id)
            try:
                engine.call("resume", resolved.name, timeout_s=RESUME_TIMEOUT_S)
            except EngineGone as gone:
                raise _died(tx, service, gone) from gone
            record.clear(service.container_id)
            departs = difference(first, engine.fingerprint(resolved.name, clocks.monotonic))
            if departs is not None:
                raise ServectlError(f"{resolved.name} primed but its fingerprint departs: {departs}")
        except ServectlError:
            phase.failed = True
            record.forget(service.container_id)
            tx.stop(service)
            raise
    record.note_release(resolved.name, released - began, clocks.wall())
    record.note_resume(resolved.name, clocks.monotonic() - released, clocks.wall())
    tx.record({"event": "standby-primed", "profile": resolved.name, "release_s": round(released - began, 3)})


def expected_swap_s(
    tx: TxContext, current: ServiceInfo | None, target: str, waiting: ServiceInfo | None
) -> float | None:
    """What the swap's hold should expect (the gateway's ``Retry-After``): the last measured release of a warm
    ``current`` plus the last measured resume of a ``target`` on standby (``waiting``), or else its last cold
    start. None: nothing measured, the hold reads the last start itself."""
    from servectl.adapters.gateway_admin import last_startup_s

    record = StandbyRecord(tx.ctx.state_dir)
    release = record.last_release_s(current.profile) if current is not None and keeps_warm(tx, current) else None
    back = record.last_resume_s(target) if waiting is not None else None
    if back is None:
        back = last_startup_s(tx.ctx.history, target)
    if release is None and back is None:
        return None
    return (release or 0.0) + (back or 0.0)


def way_back_words(state_dir: Path, target: str, running: Sequence[ServiceInfo]) -> str | None:
    """For ``rollback-check``: how ``target`` comes back when it is on warm standby, with the last measured
    resume (None: it is not on standby)."""
    waiting = next((s for s in running if s.profile == target and s.state == "standby"), None)
    if waiting is None:
        return None
    record = StandbyRecord(state_dir)
    resume = record.last_resume_s(target)
    cycles = record.trust(waiting.container_id)
    shown = "not measured yet" if resume is None else f"last {resume:.1f} s"
    done = "" if cycles is None else f", {cycles.cycles} cycle(s) behind it"
    return f"{target} is on warm standby: the way back is a resume ({shown}{done}), no container start"


def drop_resuming_target(tx: TxContext, journal: SwapJournal) -> list[ServiceInfo]:
    """The undo's step for a resume cut short: the target's standby container, its memory state unknown, is
    removed like any target that did not pass its gate."""
    if journal.standby != "resuming":
        return []
    mine = [s for s in tx.ctx.runtime.services(probe=False) if s.profile == journal.to_profile and s.state == "standby"]
    for service in mine:
        tx.stop(service)
        StandbyRecord(tx.ctx.state_dir).clear(service.container_id)
    return mine


__all__ = [
    "RELEASE_TAGS",
    "ReleasePlan",
    "backup_bytes",
    "first_start",
    "keeps_warm",
    "prepare_release",
    "release_or_stop",
    "resume_from_standby",
    "resume_or_cold_start",
    "resume_released",
]
