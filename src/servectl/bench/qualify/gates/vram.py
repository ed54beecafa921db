"""Free VRAM per card after the run, read through the GPU inventory, against the profile's reserve.

A card passes with at least ``gpus.vram_reserve_mib`` free, or when the profile records a
``gpus.reserve_waiver`` (the measurement is still recorded). Without a profile or a GPU inventory (no NVML,
no cards in the profile) the gate is skipped.
"""

from __future__ import annotations

from servectl.bench.model import CardFreeMemory
from servectl.bench.qualify.gates.common import GateRun
from servectl.bench.qualify.model import CaseResult, GateResult
from servectl.bench.qualify.suite import VramGate

GATE = "vram"


def judge(cards: list[CardFreeMemory], *, reserve_mib: int, waiver: str | None) -> GateResult:
    """One case per card: free MiB against the reserve (or waived)."""
    cases = []
    for card in cards:
        name = f"vram GPU{card.index}"
        if card.memory_free_bytes is None:
            cases.append(CaseResult(name, waiver is not None, f"{name}: free memory unknown (NVML cannot tell)"))
            continue
        free = card.memory_free_bytes // 2**20
        detail = {"memory_free_mib": free, "reserve_mib": reserve_mib}
        if free >= reserve_mib:
            cases.append(CaseResult(name, True, f"{free:,} MiB free (reserve {reserve_mib:,})", detail=detail))
        elif waiver:
            cases.append(
                CaseResult(name, True, f"{free:,} MiB free, reserve {reserve_mib:,} waived: {waiver}", detail=detail)
            )
        else:
            message = f"{name}: {free:,} MiB free after the run, below the reserve of {reserve_mib:,} MiB"
            cases.append(CaseResult(name, False, message, detail=detail))
    note = f"reserve waived: {waiver}" if waiver else ""
    return GateResult.of(GATE, cases, note=note)


def run(run: GateRun, spec: VramGate, cards: list[CardFreeMemory] | None, *, unread: str = "") -> GateResult:
    """Judge the cards read after the other gates (None: no inventory; ``unread``: why the read failed)."""
    del spec  # no settings: the reserve comes from the profile
    facts = run.facts
    if not facts.known:
        return GateResult(GATE, "skipped", note="no profile: the reserve is unknown (qualify a profile NAME)")
    if unread:  # measured nothing, so it proves nothing: the other gates' evidence is still written
        return GateResult(GATE, "fail", note=unread)
    if not cards:
        return GateResult(GATE, "skipped", note="no GPU inventory (no NVML, or no cards in the profile)")
    result = judge(cards, reserve_mib=facts.vram_reserve_mib or 0, waiver=facts.reserve_waiver)
    run.report(GATE, len(cards), len(cards))
    return result
