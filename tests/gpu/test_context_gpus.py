"""The Context's own GPU inventory on real cards: NVML opened at its first read (issue 40), not before, and then
the same cards nvidia-smi lists; closed with the context."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_helpers import nvidia_smi, record

from servectl.adapters.gpu import NvmlInventory, OpenedWhenRead, reads_cards
from servectl.service.context import Context
from servectl.testing.docker import FakeDockerEngine

pytestmark = pytest.mark.gpu


def test_the_contexts_inventory_opens_nvml_at_its_first_read_and_reads_the_real_cards(
    inventory: NvmlInventory, tmp_path: Path
) -> None:
    """``inventory`` (the module's own NVML) only skips this where no driver answers."""
    ctx = Context(environ={}, state_dir=tmp_path, docker=FakeDockerEngine())
    gpus = ctx.gpus
    assert isinstance(gpus, OpenedWhenRead) and gpus._opened is None  # a command reading no card opens no driver
    snapshot = gpus.snapshot()
    assert gpus._opened is not None and reads_cards(gpus)
    rows = nvidia_smi("--query-gpu=index,uuid")
    assert [(d.index, d.uuid) for d in snapshot.devices] == [(int(r[0]), r[1]) for r in rows]
    assert gpus.snapshot().devices[0].uuid == snapshot.devices[0].uuid  # asked again: the same driver, opened once
    ctx.close()
    record("context-gpus", cards=len(snapshot.devices), driver=snapshot.driver_version)
