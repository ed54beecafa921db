"""Two cards as two TP ranks (issue 43): one saver engine per card, released and verified card by card.

An SGLang server with TP=2 runs one scheduler per card, each holding its weights (with the CPU backup) and
KV cache in torch_memory_saver's regions. Here each rank is ``saver_engine.py --card N`` under the library's
preload hook. servectl's release verification (:func:`servectl.service.standby.release_shortfall`, what
``_verify_released`` polls) reads every card through the real NVML inventory: it must fail while any rank
holds its memory, name exactly the card whose rank kept it, and pass once every rank released. Release and
resume are timed per card, with the default backup and with ``TMS_RETAIN_CPU_BACKUP=1``.

Runs on as many cards as there are, up to two: on a one-card machine the single rank plays both parts (the
rank that keeps its memory is that card's). NVLink multicast stays off in every process started here
(``NCCL_NVLS_ENABLE=0``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``, ``NVSHMEM_DISABLE_NVLS=1``), as on the
multi-GPU machines this is meant for.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from gpu_helpers import record
from test_memory_saver_cycles import SaverEngine, card, start_engine

from servectl.adapters.gpu import MIB, NvmlInventory
from servectl.service.fingerprint import difference
from servectl.service.standby import release_shortfall

pytestmark = pytest.mark.gpu

GIB = 2**30
RANK_FILLER_GIB = 8.0
RANK_KV_GIB = 2.0
#: What a released rank may keep on its card (712 MiB measured on an H100; see gpu-h100-issue38).
KEPT_LIMIT_BYTES = 3 * GIB
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@pytest.fixture
def ranks() -> Iterator[list[SaverEngine]]:
    started: list[SaverEngine] = []
    yield started
    for engine in started:
        engine.stop()


@pytest.mark.parametrize("retain", [False, True], ids=["default-backup", "retained-backup"])
def test_release_verification_reads_every_rank_card_and_names_the_one_that_kept_its_memory(
    inventory: NvmlInventory, ranks: list[SaverEngine], retain: bool
) -> None:
    before = inventory.snapshot()
    cards = [d.index for d in before.devices][:2]
    base_free = {i: before.device(i).memory_free_bytes for i in cards}  # type: ignore[union-attr]
    totals = {i: before.device(i).memory_total_bytes for i in cards}  # type: ignore[union-attr]
    assert all(v is not None for v in (*base_free.values(), *totals.values()))
    # The target needs what the cards had before the ranks started, less what a released rank may keep.
    fraction = min((base_free[i] - KEPT_LIMIT_BYTES - GIB) / totals[i] for i in cards)  # type: ignore[operator]
    env = {**NO_MULTICAST, **({"TMS_RETAIN_CPU_BACKUP": "1"} if retain else {})}
    extra = ("--filler-gib", str(RANK_FILLER_GIB), "--kv-gib", str(RANK_KV_GIB))
    for index in cards:
        ranks.append(start_engine(env, "--card", str(index), *extra))
    firsts = [rank.fingerprint()[0] for rank in ranks]

    def shortfall() -> list[str]:
        return release_shortfall(
            inventory.snapshot(), cards, fraction=fraction, reserve_mib=0, kept={}, holder="tp2", target="next"
        )

    assert [s.split(" has ")[0] for s in shortfall()] == [f"card {i}" for i in cards], "held: every card short"
    timings: dict[int, dict[str, float]] = {}
    for index, rank in zip(cards[:-1], ranks[:-1], strict=True):
        timings[index] = {"release_s": rank.seconds("release", "released")}
    kept_card = cards[-1]
    short = shortfall()
    assert len(short) == 1 and short[0].startswith(f"card {kept_card} has "), short
    timings[kept_card] = {"release_s": ranks[-1].seconds("release", "released")}
    assert shortfall() == [], "every rank released: the target fits on every card"
    released = {i: card(inventory, r) for i, r in zip(cards, ranks, strict=True)}
    for index, rank in zip(cards, ranks, strict=True):
        timings[index]["resume_s"] = rank.seconds("resume", "resumed")
    for first, rank in zip(firsts, ranks, strict=True):
        assert difference(first, rank.fingerprint()[0]) is None
    for index in cards:
        kept = released[index]["pid_bytes"]
        assert kept is not None and kept <= KEPT_LIMIT_BYTES, f"card {index}: the released rank kept {kept} bytes"
    record(
        "two_card_release",
        cards=len(cards),
        retain_cpu_backup=retain,
        rank_filler_gib=RANK_FILLER_GIB,
        rank_kv_gib=RANK_KV_GIB,
        per_card={i: {**t, "kept_mib": (released[i]["pid_bytes"] or 0) // MIB} for i, t in sorted(timings.items())},
    )
