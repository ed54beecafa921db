"""The real NVML inventory and preflight on real cards, checked against nvidia-smi and torch.

Run on a machine with NVIDIA GPUs (``pytest -m gpu tests/gpu``); everything here skips where NVML cannot be
initialised, and the tests that need a second process holding memory skip where torch is missing.
Set ``SERVECTL_GPU_NUMBERS=path`` to have the compared numbers appended there as JSON lines.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from gpu_helpers import Holder, nvidia_smi, record, start_holder, uuid_key

from servectl.adapters.gpu import MIB, GpuSnapshot, NvmlInventory, wait_until_free
from servectl.adapters.host import PsutilHostProbe
from servectl.preflight.model import PreflightRequest
from servectl.preflight.run import run_preflight
from servectl.testing.docker import FakeDockerEngine

pytestmark = pytest.mark.gpu

HOLD_GIB = 6.0


@pytest.fixture(scope="module")
def holder(inventory: NvmlInventory) -> Iterator[Holder]:
    """A second process holding several GiB on the last card (card 1 of two: a foreign process on one card of
    a two-card profile) for the whole module."""
    h = start_holder(inventory.snapshot().devices[-1].index, HOLD_GIB)
    yield h
    h.stop()


def card_of(snapshot: GpuSnapshot, uuid: str) -> int:
    """The NVML index of the card with this UUID."""
    for device in snapshot.devices:
        if uuid_key(device.uuid) == uuid_key(uuid):
            return device.index
    raise AssertionError(f"no card with uuid {uuid} in {[d.uuid for d in snapshot.devices]}")


def within(actual: float, expected: float, fraction: float = 0.01) -> bool:
    """Whether ``actual`` is within ``fraction`` of ``expected``."""
    return abs(actual - expected) <= fraction * abs(expected)


def test_snapshot_lists_the_cards_nvidia_smi_lists(inventory: NvmlInventory) -> None:
    snapshot = inventory.snapshot()
    rows = nvidia_smi("--query-gpu=index,uuid,name,memory.total,compute_cap")
    assert [d.index for d in snapshot.devices] == [int(r[0]) for r in rows]
    for device, row in zip(snapshot.devices, rows, strict=True):
        assert device.uuid == row[1]
        assert device.name == row[2]
        assert device.memory_total_bytes is not None
        assert within(device.memory_total_bytes / MIB, float(row[3]))
        assert device.compute_capability == tuple(int(x) for x in row[4].split("."))
        assert device.processes is not None, "this driver should list processes"
    record(
        "cards",
        cards=[
            {
                "index": d.index,
                "name": d.name,
                "arch": d.arch,
                "total_mib": round((d.memory_total_bytes or 0) / MIB),
            }
            for d in snapshot.devices
        ],
        driver=snapshot.driver_version,
        cuda=snapshot.cuda_driver_version,
    )


def test_holder_pid_and_its_memory_match_nvidia_smi_within_1_percent(inventory: NvmlInventory, holder: Holder) -> None:
    snapshot = inventory.snapshot()
    apps = nvidia_smi("--query-compute-apps=pid,used_memory,gpu_uuid")
    smi_mib = {(int(r[0]), uuid_key(r[2])): float(r[1]) for r in apps}
    card = card_of(snapshot, holder.uuid)
    device = snapshot.device(card)
    assert device is not None and device.processes is not None
    ours = [p for p in device.processes if p.pid == holder.pid]
    assert len(ours) == 1, f"pid {holder.pid} not listed on card {card}: {device.processes}"
    assert ours[0].used_memory_bytes is not None
    nvml_mib = ours[0].used_memory_bytes / MIB
    expected = smi_mib[(holder.pid, uuid_key(device.uuid))]
    record(
        "process_memory",
        pid=holder.pid,
        card=card,
        nvml_mib=round(nvml_mib, 1),
        nvidia_smi_mib=expected,
        held_gib=holder.gib,
    )
    assert within(nvml_mib, expected)
    assert ours[0].used_memory_bytes >= holder.gib * 1024 * MIB


def test_free_memory_matches_torch_mem_get_info_within_1_percent(inventory: NvmlInventory, holder: Holder) -> None:
    before = inventory.snapshot()
    torch_free, torch_total = holder.mem_get_info()
    after = inventory.snapshot()
    card = card_of(before, holder.uuid)
    frees: list[int] = []
    for snapshot in (before, after):
        device = snapshot.device(card)
        assert device is not None and device.memory_free_bytes is not None
        frees.append(device.memory_free_bytes)
    device = before.device(card)
    assert device is not None and device.memory_total_bytes is not None
    total = device.memory_total_bytes
    closest = min(frees, key=lambda free: abs(free - torch_free))
    record(
        "free_memory",
        card=card,
        nvml_free_mib=round(closest / MIB, 1),
        torch_free_mib=round(torch_free / MIB, 1),
        nvml_total_mib=round(total / MIB, 1),
        torch_total_mib=round(torch_total / MIB, 1),
    )
    assert within(closest, torch_free)
    assert within(total, torch_total)


def test_preflight_names_the_foreign_pid_and_its_mib_on_real_cards(inventory: NvmlInventory, holder: Holder) -> None:
    snapshot = inventory.snapshot()
    card = card_of(snapshot, holder.uuid)
    indices = tuple(d.index for d in snapshot.devices)
    request = PreflightRequest(
        profile_name="gpu-test",
        gpu_indices=indices,
        arch=snapshot.devices[0].arch,
        tp=len(indices),
        port=1,  # nothing listens on port 1
        image_ref="none",
        model_path="/nonexistent",
        mem_fraction=0.5,
    )
    report = run_preflight(request=request, gpus=inventory, host=PsutilHostProbe(), docker=FakeDockerEngine())
    apps = nvidia_smi("--query-compute-apps=pid,used_memory,gpu_uuid")
    smi_mib = {int(r[0]): float(r[1]) for r in apps if uuid_key(r[2]) == uuid_key(holder.uuid)}
    exclusive = report.check("gpu.exclusive")
    assert exclusive.result == "fail"
    named = [p for p in exclusive.facts["foreign_processes"] if p["pid"] == holder.pid]
    assert len(named) == 1 and named[0]["card"] == card
    assert {p["card"] for p in exclusive.facts["foreign_processes"]} == {card}, "only the holder's card is named"
    rows = report.check("gpu.vram_reserve").facts["cards"]
    assert sorted(r["card"] for r in rows) == sorted(indices), "every card of the profile is measured"
    assert all(r["engine_estimate_mib"] is not None and r["reserve_mib"] is not None for r in rows)
    assert "python" in (named[0]["process_name"] or "")
    assert f"pid {holder.pid}" in exclusive.message
    assert within(named[0]["used_mib"], smi_mib[holder.pid])
    torch_free, _ = holder.mem_get_info()
    row = next(r for r in report.check("gpu.vram_reserve").facts["cards"] if r["card"] == card)
    record(
        "preflight",
        pid=holder.pid,
        card=card,
        reported_mib=named[0]["used_mib"],
        nvidia_smi_mib=smi_mib[holder.pid],
        reported_free_mib=row["free_mib"],
        torch_free_mib=round(torch_free / MIB),
        gpu_query_ms=round((report.gpu_query_seconds or 0) * 1000, 2),
        preflight_ms=round(report.duration_seconds * 1000, 2),
    )
    assert within(row["free_mib"], torch_free / MIB)
    assert report.check("gpu.present").result == "pass"
    assert report.check("gpu.arch").result == "pass"
    assert report.check("gpu.count").result == "pass"


def test_wait_until_free_names_the_pid_then_sees_the_card_empty(
    inventory: NvmlInventory, holder_factory: Callable[[int, float], Holder]
) -> None:
    snapshot = inventory.snapshot()
    card = snapshot.devices[-1].index
    device = snapshot.device(card)
    assert device is not None and device.processes is not None
    already = {p.pid for p in device.processes}
    cards = [d.index for d in snapshot.devices]  # down's wait covers every card of a two-card service
    for other in snapshot.devices[:-1]:
        already |= {p.pid for p in other.processes or ()}
    extra = holder_factory(card, 1.0)
    held = wait_until_free(
        inventory, cards, deadline_s=1.0, ignore_pids=already, clock=time.monotonic, sleep=time.sleep
    )
    assert not held.free and held.leaked_pids == (extra.pid,)
    assert {h.card_index for h in held.held} == {card}, "the leaked pid is named on its own card"
    extra.stop()
    freed = wait_until_free(
        inventory, cards, deadline_s=60.0, ignore_pids=already, clock=time.monotonic, sleep=time.sleep
    )
    record("wait_until_free", card=card, pid=extra.pid, waited_s=round(freed.waited_seconds, 3))
    assert freed.free, f"card {card} still held: {freed}"
