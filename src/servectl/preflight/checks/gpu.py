"""Checks of the cards: present, architecture, count, MIG, exclusive use and the VRAM reserve."""

from __future__ import annotations

from typing import Any

from servectl.adapters.gpu import MIB, GpuDevice, compute_capability_of_arch
from servectl.preflight.checks.base import gpu_unreachable, make_result, no_gpus, requested_devices
from servectl.preflight.facts import AttributedProcess, Facts, classify_process, to_mib
from servectl.preflight.model import CheckResult, PreflightRequest

UNEXPLAINED_USED_BYTES = 1024 * MIB
"""Used memory on a card beyond what its listed processes hold, above which preflight warns."""


def check_gpu_present(request: PreflightRequest, facts: Facts) -> CheckResult:
    """NVML answers and every card the profile names exists and is healthy."""
    if not request.gpus_requested:
        return no_gpus("gpu.present")
    if facts.gpu is None and facts.gpu_not_read:  # nothing asked of a driver: unknown, not failed
        return make_result(
            "gpu.present", "unknown", f"the cards were not read: {facts.gpu_error}", reason=facts.gpu_error
        )
    if facts.gpu is None:
        return make_result(
            "gpu.present",
            "fail",
            facts.gpu_error or "NVML unavailable",
            "install or load the NVIDIA driver, then check with nvidia-smi",
            nvml_error=facts.gpu_error,
        )
    snapshot = facts.gpu
    seen = [d.index for d in snapshot.devices]
    if not request.gpu_indices:
        return make_result(
            "gpu.present",
            "fail",
            "the profile requests GPUs but names no device",
            "list the card indices in the profile (e.g. devices: [0, 1])",
            host_devices=seen,
        )
    missing = [i for i, d in requested_devices(request, facts) if d is None]
    lost = [(i, d.problem) for i, d in requested_devices(request, facts) if d is not None and d.lost]
    broken = [
        (i, d.problem) for i, d in requested_devices(request, facts) if d is not None and not d.lost and d.problem
    ]
    facts_out = {
        "driver_version": snapshot.driver_version,
        "cuda_driver_version": ".".join(map(str, snapshot.cuda_driver_version))
        if snapshot.cuda_driver_version
        else None,
        "host_devices": [{"index": d.index, "name": d.name, "uuid": d.uuid} for d in snapshot.devices],
        "requested": list(request.gpu_indices),
    }
    if missing:
        return make_result(
            "gpu.present",
            "fail",
            f"card(s) {missing} not found; this host has {len(seen)} card(s) {seen}",
            "fix the device list in the profile, or check nvidia-smi for cards that vanished",
            missing=missing,
            **facts_out,
        )
    if lost:
        text = "; ".join(f"card {i}: {p}" for i, p in lost)
        return make_result(
            "gpu.present",
            "fail",
            text,
            "reset the card (nvidia-smi -r -i N) or reboot the host",
            lost=[i for i, _ in lost],
            **facts_out,
        )
    if broken:
        text = "; ".join(f"card {i}: {p}" for i, p in broken)
        return make_result("gpu.present", "unknown", text, "check the card with nvidia-smi -q -i N", **facts_out)
    names = ", ".join(f"{i}={d.name}" for i, d in requested_devices(request, facts) if d is not None)
    return make_result("gpu.present", "pass", f"driver {snapshot.driver_version}; cards {names}", **facts_out)


def check_gpu_arch(request: PreflightRequest, facts: Facts) -> CheckResult:
    """Every card has the architecture the profile was built for."""
    if not request.gpus_requested:
        return no_gpus("gpu.arch")
    if facts.gpu is None:
        return gpu_unreachable("gpu.arch", facts)
    seen = {i: (d.arch if d else None) for i, d in requested_devices(request, facts)}
    if request.arch is None:
        return make_result("gpu.arch", "pass", "no architecture pinned", cards=seen)
    try:
        wanted = compute_capability_of_arch(request.arch)
    except ValueError as err:
        return make_result("gpu.arch", "fail", str(err), "use a name like sm120 (compute capability 12.0)")
    wrong = {
        i: d.compute_capability
        for i, d in requested_devices(request, facts)
        if d is not None and d.compute_capability is not None and d.compute_capability != wanted
    }
    unknown = [i for i, d in requested_devices(request, facts) if d is None or d.compute_capability is None]
    wanted_text = f"{request.arch} (compute capability {wanted[0]}.{wanted[1]})"
    if wrong:
        found = ", ".join(f"card {i} is sm{cc[0]}{cc[1]} ({cc[0]}.{cc[1]})" for i, cc in wrong.items())
        return make_result(
            "gpu.arch",
            "fail",
            f"profile needs {wanted_text}; {found}",
            "run the profile on matching cards, or use an image/profile built for these",
            wanted=request.arch,
            cards=seen,
        )
    if unknown:
        return make_result(
            "gpu.arch",
            "unknown",
            f"cannot read the compute capability of card(s) {unknown}",
            wanted=request.arch,
            cards=seen,
        )
    return make_result("gpu.arch", "pass", f"all cards are {wanted_text}", wanted=request.arch, cards=seen)


def check_gpu_count(request: PreflightRequest, facts: Facts) -> CheckResult:
    """The number of cards matches TP x DP."""
    if not request.gpus_requested:
        return no_gpus("gpu.count")
    wanted = request.tp * request.dp
    n = len(request.gpu_indices)
    duplicates = sorted({i for i in request.gpu_indices if request.gpu_indices.count(i) > 1})
    found: dict[str, Any] = {"devices": list(request.gpu_indices), "tp": request.tp, "dp": request.dp}
    if duplicates:
        return make_result("gpu.count", "fail", f"card(s) {duplicates} listed twice", "list each card once", **found)
    if n != wanted:
        return make_result(
            "gpu.count",
            "fail",
            f"tp {request.tp} x dp {request.dp} = {wanted} ranks but {n} card(s) {list(request.gpu_indices)}",
            "make tp x dp equal the number of devices",
            **found,
        )
    return make_result("gpu.count", "pass", f"{n} card(s) for tp {request.tp} x dp {request.dp}", **found)


def check_gpu_mig(request: PreflightRequest, facts: Facts) -> CheckResult:
    """MIG would hand the engine a slice of a card, not the card."""
    if not request.gpus_requested:
        return no_gpus("gpu.mig")
    if facts.gpu is None:
        return gpu_unreachable("gpu.mig", facts)
    modes = {i: (d.mig_enabled if d else None) for i, d in requested_devices(request, facts)}
    enabled = [i for i, on in modes.items() if on]
    if enabled:
        return make_result(
            "gpu.mig",
            "fail",
            f"MIG mode is on for card(s) {enabled}: the engine would get a slice",
            "turn MIG off: sudo nvidia-smi -i N -mig 0 (then reset the card)",
            mig_enabled=modes,
        )
    return make_result("gpu.mig", "pass", "MIG off or not supported on these cards", mig_enabled=modes)


def check_gpu_exclusive(request: PreflightRequest, facts: Facts) -> CheckResult:
    """No process and no other container uses the profile's cards, except what this run will stop."""
    if not request.gpus_requested:
        return no_gpus("gpu.exclusive")
    if facts.gpu is None:
        return gpu_unreachable("gpu.exclusive", facts)
    foreign = [p for p in facts.processes if p.disposition == "foreign"]
    stopping = [p for p in facts.processes if p.disposition != "foreign"]
    uuid_of = {i: (d.uuid if d else None) for i, d in requested_devices(request, facts)}
    claimants = _claimants(request, facts, uuid_of)
    unlisted = [i for i, d in requested_devices(request, facts) if d is not None and d.processes is None]
    unexplained = _unexplained_mib(request, facts)
    out: dict[str, Any] = {
        "foreign_processes": [p.to_dict() for p in foreign],
        "will_stop_processes": [p.to_dict() for p in stopping],
        "containers_requesting_cards": claimants,
        "cards_without_process_list": unlisted,
        "unexplained_used_mib": unexplained,
        "exclusive_required": request.exclusive,
    }
    problems = [p.describe() for p in foreign]
    for c in claimants:
        kind = f"servectl service {c['servectl_profile']}" if c["servectl_profile"] else "container"
        idle = " (idle)" if c["idle"] else ""
        problems.append(f"{kind} {c['container_name']} ({c['container_id']}) requests card(s) {c['cards']}{idle}")
    if problems:
        fixes = _exclusive_fixes(foreign, claimants)
        return make_result("gpu.exclusive", "fail" if request.exclusive else "warn", "; ".join(problems), fixes, **out)
    if unlisted:
        return make_result(
            "gpu.exclusive",
            "unknown",
            f"the driver cannot list processes on card(s) {unlisted}; exclusive use not proven",
            "check nvidia-smi on the host (WSL2 and MIG hide per-process use)",
            **out,
        )
    if unexplained:
        text = ", ".join(f"card {i}: {mib:,} MiB" for i, mib in unexplained.items())
        return make_result(
            "gpu.exclusive",
            "warn",
            f"memory in use that no listed process holds ({text})",
            "look for processes in other PID namespaces (containers, VMs) with nvidia-smi on the host",
            **out,
        )
    note = f"; will stop {len(stopping)} process(es) first" if stopping else ""
    return make_result(
        "gpu.exclusive",
        "pass",
        f"no other process or container on card(s) {list(request.gpu_indices)}{note}",
        **out,
    )


def _claimants(request: PreflightRequest, facts: Facts, uuid_of: dict[int, str | None]) -> list[dict[str, Any]]:
    """Containers (not being replaced or stopped) whose GPU request covers one of the profile's cards."""
    with_processes = {p.container_id for p in facts.processes if p.container_id}
    claimants: list[dict[str, Any]] = []
    for container in facts.containers:
        if container.gpu_request is None:
            continue
        cards = [i for i, uuid in uuid_of.items() if container.gpu_request.covers(i, uuid)]
        if not cards or classify_process(request, container, container.id, -1) != "foreign":
            continue
        claimants.append(
            {
                "container_id": container.short_id,
                "container_name": container.name,
                "servectl_profile": container.servectl_profile,
                "cards": cards,
                "via": container.gpu_request.via,
                "idle": container.id not in with_processes,
            }
        )
    return claimants


def _unexplained_mib(request: PreflightRequest, facts: Facts) -> dict[int, int]:
    """Per card: MiB in use beyond what its listed processes hold, when above the warning threshold."""
    unexplained: dict[int, int] = {}
    for i, d in requested_devices(request, facts):
        if d is None or d.processes is None or d.memory_used_bytes is None:
            continue
        listed = sum(p.used_memory_bytes or 0 for p in d.processes)
        if d.memory_used_bytes - listed > UNEXPLAINED_USED_BYTES:
            unexplained[i] = to_mib(d.memory_used_bytes - listed)
    return unexplained


def _exclusive_fixes(foreign: list[AttributedProcess], claimants: list[dict[str, Any]]) -> str:
    names = sorted(
        {str(c["container_name"]) for c in claimants} | {str(p.container_name) for p in foreign if p.container_name}
    )
    pids = sorted({p.pid for p in foreign if not p.container_id})
    fixes = []
    if names:
        fixes.append(
            f"stop {', '.join(names)} (docker stop NAME), or declare it as a conflict so swap stops and restores it"
        )
    if pids:
        fixes.append(f"end pid(s) {', '.join(map(str, pids))} or pick other cards")
    if any(c["servectl_profile"] for c in claimants):
        fixes.append("use servectl swap to replace a running servectl service")
    return "; ".join(fixes)


def _freed_bytes(facts: Facts, index: int) -> int | None:
    total = 0
    for p in facts.processes:
        if p.card_index == index and p.disposition != "foreign":
            if p.used_memory_bytes is None:
                return None
            total += p.used_memory_bytes
    return total


def _card_budget(
    request: PreflightRequest, facts: Facts, index: int, d: GpuDevice, weights_per_card: float | None
) -> tuple[dict[str, Any], str | None, str | None]:
    """One card before and after the engine starts: (facts row, why it cannot fit, why the reserve is short)."""
    assert d.memory_free_bytes is not None and d.memory_total_bytes is not None
    reserve = request.vram_reserve_mib
    freed = _freed_bytes(facts, index)
    free_after_stop = d.memory_free_bytes + (freed or 0)
    row: dict[str, Any] = {
        "card": index,
        "total_mib": to_mib(d.memory_total_bytes),
        "free_mib": to_mib(d.memory_free_bytes),
        "freed_by_stopping_mib": None if freed is None else to_mib(freed),
        "free_before_start_mib": to_mib(free_after_stop),
        "weights_per_card_mib": None if weights_per_card is None else to_mib(int(weights_per_card)),
        "engine_estimate_mib": None,
        "free_after_start_mib": None,
        "reserve_mib": reserve,
    }
    left: float | None = None
    if request.mem_fraction is not None:
        # SGLang sizes weights + KV pool so that (1 - mem_fraction) x total stays free.
        left = d.memory_total_bytes * (1 - request.mem_fraction)
        row["engine_estimate_mib"] = to_mib(int(max(0.0, free_after_stop - left)))
    elif weights_per_card is not None:
        row["engine_estimate_mib"] = to_mib(int(weights_per_card))
        left = free_after_stop - weights_per_card
    too_little: str | None = None
    if weights_per_card is not None and weights_per_card > free_after_stop:
        too_little = (
            f"card {index}: weights need {to_mib(int(weights_per_card)):,} MiB per card but only "
            f"{to_mib(free_after_stop):,} MiB are free"
        )
    elif weights_per_card is not None and left is not None and free_after_stop - left < weights_per_card:
        too_little = (
            f"card {index}: mem fraction {request.mem_fraction} leaves "
            f"{to_mib(int(max(0.0, free_after_stop - left))):,} MiB for weights + KV cache but weights "
            f"need {to_mib(int(weights_per_card)):,} MiB per card"
        )
    effective_free = free_after_stop if left is None else min(free_after_stop, int(left))
    row["free_after_start_mib"] = None if left is None else to_mib(int(left))
    below_reserve: str | None = None
    if to_mib(effective_free) < reserve:
        what = "free now" if left is None else "left once the engine runs (estimate)"
        below_reserve = f"card {index}: {to_mib(effective_free):,} MiB {what} < reserve {reserve:,} MiB"
    return row, too_little, below_reserve


def check_gpu_vram_reserve(request: PreflightRequest, facts: Facts) -> CheckResult:
    """Each card keeps the reserve free once the engine runs (estimated from weights/TP and mem fraction)."""
    if not request.gpus_requested:
        return no_gpus("gpu.vram_reserve")
    if facts.gpu is None:
        return gpu_unreachable("gpu.vram_reserve", facts)
    reserve = request.vram_reserve_mib
    ranks = max(1, request.tp * request.dp)
    weights = facts.model.weights_bytes if facts.model is not None and facts.model.weights_bytes else None
    weights_per_card = weights / ranks if weights else None
    cards: list[dict[str, Any]] = []
    short: list[str] = []
    impossible: list[str] = []
    unreadable: list[int] = []
    freed_unknown: list[int] = []
    for index, d in requested_devices(request, facts):
        if d is None or d.memory_free_bytes is None or d.memory_total_bytes is None:
            unreadable.append(index)
            continue
        row, too_little, below_reserve = _card_budget(request, facts, index, d, weights_per_card)
        if too_little:
            impossible.append(too_little)
        if below_reserve:
            short.append(below_reserve)
        if row["freed_by_stopping_mib"] is None:
            freed_unknown.append(index)
        cards.append(row)
    out: dict[str, Any] = {
        "cards": cards,
        "reserve_mib": reserve,
        "waived": request.vram_reserve_waiver is not None,
        "waiver_reason": request.vram_reserve_waiver,
        "mem_fraction": request.mem_fraction,
        "weights_mib": None if weights is None else to_mib(weights),
    }
    if impossible:
        return make_result(
            "gpu.vram_reserve",
            "fail",
            "; ".join(impossible),
            "lower mem fraction, raise TP, or free the cards",
            **out,
        )
    summary = "; ".join(
        f"card {r['card']}: free {r['free_before_start_mib']:,} MiB"
        + (
            f", engine ~{r['engine_estimate_mib']:,} MiB, left ~{r['free_after_start_mib']:,} MiB"
            if r["engine_estimate_mib"] is not None
            else ""
        )
        for r in cards
    )
    if short and request.vram_reserve_waiver is None:
        return make_result(
            "gpu.vram_reserve",
            "fail",
            "; ".join(short),
            "free the cards, lower mem fraction, or waive the reserve in the profile with a reason",
            **out,
        )
    if unreadable:
        return make_result("gpu.vram_reserve", "unknown", f"cannot read the memory of card(s) {unreadable}", **out)
    if request.vram_reserve_waiver is not None:
        return make_result(
            "gpu.vram_reserve",
            "pass",
            f"reserve {reserve:,} MiB waived: {request.vram_reserve_waiver} ({summary})",
            **out,
        )
    if freed_unknown:
        return make_result(
            "gpu.vram_reserve",
            "unknown",
            f"cannot tell what stopping the replaced service frees on card(s) {freed_unknown} ({summary})",
            **out,
        )
    return make_result("gpu.vram_reserve", "pass", f"reserve {reserve:,} MiB kept ({summary})", **out)
