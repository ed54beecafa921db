"""The qualification's VRAM gate on real NVML: free MiB per card after the run against the profile's reserve.

A host stand-in answers the API (no GPU work); the GPU adapter (:class:`NvmlInventory`) reads the cards after
the run. A holder process (tests/gpu/holder.py) takes memory on card 0 so that the same reserve fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gpu_helpers import start_holder

from servectl.adapters.gpu import MIB, NvmlInventory
from servectl.bench.qualify import QualifyReport, QualifySettings, ServiceFacts, run_qualify
from servectl.bench.qualify.suite import LoadedSuite, Suite
from servectl.standin.process import HostStandin

pytestmark = pytest.mark.gpu

DEMO_MODEL = str(Path(__file__).resolve().parents[2] / "src" / "servectl" / "data" / "examples" / "demo-model")
HOLD_GIB = 6


def _qualify(inventory: NvmlInventory, reserve_mib: int) -> QualifyReport:
    suite = LoadedSuite(Suite.model_validate({"name": "vram", "gates": {"smoke": {}, "vram": {}}}), "test", "0" * 64)
    facts = ServiceFacts(
        known=True,
        vram_reserve_mib=reserve_mib,
        free_vram=lambda: [d for d in inventory.snapshot().devices if d.index == 0],
    )
    with HostStandin(["--model-path", DEMO_MODEL], env={"STANDIN_STARTUP_DELAY_S": "0"}) as engine:
        engine.wait_ready()
        return run_qualify(settings=QualifySettings(url=engine.base_url, suite=suite), facts=facts, environ=os.environ)


def test_vram_gate_passes_above_the_reserve_and_fails_when_another_process_takes_the_memory(
    inventory: NvmlInventory,
) -> None:
    free = inventory.snapshot().devices[0].memory_free_bytes
    assert free is not None
    reserve = free // MIB - 2048  # 2 GiB below what is free now
    passed = _qualify(inventory, reserve).gates[-1]
    assert passed.verdict == "pass", passed.cases
    assert passed.cases[0].detail["memory_free_mib"] >= reserve

    holder = start_holder(0, HOLD_GIB)
    try:
        failed = _qualify(inventory, reserve).gates[-1]
    finally:
        holder.stop()
    assert failed.verdict == "fail"
    message = failed.failures[0].message
    assert message.startswith("vram GPU0: ") and f"below the reserve of {reserve:,} MiB" in message
    assert failed.cases[0].detail["memory_free_mib"] < reserve
