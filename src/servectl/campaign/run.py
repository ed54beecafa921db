"""Running a campaign: rounds of interleaved visits, each repeat committed, each variant decided as it settles.

The loop is the same whether the campaign is new or resumed after ``kill -9``: it replays the rounds from the
first, and a (variant, round, point) already in the database is read, not measured again. Decisions depend
only on the measurements, so the replay settles the same variants after the same rounds and the resumed
campaign ends with the table an uninterrupted one would have. What touches the world - starting a variant on
the bench port, qualifying it, measuring a point, reading free VRAM, putting production back - goes through the
:class:`Lab` the caller hands in (the service layer's swap and the bench on a real host; a simulation in tests),
and :meth:`Lab.restore` runs however the loop ends (a failure, an interrupt, the budget).
"""

from __future__ import annotations

import hashlib
import json
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from servectl.adapters.campaign_db import CampaignDb
from servectl.campaign.decide import Verdict, decide
from servectl.campaign.model import Point
from servectl.campaign.schedule import INCUMBENT, round_order
from servectl.campaign.variants import CampaignCheck, CheckedVariant
from servectl.errors import CampaignInterrupted, StartupFailed, SwapInterrupted, UsageError
from servectl.profile.yaml_locations import display_path
from servectl.service.context import Clocks
from servectl.signals import Abandon, Interrupt, SignalGuard, signal_name


@dataclass(frozen=True)
class Started:
    """A variant's start on the bench port: how long it took, or the log lines of its failure."""

    startup_s: float | None
    failure: tuple[str, ...] = ()
    image_id: str | None = None  # the image the started container runs (``sha256:...``), when the lab knows it


@dataclass(frozen=True)
class Measured:
    """One repeat of a point: the metric's value (None: no good request), whether a request was flagged."""

    value: float | None
    flagged: bool = False
    detail: Mapping[str, Any] = field(default_factory=dict)


class Lab(Protocol):
    """Where a campaign's variants run and are measured."""

    def start(self, variant: CheckedVariant) -> Started: ...

    def qualify(self, variant: CheckedVariant) -> str | None:
        """The id of the first gate the variant fails, or None when it passes them all."""
        ...

    def measure(self, variant: CheckedVariant, point: Point, round_index: int) -> Measured: ...

    def free_vram_mib(self) -> list[int] | None:
        """Free memory of each card now (None: no GPU inventory)."""
        ...

    def restore(self) -> None:
        """Put back what ran before the campaign (production); run under a guard whose signals raise
        :class:`~servectl.signals.Abandon` (stop waiting; a swap of the way back keeps its journal)."""
        ...


@dataclass(frozen=True)
class CampaignRow:
    """A variant's final row."""

    name: str
    profile: str
    plan_hash: str | None
    status: str
    reason: str
    verdict: Verdict | None = field(default=None, compare=False)  # this run's decision (a resumed row: none)


def run_campaign(
    check: CampaignCheck,
    *,
    db: CampaignDb,
    lab: Lab,
    clocks: Clocks,
    handle_signals: bool = True,
) -> list[CampaignRow]:
    """Run (or resume) the campaign ``check`` in ``db``; returns one row per variant, in file order.

    ``clocks``: the context's (:class:`~servectl.service.context.Clocks`): wall time for the journal, monotonic
    time for the budget (counted from this run's start: a resumed campaign gets the budget again).
    ``handle_signals``: SIGINT/SIGTERM/SIGHUP (main thread only) end the campaign - also one that arrives during
    a variant's swap, whose own guard hands it on - with production put back and the measurements kept.

    Raises:
        StartupFailed: the incumbent did not start (its log lines attached); production is put back.
        CampaignInterrupted: a signal stopped it; production is put back (exit 130).
    """
    wall, monotonic = clocks.wall, clocks.monotonic
    c = check.loaded.campaign
    points = [p.name for p in c.workload.points]
    _claim(db, check)
    rows, active = _opening_rows(db, check)
    db.event("resume" if len(db.measurements()) else "run", at=wall(), detail={"variants": len(check.variants)})
    by_name = {v.name: v for v in check.variants}
    variants: dict[str, CheckedVariant] = {INCUMBENT: check.incumbent, **by_name}
    started_at = monotonic()
    gated = {variant for _, kind, variant, _ in db.events() if kind == "gates-passed" and variant}
    measured: dict[str, dict[str, list[float]]] = {name: {p: [] for p in points} for name in variants}

    def settle(row: CampaignRow, detail: Mapping[str, Any] | None = None) -> None:
        rows[row.name] = row
        active.remove(row.name)
        db.put_variant(
            row.name, profile=row.profile, plan_hash=row.plan_hash, status=row.status, reason=row.reason, detail=detail
        )
        db.event("settled", at=wall(), variant=row.name, detail={"status": row.status})

    def restore() -> None:  # once, however the run ends
        if not restored:
            restored.append(True)
            _put_back(lab, db, c.name, wall, handle_signals=handle_signals)

    restored: list[bool] = []
    waived = _waivers(db)
    guard = SignalGuard(handle_signals)
    round_index, at = 0, "the start"
    try:
        with guard:
            while active:
                round_index += 1
                if c.budget.wall_time_s is not None and monotonic() - started_at > c.budget.wall_time_s:
                    for name in list(active):
                        settle(_out_of_budget(by_name[name], round_index - 1, c.budget.wall_time_s))
                    break
                for name in round_order(round_index, active):
                    at = name
                    outcome = _visit(check, db, lab, variants[name], round_index, gated, wall)
                    if outcome is not None:
                        settle(outcome)
                _collect(db, measured, round_index)
                waived = _waivers(db)
                for name in list(active):
                    verdict = decide(
                        c.decision, variant=name, points=points, measured=measured[name], incumbent=measured[INCUMBENT]
                    )
                    if verdict.settled:
                        settle(_decided(by_name[name], verdict, waived.get(name)), _detail(verdict, waived.get(name)))
    except Interrupt as intr:  # the guard has exited: a signal while production is put back stops the waiting
        db.event(
            "interrupted", at=wall(), variant=at, detail={"signal": signal_name(intr.signum), "round": round_index}
        )
        restore()
        raise _interrupted(c.name, db, intr.signum, round_index, at) from None
    finally:
        restore()
    return [rows[v.name] for v in check.variants if v.name in rows]


def _claim(db: CampaignDb, check: CampaignCheck) -> None:
    """Mark ``db`` as this campaign's (a new one), or check that it is (a resumed one).

    Raises:
        UsageError: the folder holds another campaign.
    """
    c = check.loaded.campaign
    settings = hashlib.sha256(json.dumps(c.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()
    meta = db.meta()
    if "campaign" not in meta:
        db.set_meta("campaign", c.name)
        db.set_meta("file", str(check.loaded.path))
        db.set_meta("settings_sha256", settings)
        db.set_meta("variants", json.dumps([v.name for v in check.variants]))
        db.set_meta("points", json.dumps([p.model_dump() for p in c.workload.points]))
        db.set_meta("decision", json.dumps(c.decision.model_dump()))
    elif meta["campaign"] != c.name:
        raise UsageError(f"{db.path}: holds campaign {meta['campaign']!r}, not {c.name!r}; use another folder")
    elif meta.get("settings_sha256") != settings:
        raise UsageError(
            f"{check.loaded.path}: changed since campaign {c.name} began in {db.path.parent}; its measurements "
            "answer the old file: put the file back, or run the new one into another folder"
        )


def _opening_rows(db: CampaignDb, check: CampaignCheck) -> tuple[dict[str, CampaignRow], list[str]]:
    """The rows settled before anything is measured (invalid variants; on resume, what the first run settled)
    and the variants still to measure."""
    rows: dict[str, CampaignRow] = {}
    for v in check.invalid_variants:
        rows[v.name] = CampaignRow(v.name, v.profile_name, None, "rejected-invalid", v.reason())
        db.put_variant(v.name, profile=v.profile_name, plan_hash=None, status="rejected-invalid", reason=v.reason())
    known = {row.name: row for row in db.variants()}
    active = []
    for v in check.valid_variants:
        row = known.get(v.name)
        if row is not None and row.status != "measuring":
            rows[v.name] = CampaignRow(v.name, v.profile_name, v.plan_hash, row.status, row.reason)
            continue
        active.append(v.name)
        db.put_variant(v.name, profile=v.profile_name, plan_hash=v.plan_hash, status="measuring")
    return rows, active


def _visit(
    check: CampaignCheck,
    db: CampaignDb,
    lab: Lab,
    variant: CheckedVariant,
    round_index: int,
    gated: set[str],
    wall: Callable[[], float],
) -> CampaignRow | None:
    """One visit: start ``variant`` (qualified first, once) and measure the points this round still lacks.

    Returns the variant's final row when the visit rejects it (gate, startup, flagged request, VRAM)."""
    c = check.loaded.campaign
    missing = [p for p in c.workload.points if p.name not in db.measured(variant.name, round_index)]
    if not missing:
        return None
    started = lab.start(variant)
    db.record_visit(
        variant.name,
        round_index,
        startup_s=started.startup_s,
        at=wall(),
        detail={"failure": list(started.failure), "image_id": started.image_id},
    )
    incumbent = variant.name == INCUMBENT
    if started.failure:
        if incumbent:
            raise StartupFailed(
                f"campaign {c.name}: the incumbent {variant.profile_name} did not start ({started.failure[0]}); "
                "nothing can be decided against it: fix it and run the campaign again (its measurements are kept)",
                last_log_lines=started.failure[1:],
            )
        return CampaignRow(
            variant.name,
            variant.profile_name,
            variant.plan_hash,
            "rejected-startup",
            "did not start: " + " | ".join(line.strip() for line in started.failure[-3:]),
        )
    if c.gates.suite is not None and variant.name not in gated and not incumbent:
        gated.add(variant.name)
        failed = lab.qualify(variant)
        if failed is None:
            db.event("gates-passed", at=wall(), variant=variant.name)
        else:
            return CampaignRow(
                variant.name,
                variant.profile_name,
                variant.plan_hash,
                f"rejected-gate-{failed}",
                f"gate {failed} failed",
            )
    for point in missing:
        result = lab.measure(variant, point, round_index)
        db.record_measurement(
            variant.name, round_index, point.name, result.value, flagged=result.flagged, detail=result.detail, at=wall()
        )
        if result.flagged and c.constraints.no_flagged_requests and not incumbent:
            return CampaignRow(
                variant.name,
                variant.profile_name,
                variant.plan_hash,
                "rejected-flagged-requests",
                f"a request at {point.name} failed in round {round_index}",
            )
    free = lab.free_vram_mib()
    reserve = c.constraints.vram_reserve_mib
    if incumbent or not free or reserve is None or min(free) >= reserve:
        return None
    under = f"{min(free):,} MiB free on a card after its measurements, under the {reserve:,} MiB reserve"
    waiver = c.constraints.reserve_waiver
    if waiver is None:
        return CampaignRow(variant.name, variant.profile_name, variant.plan_hash, "rejected-vram", under)
    # the waiver's reason is in the campaign file; the row says it was used, and where
    where = check.loaded.location(("constraints", "reserve_waiver"))
    text = f"{under}, waived ({display_path(where[0])}:{where[1]}: {waiver})"
    db.event("vram-waived", at=wall(), variant=variant.name, detail={"free_mib": free, "reason": text})
    return None


def _waivers(db: CampaignDb) -> dict[str, str]:
    """The variants measured under the VRAM reserve with the campaign's waiver, and the line that says so."""
    return {v: str(d.get("reason", "")) for _, kind, v, d in db.events() if kind == "vram-waived" and v}


def _decided(variant: CheckedVariant, verdict: Verdict, waived: str | None) -> CampaignRow:
    reason = f"{verdict.reason}; {waived}" if waived else verdict.reason
    return CampaignRow(variant.name, variant.profile_name, variant.plan_hash, verdict.status, reason, verdict)


def _detail(verdict: Verdict, waived: str | None) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "comparisons": [x.to_dict() for x in verdict.comparisons],
        "repeats": verdict.repeats,
        "more_repeats": verdict.more_repeats,
    }
    if waived:
        detail["vram_waiver"] = waived
    return detail


def _interrupted(name: str, db: CampaignDb, signum: int, round_index: int, at: str) -> CampaignInterrupted:
    before = json.loads(db.meta().get("production", "[]"))
    back = f"{', '.join(before)} is back" if before else "nothing ran before it and none of its variants runs now"
    return CampaignInterrupted(
        f"campaign {name}: interrupted ({signal_name(signum)}) in round {round_index} at {at}; {back}; every "
        f"finished measurement is kept: `servectl campaign resume {db.path.parent}` continues it"
    )


def _put_back(lab: Lab, db: CampaignDb, name: str, wall: Callable[[], float], *, handle_signals: bool) -> None:
    """:meth:`Lab.restore` under a guard as a swap's undo is (:class:`SignalGuard` ``restoring``): a signal
    meanwhile stops the waiting, the way back's swap keeps its journal for ``recover``, and the campaign says so
    (:class:`CampaignInterrupted`) instead of stopping halfway with nothing said.

    Raises:
        CampaignInterrupted: a signal stopped the way back.
    """
    try:
        with SignalGuard(handle_signals, restoring=True):
            lab.restore()
    except (Abandon, SwapInterrupted) as stop:
        signum = stop.signum or signal.SIGINT  # a SwapInterrupted always names its signal
        db.event("restore-stopped", at=wall(), detail={"signal": signal_name(signum)})
        raise _restore_stopped(name, db, signum, stop) from None
    db.event("restored", at=wall())


def _restore_stopped(name: str, db: CampaignDb, signum: int, stop: BaseException) -> CampaignInterrupted:
    """A signal stopped the way back: what is known, how to finish it by hand, and that nothing measured is lost.
    A swap of the way back said itself what runs and its next step (its journal kept for ``recover``)."""
    before = json.loads(db.meta().get("production", "[]"))
    what = ", ".join(before) if before else "the stop of its variants"
    then = f"`servectl swap {before[0]}` puts production back" if before else "`servectl down NAME` stops a variant"
    if isinstance(stop, SwapInterrupted):
        said = f"{stop}, then {then}"
    else:
        said = f"stopped waiting. Next: `servectl status`, `servectl recover` if a swap was left unfinished, {then}"
    return CampaignInterrupted(
        f"campaign {name}: {signal_name(signum)} while putting back {what}: {said}; every finished measurement is "
        f"kept: `servectl campaign resume {db.path.parent}` continues it"
    )


def _collect(db: CampaignDb, measured: dict[str, dict[str, list[float]]], round_index: int) -> None:
    """The values of this round, from the database (a resumed round reads what the first run measured)."""
    for m in db.measurements():
        if m.round == round_index and m.value is not None and m.variant in measured:
            measured[m.variant].setdefault(m.point, []).append(m.value)


def _out_of_budget(variant: CheckedVariant, repeats: int, budget_s: float) -> CampaignRow:
    return CampaignRow(
        variant.name,
        variant.profile_name,
        variant.plan_hash,
        "inconclusive",
        f"the budget of {budget_s:g} s ended after {repeats} repeats",
    )
