"""Fixtures of the gpu tests: the real NVML inventory, and torch processes holding memory on a card."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from gpu_helpers import Holder, start_holder

from servectl.adapters.gpu import NvmlInventory
from servectl.errors import GpuUnavailable


@pytest.fixture(scope="module")
def inventory() -> Iterator[NvmlInventory]:
    """The real inventory; skips the test where NVML cannot be initialised or lists no GPU."""
    inv = NvmlInventory()
    try:
        snapshot = inv.snapshot()
    except GpuUnavailable as err:
        pytest.skip(f"no NVIDIA driver here: {err}")
    if not snapshot.devices:
        pytest.skip("NVML answers but lists no GPU")
    yield inv
    inv.close()


@pytest.fixture
def holder_factory(inventory: NvmlInventory) -> Iterator[Callable[[int, float], Holder]]:
    """Start holders on demand (card, GiB); all are stopped at the end of the test."""
    started: list[Holder] = []

    def start(card: int, gib: float) -> Holder:
        h = start_holder(card, gib)
        started.append(h)
        return h

    yield start
    for h in started:
        h.stop()
