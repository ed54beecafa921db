"""Warm standby: a swap away from a ``swap.standby: warm`` service releases its cards instead of stopping it,
and a swap back resumes it in seconds instead of a cold start.

The steps, each small and called from one place of the transaction:

* :func:`release_or_stop` (swap's ``stop-old``): for a warm service whose container runs the profile's plan,
  take its greedy answer to the gate's prompt, check host RAM for the CPU copy of its weights
  (:func:`servectl.preflight.checks.host.standby_ram_shortfall`), ``POST /release_memory_occupation`` with
  ``{"tags": ["weights", "kv_cache"]}``, then measure with the GPU inventory that every card the target uses
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

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from servectl.adapters.gpu import MIB, reads_cards
from servectl.adapters.standby import StandbyEntry, StandbyRecord
from servectl.errors import ServectlError
from servectl.plan.labels import LABEL_GPUS
from servectl.profile.memory_saver import load_memory_saver
from servectl.service.container import StartResult, StopResult
from servectl.service.health import GateResult
from servectl.service.journal import SwapJournal
from servectl.service.services import ServiceInfo
from servectl.service.transaction.context import TxContext

if TYPE_CHECKING:
    from servectl.adapters.gpu import GpuInventory, GpuSnapshot
    from servectl.adapters.host import HostProbe
    from servectl.plan.compile import LaunchPlan
    from servectl.plan.resolve import Resolved

#: What a swap away releases (SGLang's tags; CUDA graphs stay: small, and capturing them again costs).
RELEASE_TAGS = ("weights", "kv_cache")
#: The share of a card a target without ``engine.mem_fraction_static`` is taken to need (SGLang's default
#: for large cards is of this order; the stand-in uses it).
DEFAULT_MEM_FRACTION = 0.88
VERIFY_DEADLINE_S = 10.0
VERIFY_POLL_S = 0.25
RESUME_TIMEOUT_S = 600.0
ANSWER_DEADLINE_S = 60.0
#: The gate's prompt, answered greedily before the release and after the resume: the two must agree.
PROBE = {"messages": [{"role": "user", "content": "Reply with one word."}], "max_tokens": 4, "temperature": 0}
HOST_RAM_KEEP_BYTES = 8 * 2**30

JournalMark = Callable[[str], None]
"""``mark(standby)``: write the journal with its ``standby`` step (``releasing``, ``released``, ``resuming``)."""


def keeps_warm(ctx: TxContext, service: ServiceInfo) -> bool:
    """Whether a swap away releases ``service`` instead of stopping it: its profile says ``warm`` and its
    container runs that profile's plan (so it was started with the memory saver)."""
    try:
        resolved = ctx.resolve(service.profile)
    except ServectlError:
        return False
    plan = resolved.plan
    return (
        resolved.loaded.profile.swap.standby == "warm"
        and plan.plan_hash == service.plan_hash
        and "--enable-memory-saver" in plan.engine_argv
    )


@dataclass(frozen=True)
class _Engine:
    """One engine's HTTP side: its URL and key."""

    url: str
    headers: Mapping[str, str]

    @classmethod
    def of(cls, plan: LaunchPlan, environ: Mapping[str, str]) -> _Engine:
        from servectl.service.host_files import read_api_key

        key = read_api_key(plan, environ)
        return cls(plan.url, {"Authorization": f"Bearer {key}"} if key else {})

    def call(self, which: str, profile: str, timeout_s: float) -> None:
        """``POST`` the memory saver's ``release``/``resume`` route; a refusal is one line naming it."""
        import httpx

        path = str(load_memory_saver()["endpoints"][which]["path"])
        try:
            response = httpx.post(
                self.url + path, json={"tags": list(RELEASE_TAGS)}, headers=dict(self.headers), timeout=timeout_s
            )
        except httpx.HTTPError as err:
            raise ServectlError(f"{profile}: POST {path} failed: {err}") from err
        if response.status_code != 200:
            raise ServectlError(f"{profile}: POST {path} answered {response.status_code}: {_message(response)}")

    def answer(self, profile: str, deadline_s: float, clock: Callable[[], float]) -> str:
        """The engine's greedy answer to :data:`PROBE` (503 while it warms up is waited out)."""
        import httpx

        until = clock() + deadline_s
        while True:
            try:
                response = httpx.post(
                    f"{self.url}/v1/chat/completions", json=PROBE, headers=dict(self.headers), timeout=60.0
                )
                if response.status_code == 200:
                    text = response.json()["choices"][0]["message"]["content"]
                    return str(text or "")
                problem = f"answered {response.status_code}: {_message(response)}"
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as err:
                problem = f"failed: {err}"
            if clock() >= until or "answered 4" in problem:
                raise ServectlError(f"{profile}: the gate's chat completion {problem}")
            time.sleep(0.2)


def _message(response: Any) -> str:
    try:
        body = response.json()
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:200]
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])[:200]
    except ValueError:
        pass
    return str(response.text)[:200]


def _cards(plan: LaunchPlan) -> set[int]:
    """The cards a plan's service holds, as its container label says (what ``ServiceInfo.gpus`` reads)."""
    raw = plan.docker.labels.get(LABEL_GPUS, "")
    return {int(part) for part in raw.split(",") if part.strip().isdigit()}


def release_or_stop(
    ctx: TxContext,
    current: ServiceInfo,
    target: Resolved,
    *,
    mark: JournalMark,
    host: HostProbe | None = None,
) -> StopResult:
    """swap's ``stop-old``: release a warm ``current`` to standby (see the module docstring), else stop it.

    Raises:
        ServectlError: the release was refused, host RAM cannot take the CPU copy, or the cards did not come
            free; the service still runs (the undo resumes it when its memory went).
    """
    if not keeps_warm(ctx, current):
        return _stop_beside_standbys(ctx, current, host)
    began = ctx.clock()
    resolved = ctx.resolve(current.profile)
    engine = _Engine.of(resolved.plan, ctx.environ)
    reference = engine.answer(current.profile, ANSWER_DEADLINE_S, ctx.clock)
    backup = _host_ram_for_backup(ctx, resolved, current.profile, host)
    mark("releasing")
    engine.call("release", current.profile, timeout_s=120.0)
    mark("released")
    _verify_released(ctx, current, target)
    release_s = ctx.clock() - began
    StandbyRecord(ctx.state_dir).mark(
        StandbyEntry(current.profile, current.container_id, ctx.wall_clock(), release_s, backup, reference)
    )
    ctx.record({"event": "standby", "profile": current.profile, "container_id": current.container_id})
    return StopResult(current.profile, current.container_name, release_s, forced=False)


def _stop_beside_standbys(ctx: TxContext, service: ServiceInfo, host: HostProbe | None) -> StopResult:
    """Stop ``service``; the wait for its cards to come free ignores the warm standbys that stay on them."""
    if not reads_cards(ctx.gpus) or not service.gpus:
        return ctx.stop(service)
    waiting = {
        s.container_id for s in ctx.services(probe=False) if s.state == "standby" and set(s.gpus) & set(service.gpus)
    }
    if not waiting:
        return ctx.stop(service)
    host = host or ctx.ctx.probe
    theirs = {
        p.pid
        for d in ctx.gpus.snapshot().devices
        if d.index in service.gpus
        for p in d.processes or ()
        if host.container_id_of(p.pid) in waiting
    }
    return replace(ctx, gpus=_Ignoring(ctx.gpus, frozenset(theirs))).stop(service)


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


def _host_ram_for_backup(ctx: TxContext, resolved: Resolved, profile: str, host: HostProbe | None) -> int:
    """Host RAM the CPU copy of the weights takes (their size on disk), after checking it fits."""
    if "--enable-weights-cpu-backup" not in resolved.plan.engine_argv:
        return 0
    from servectl.preflight.checks.host import standby_ram_shortfall

    host = host or ctx.ctx.probe
    weights = host.model_dir(resolved.plan.docker.mounts[0].source).weights_bytes
    short = standby_ram_shortfall(weights, host.memory(), HOST_RAM_KEEP_BYTES)
    if short is not None:
        raise ServectlError(f"{profile} cannot go on standby: {short}; free host RAM or set swap.standby: none")
    return weights


def _verify_released(ctx: TxContext, current: ServiceInfo, target: Resolved) -> None:
    """Measure (NVML, through the GPU inventory) that each card the target shares with ``current`` has what
    the target needs free: its mem fraction of the card plus its reserve."""
    cards = sorted(set(current.gpus) & _cards(target.plan))
    if not reads_cards(ctx.gpus) or not cards:
        return
    p = target.loaded.profile
    fraction = p.engine.mem_fraction_static or DEFAULT_MEM_FRACTION
    until = ctx.clock() + VERIFY_DEADLINE_S
    while True:
        snapshot = ctx.gpus.snapshot()
        short = []
        for index in cards:
            d = snapshot.device(index)
            if d is None or d.memory_free_bytes is None or d.memory_total_bytes is None:
                short.append(f"card {index} cannot be read")
                continue
            need = int(d.memory_total_bytes * fraction) + p.gpus.vram_reserve_mib * MIB
            if d.memory_free_bytes < need:
                short.append(
                    f"card {index} has {d.memory_free_bytes // MIB:,} MiB free, {target.name} needs "
                    f"{need // MIB:,} MiB (mem fraction {fraction:g} + reserve {p.gpus.vram_reserve_mib:,} MiB)"
                )
        if not short:
            return
        if ctx.clock() >= until:
            raise ServectlError(
                f"{current.profile} answered the release but did not free its memory: {'; '.join(short)}"
            )
        ctx.sleep(VERIFY_POLL_S)


def resume_from_standby(ctx: TxContext, service: ServiceInfo, resolved: Resolved) -> StartResult:
    """``POST /resume_memory_occupation``, then the gate: the same answer as before the release.

    Raises:
        ServectlError: the resume was refused, or the answer after it is not the one before.
    """
    record = StandbyRecord(ctx.state_dir)
    entry = record.entry(service.container_id)
    began = ctx.clock()
    engine = _Engine.of(resolved.plan, ctx.environ)
    engine.call("resume", service.profile, timeout_s=RESUME_TIMEOUT_S)
    answer = engine.answer(service.profile, ANSWER_DEADLINE_S, ctx.clock)
    if entry is not None and answer != entry.reference_answer:
        raise ServectlError(
            f"{service.profile} resumed but answers {answer[:40]!r} where it answered "
            f"{entry.reference_answer[:40]!r} before its release: its weights did not come back"
        )
    resume_s = ctx.clock() - began
    record.clear(service.container_id)
    record.note_resume(service.profile, resume_s, ctx.wall_clock())
    back = replace(service, state="ready", standby_host_ram_bytes=None, standby_resume_s=None)
    return StartResult(
        service=back, gate=GateResult(startup_s=resume_s, phases=[("resume", 0.0)]), url=resolved.plan.url
    )


def resume_or_cold_start(ctx: TxContext, service: ServiceInfo, resolved: Resolved, *, mark: JournalMark) -> StartResult:
    """swap's ``start-target`` for a profile on standby: resume it; if that fails, remove the container and
    start the profile cold (the transaction's failure path takes over only when that fails too)."""
    mark("resuming")
    with ctx.phase("resume-target", resolved.name) as phase:
        try:
            return resume_from_standby(ctx, service, resolved)
        except ServectlError as err:
            phase.failed = True
            why = err.message
    ctx.record({"event": "standby-resume-failed", "profile": resolved.name, "reason": why})
    with ctx.phase("cold-start-target", f"resume failed: {why}"):
        ctx.stop(service)
        StandbyRecord(ctx.state_dir).clear(service.container_id)
        mark("")
        return ctx.runtime.start(resolved=resolved, on_phase=ctx.progress("start-target"))


def resume_released(ctx: TxContext, journal: SwapJournal, previous: str | None) -> bool:
    """The undo's step for a warm standby: the previous service was released (or being released), not
    stopped; resume it through the gate. False: nothing to resume, or the resume failed (then the undo stops
    it and starts it again from its snapshot, as for any stopped service)."""
    # "releasing": cut short before SGLang answered; whether its memory went is unknown, and a resume of tags
    # it never released fails in its scheduler, so that one is stopped and started again instead.
    if previous is None or journal.standby != "released":
        return False
    mine = [s for s in ctx.services(probe=False) if s.profile == previous and s.running]
    if len(mine) != 1:
        return False
    with ctx.phase("resume-previous", previous) as phase:
        try:
            resume_from_standby(ctx, mine[0], ctx.resolve(previous))
        except ServectlError:
            phase.failed = True
            return False
    return True


def drop_resuming_target(ctx: TxContext, journal: SwapJournal) -> list[ServiceInfo]:
    """The undo's step for a resume cut short: the target's standby container, its memory state unknown, is
    removed like any target that did not pass its gate."""
    if journal.standby != "resuming":
        return []
    mine = [s for s in ctx.services(probe=False) if s.profile == journal.to_profile and s.state == "standby"]
    for service in mine:
        ctx.stop(service)
        StandbyRecord(ctx.state_dir).clear(service.container_id)
    return mine


__all__ = [
    "RELEASE_TAGS",
    "keeps_warm",
    "release_or_stop",
    "resume_from_standby",
    "resume_or_cold_start",
    "resume_released",
]
