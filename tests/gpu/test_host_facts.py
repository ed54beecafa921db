"""The artifact manifest's host facts on real cards: driver and power cap as nvidia-smi reports them.

Run on a machine with NVIDIA GPUs (``pytest -m gpu tests/gpu``); skips where NVML cannot be initialised.
"""

from __future__ import annotations

import subprocess

import pytest

from servectl.adapters.gpu import NvmlInventory
from servectl.bench.manifest import host_facts
from servectl.errors import GpuUnavailable

pytestmark = pytest.mark.gpu


def nvidia_smi(*fields: str) -> list[list[str]]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return [[v.strip() for v in line.split(",")] for line in out.strip().splitlines()]


def test_host_facts_match_nvidia_smi() -> None:
    inventory = NvmlInventory()
    try:
        inventory.snapshot()
    except GpuUnavailable as err:
        pytest.skip(f"no NVIDIA driver here: {err}")
    facts = host_facts(inventory)
    inventory.close()
    smi = nvidia_smi("index", "driver_version", "name", "enforced.power.limit", "memory.total")
    assert facts["source"] == "nvml" and facts["driver_version"] == smi[0][1]
    assert [c["index"] for c in facts["cards"]] == [int(row[0]) for row in smi]
    for card, row in zip(facts["cards"], smi, strict=True):
        assert card["name"] == row[2]
        assert card["memory_total_mib"] == int(row[4])
        if row[3] in ("[N/A]", "[Not Supported]"):
            assert card["power_limit_w"] is None
        else:
            assert card["power_limit_w"] == pytest.approx(float(row[3]), abs=1.0)
    print("host facts:", facts)
