"""The artifact manifest's host facts on real cards: driver and power cap as nvidia-smi reports them.

Run on a machine with NVIDIA GPUs (``pytest -m gpu tests/gpu``); skips where NVML cannot be initialised.
"""

from __future__ import annotations

import pytest
from gpu_helpers import nvidia_smi

from servectl.adapters.gpu import NvmlInventory
from servectl.bench.manifest import host_facts

pytestmark = pytest.mark.gpu


def test_host_facts_match_nvidia_smi(inventory: NvmlInventory) -> None:
    facts = host_facts(inventory)
    smi = nvidia_smi("--query-gpu=index,driver_version,name,enforced.power.limit,memory.total")
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
