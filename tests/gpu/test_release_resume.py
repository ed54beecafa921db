"""A warm standby's release and resume on a real card, with a torch process standing in for the engine.

An engine on warm standby keeps its process (and CUDA context) but hands its memory back to the driver
(SGLang's ``/release_memory_occupation``: cudaFree of the weights and the KV cache), then takes it again on
resume. Here ``holder.py`` does the same with torch: allocate, ``release`` (drop the block,
``torch.cuda.empty_cache()``), ``take`` (allocate again). The tests show that servectl's NVML inventory
(:class:`servectl.adapters.gpu.NvmlInventory`) sees the memory leave and come back while the pid stays on
the card, and that the free memory per card preflight reports with such a process on the card is what
``nvidia-smi`` reports.

Run on a machine with NVIDIA GPUs (``pytest -m gpu tests/gpu``); skipped where NVML cannot be initialised or
torch is missing. Set ``SERVECTL_GPU_NUMBERS=path`` to have the compared numbers appended there as JSON lines.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from gpu_helpers import Holder, nvidia_smi, record, uuid_key

from servectl.adapters.gpu import MIB, GpuSnapshot, NvmlInventory
from servectl.adapters.host import PsutilHostProbe
from servectl.preflight.model import PreflightRequest
from servectl.preflight.run import run_preflight
from servectl.testing.docker import FakeDockerEngine

pytestmark = pytest.mark.gpu

GIB = 2**30
BLOCK_GIB = 8.0
#: What the released process may keep on the card: its CUDA context (about 0.5 GiB on an H200) and no block.
CONTEXT_LIMIT_BYTES = 2 * GIB
#: NVML's figures settle within milliseconds of cudaFree; the poll gives up well after that.
SETTLE_S = 10.0


@pytest.fixture
def engine(holder_factory: Callable[[int, float], Holder]) -> Holder:
    """A torch process standing in for an engine: :data:`BLOCK_GIB` GiB on card 0 (NVML numbering)."""
    return holder_factory(0, BLOCK_GIB)


@dataclass(frozen=True)
class Reading:
    """One card as NVML saw it, and the engine's own use of it."""

    free_bytes: int
    pid_bytes: int | None  # None: the pid is not listed on the card
    seconds: float  # since the command returned, until NVML showed it


def read(inventory: NvmlInventory, engine: Holder) -> Reading:
    snapshot = inventory.snapshot()
    return _reading(snapshot, engine, 0.0)


def _reading(snapshot: GpuSnapshot, engine: Holder, seconds: float) -> Reading:
    device = next(d for d in snapshot.devices if uuid_key(d.uuid) == uuid_key(engine.uuid))
    assert device.memory_free_bytes is not None and device.processes is not None
    ours = [p.used_memory_bytes for p in device.processes if p.pid == engine.pid]
    return Reading(device.memory_free_bytes, ours[0] if ours else None, seconds)


def wait_for(inventory: NvmlInventory, engine: Holder, settled: Callable[[Reading], bool]) -> Reading:
    """Poll NVML until ``settled`` holds (or :data:`SETTLE_S` passed); the last reading."""
    began = time.monotonic()
    while True:
        reading = _reading(inventory.snapshot(), engine, time.monotonic() - began)
        if settled(reading) or reading.seconds > SETTLE_S:
            return reading
        time.sleep(0.005)


def mib(value: int | None) -> float | None:
    return None if value is None else round(value / MIB, 1)


def test_nvml_sees_the_memory_leave_and_come_back_while_the_process_stays(
    inventory: NvmlInventory, engine: Holder
) -> None:
    block = int(BLOCK_GIB * GIB)
    held = read(inventory, engine)
    assert held.pid_bytes is not None and held.pid_bytes >= block, f"pid {engine.pid} holds {held.pid_bytes}"

    engine.ask("release", "released")
    released = wait_for(inventory, engine, lambda r: r.pid_bytes is not None and r.pid_bytes < block)
    engine.ask("take " + str(BLOCK_GIB), "taken")
    taken = wait_for(inventory, engine, lambda r: r.pid_bytes is not None and r.pid_bytes >= block)

    record(
        "release_resume",
        block_mib=round(block / MIB),
        held_pid_mib=mib(held.pid_bytes),
        released_pid_mib=mib(released.pid_bytes),
        taken_pid_mib=mib(taken.pid_bytes),
        held_free_mib=mib(held.free_bytes),
        released_free_mib=mib(released.free_bytes),
        taken_free_mib=mib(taken.free_bytes),
        freed_mib=mib(released.free_bytes - held.free_bytes),
        retaken_mib=mib(released.free_bytes - taken.free_bytes),
        release_seen_after_s=round(released.seconds, 4),
        take_seen_after_s=round(taken.seconds, 4),
    )
    # released: the pid is still on the card (a standby keeps its process) with its context only
    assert released.pid_bytes is not None, f"pid {engine.pid} left the card on release"
    assert released.pid_bytes <= CONTEXT_LIMIT_BYTES
    # the card's free memory rose by the block (NVML counts in 2 MiB pages: allow 1 %)
    freed = released.free_bytes - held.free_bytes
    assert abs(freed - (held.pid_bytes - released.pid_bytes)) <= 0.01 * block
    assert freed >= 0.99 * block
    # taken again: the same amount leaves the card once more
    assert taken.pid_bytes is not None and abs(taken.pid_bytes - held.pid_bytes) <= 0.01 * block
    assert abs((released.free_bytes - taken.free_bytes) - freed) <= 0.01 * block


def test_preflight_free_memory_per_card_matches_nvidia_smi_beside_a_released_engine(
    inventory: NvmlInventory, engine: Holder
) -> None:
    engine.ask("release", "released")
    wait_for(inventory, engine, lambda r: r.pid_bytes is not None and r.pid_bytes <= CONTEXT_LIMIT_BYTES)
    snapshot = inventory.snapshot()
    indices = tuple(d.index for d in snapshot.devices)
    request = PreflightRequest(
        profile_name="gpu-standby-test",
        gpu_indices=indices,
        arch=snapshot.devices[0].arch,
        tp=len(indices),
        port=1,  # nothing listens on port 1
        image_ref="none",
        model_path="/nonexistent",
    )
    report = run_preflight(request=request, gpus=inventory, host=PsutilHostProbe(), docker=FakeDockerEngine())
    smi = {int(r[0]): (float(r[1]), float(r[2])) for r in nvidia_smi("--query-gpu=index,memory.free,memory.used")}
    apps = nvidia_smi("--query-compute-apps=pid,used_memory,gpu_uuid")
    rows = report.check("gpu.vram_reserve").facts["cards"]
    exclusive = report.check("gpu.exclusive")
    named = [p for p in exclusive.facts["foreign_processes"] if p["pid"] == engine.pid]
    record(
        "standby_preflight",
        cards=[
            {"card": r["card"], "preflight_free_mib": r["free_mib"], "nvidia_smi_free_mib": smi[r["card"]][0]}
            for r in rows
        ],
        released_pid=engine.pid,
        preflight_pid_mib=named[0]["used_mib"] if named else None,
        nvidia_smi_pid_mib=next((float(a[1]) for a in apps if int(a[0]) == engine.pid), None),
    )
    assert sorted(r["card"] for r in rows) == sorted(smi)
    for row in rows:
        assert abs(row["free_mib"] - smi[row["card"]][0]) <= max(2.0, 0.001 * smi[row["card"]][0]), row
    # the released engine still shows on its card with its context only, as nvidia-smi lists it
    assert len(named) == 1
    smi_pid = next(float(a[1]) for a in apps if int(a[0]) == engine.pid)
    assert abs(named[0]["used_mib"] - smi_pid) <= 2.0
    assert named[0]["used_mib"] <= CONTEXT_LIMIT_BYTES / MIB
