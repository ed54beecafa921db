"""NvmlInventory's error sorting (through a stand-in NVML module), architecture names, wait_until_free, and
the fake inventory's scenarios."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from servectl.adapters.gpu import (
    MIB,
    GpuProcess,
    NvmlInventory,
    compute_capability_of_arch,
    nvml_query,
    wait_until_free,
)
from servectl.errors import EngineUnavailable, GpuUnavailable
from servectl.testing.fakes import FakeGpuInventory, make_device


@dataclass
class StubNvml:
    """A module-like object with pynvml's interface, its real error class and constants, and scripted cards.

    ``fail`` maps (function name, card index or None) to an NVML error code to raise.
    """

    cards: list[dict[str, Any]]
    fail: dict[tuple[str, int | None], int] = field(default_factory=dict)
    init_error: int | None = None
    shutdowns: int = 0

    NVMLError = pynvml.NVMLError
    nvmlMemory_v2 = pynvml.nvmlMemory_v2
    NVML_VALUE_NOT_AVAILABLE_ulonglong = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVML_ERROR_"):
            return getattr(pynvml, name)
        raise AttributeError(name)

    def _check(self, function: str, index: int | None) -> None:
        code = self.fail.get((function, index))
        if code is not None:
            raise pynvml.NVMLError(code)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.159.04"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000

    def nvmlDeviceGetCount(self) -> int:
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._check("nvmlDeviceGetHandleByIndex", index)
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        self._check("nvmlDeviceGetUUID", handle)
        return f"GPU-{handle}".encode()

    def nvmlDeviceGetName(self, handle: int) -> str:
        self._check("nvmlDeviceGetName", handle)
        return str(self.cards[handle].get("name", "NVIDIA H200"))

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        self._check("nvmlDeviceGetCudaComputeCapability", handle)
        return self.cards[handle].get("cc", (9, 0))  # type: ignore[no-any-return]

    def nvmlDeviceGetMemoryInfo(self, handle: int, version: int | None = None) -> SimpleNamespace:
        self._check("nvmlDeviceGetMemoryInfo" + ("_v2" if version else ""), handle)
        card = self.cards[handle]
        total, used, reserved = (
            card.get("total", 1000 * MIB),
            card.get("used", 0),
            card.get("reserved", 10 * MIB),
        )
        if version:
            return SimpleNamespace(total=total, used=used, free=total - used - reserved, reserved=reserved)
        return SimpleNamespace(total=total, used=used + reserved, free=total - used - reserved)

    def nvmlDeviceGetMigMode(self, handle: int) -> list[int]:
        self._check("nvmlDeviceGetMigMode", handle)
        return [int(self.cards[handle].get("mig", 0)), 0]

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        self._check("nvmlDeviceGetUtilizationRates", handle)
        return SimpleNamespace(gpu=self.cards[handle].get("util", 0), memory=0)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        self._check("nvmlDeviceGetEnforcedPowerLimit", handle)
        return int(self.cards[handle].get("power_mw", 300_000))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        self._check("nvmlDeviceGetComputeRunningProcesses", handle)
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self.cards[handle].get("compute", [])]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        self._check("nvmlDeviceGetGraphicsRunningProcesses", handle)
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self.cards[handle].get("graphics", [])]


def test_snapshot_reads_cards_processes_and_memory_with_the_driver_reservation_kept_apart() -> None:
    nvml = StubNvml(
        cards=[
            {
                "name": "NVIDIA RTX PRO 6000",
                "cc": (12, 0),
                "total": 97_887 * MIB,
                "used": 300 * MIB,
                "reserved": 487 * MIB,
                "compute": [(4242, 300 * MIB)],
            },
            {"cc": (12, 0)},
        ]
    )
    snapshot = NvmlInventory(nvml=nvml).snapshot()
    card = snapshot.devices[0]
    assert snapshot.driver_version == "580.159.04" and snapshot.cuda_driver_version == (13, 0)
    assert card.uuid == "GPU-0" and card.name == "NVIDIA RTX PRO 6000" and card.arch == "sm120"
    assert card.memory_used_bytes == 300 * MIB
    assert card.memory_reserved_bytes == 487 * MIB
    assert card.memory_free_bytes == (97_887 - 300 - 487) * MIB
    assert card.processes == (GpuProcess(pid=4242, used_memory_bytes=300 * MIB, kind="compute"),)
    assert card.mig_enabled is False
    assert snapshot.devices[1].processes == ()


def test_not_supported_fields_become_explicit_unknowns_instead_of_errors() -> None:
    not_supported = pynvml.NVML_ERROR_NOT_SUPPORTED
    nvml = StubNvml(
        cards=[{"compute": []}],
        fail={
            ("nvmlDeviceGetCudaComputeCapability", 0): not_supported,
            ("nvmlDeviceGetMigMode", 0): not_supported,
            ("nvmlDeviceGetComputeRunningProcesses", 0): not_supported,
            ("nvmlDeviceGetGraphicsRunningProcesses", 0): not_supported,
            ("nvmlDeviceGetMemoryInfo_v2", 0): pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        },
    )
    card = NvmlInventory(nvml=nvml).snapshot().devices[0]
    assert card.compute_capability is None and card.arch is None
    assert card.mig_enabled is None
    assert card.processes is None  # "cannot list", not "none running"
    assert card.memory_reserved_bytes is None  # fell back to the version 1 memory query
    assert card.memory_total_bytes == 1000 * MIB
    assert not card.lost and card.problem is None


def test_a_lost_card_is_reported_on_its_device_and_the_other_cards_still_read() -> None:
    nvml = StubNvml(cards=[{}, {}], fail={("nvmlDeviceGetUUID", 1): pynvml.NVML_ERROR_GPU_IS_LOST})
    snapshot = NvmlInventory(nvml=nvml).snapshot()
    assert snapshot.devices[0].uuid == "GPU-0" and not snapshot.devices[0].lost
    lost = snapshot.devices[1]
    assert lost.lost and lost.memory_free_bytes is None
    assert lost.problem is not None and "reset the card or reboot" in lost.problem


def test_an_unexpected_nvml_error_on_one_card_is_recorded_as_its_problem() -> None:
    nvml = StubNvml(cards=[{}], fail={("nvmlDeviceGetName", 0): pynvml.NVML_ERROR_UNKNOWN})
    card = NvmlInventory(nvml=nvml).snapshot().devices[0]
    assert not card.lost
    assert card.problem is not None and card.problem.startswith("NVML query failed: nvmlDeviceGetName")


def test_unavailable_per_process_memory_becomes_none() -> None:
    not_available = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
    nvml = StubNvml(cards=[{"compute": [(7, not_available)], "graphics": [(7, 5 * MIB), (9, 1 * MIB)]}])
    card = NvmlInventory(nvml=nvml).snapshot().devices[0]
    assert card.processes == (
        GpuProcess(pid=7, used_memory_bytes=None, kind="compute"),  # compute wins over graphics, once
        GpuProcess(pid=9, used_memory_bytes=1 * MIB, kind="graphics"),
    )


def test_mig_mode_is_read_from_the_current_mode() -> None:
    card = NvmlInventory(nvml=StubNvml(cards=[{"mig": 1}])).snapshot().devices[0]
    assert card.mig_enabled is True


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVIDIA driver is not installed on this host"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "sudo modprobe nvidia"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "driver updated without reboot"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "/dev/nvidia"),
        (pynvml.NVML_ERROR_UNKNOWN, "check the driver with nvidia-smi"),
    ],
)
def test_nvml_that_cannot_initialise_is_one_clear_line_with_the_fix(code: int, expected: str) -> None:
    with pytest.raises(GpuUnavailable) as caught:
        NvmlInventory(nvml=StubNvml(cards=[], init_error=code)).snapshot()
    assert isinstance(caught.value, EngineUnavailable) and caught.value.exit_code == 1
    assert expected in caught.value.message
    assert caught.value.message.startswith("NVML unavailable: ")
    assert "\n" not in caught.value.message


def test_the_real_library_without_a_driver_raises_gpu_unavailable_not_a_traceback() -> None:
    try:
        NvmlInventory().snapshot()
    except GpuUnavailable as err:
        assert err.message.startswith("NVML unavailable: ")
    else:  # a machine with a driver: nothing to prove here
        pytest.skip("this machine has an NVIDIA driver")


def test_close_shuts_nvml_down_once_and_only_after_init() -> None:
    nvml = StubNvml(cards=[{}])
    inventory = NvmlInventory(nvml=nvml)
    inventory.close()
    assert nvml.shutdowns == 0
    with inventory:
        inventory.snapshot()
        inventory.snapshot()
    assert nvml.shutdowns == 1


def test_nvml_query_returns_none_for_a_function_the_binding_lacks() -> None:
    assert nvml_query(StubNvml(cards=[]), "nvmlDeviceGetSomethingNew", 0) is None


@pytest.mark.parametrize(
    ("arch", "capability"),
    [
        ("sm120", (12, 0)),
        ("sm_120", (12, 0)),
        ("SM90", (9, 0)),
        ("sm_90a", (9, 0)),
        ("sm89", (8, 9)),
        ("12.0", (12, 0)),
        ("sm121", (12, 1)),
        ("sm100", (10, 0)),
    ],
)
def test_architecture_names_map_to_compute_capabilities(arch: str, capability: tuple[int, int]) -> None:
    assert compute_capability_of_arch(arch) == capability


@pytest.mark.parametrize("bad", ["", "hopper", "sm", "sm9", "12.x"])
def test_bad_architecture_names_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a GPU architecture"):
        compute_capability_of_arch(bad)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_wait_until_free_returns_once_the_last_process_has_left() -> None:
    held = FakeGpuInventory.snapshot_of([make_device(0, processes=[GpuProcess(11, 2 * MIB)]), make_device(1)])
    free = FakeGpuInventory.snapshot_of([make_device(0), make_device(1)])
    inventory = FakeGpuInventory([held, held, free])
    clock = FakeClock()
    result = wait_until_free(inventory, [0, 1], 10.0, poll_s=0.5, clock=clock, sleep=clock.sleep)
    assert result.free and result.leaked_pids == ()
    assert inventory.calls == 3 and clock.sleeps == [0.5, 0.5]


def test_wait_until_free_names_leaked_pids_at_the_deadline() -> None:
    inventory = FakeGpuInventory.scenario("foreign_pid", pid=4242, card=1)
    clock = FakeClock()
    result = wait_until_free(inventory, [0, 1], 2.0, poll_s=0.5, clock=clock, sleep=clock.sleep)
    assert not result.free
    assert result.leaked_pids == (4242,)
    assert result.held[0].card_index == 1 and result.held[0].used_memory_bytes == 20_480 * MIB
    assert result.waited_seconds == pytest.approx(2.0)


def test_wait_until_free_ignores_the_given_pids_and_cards_not_asked_for() -> None:
    inventory = FakeGpuInventory.scenario("foreign_pid", pid=4242, card=1)
    assert wait_until_free(inventory, [0], 0.0, clock=time.monotonic, sleep=time.sleep).free
    assert wait_until_free(inventory, [1], 0.0, ignore_pids=[4242], clock=time.monotonic, sleep=time.sleep).free


def test_wait_until_free_reports_cards_it_cannot_judge() -> None:
    lost = wait_until_free(
        FakeGpuInventory.scenario("gpu_lost", card=1), [0, 1], 0.0, clock=time.monotonic, sleep=time.sleep
    )
    assert not lost.free and lost.unknown_cards == (1,)
    busy_unlisted = FakeGpuInventory.of(make_device(0, processes=None, extra_used_mib=4096))
    assert wait_until_free(busy_unlisted, [0], 0.0, clock=time.monotonic, sleep=time.sleep).unknown_cards == (0,)
    idle_unlisted = FakeGpuInventory.of(make_device(0, processes=None, extra_used_mib=100))
    assert wait_until_free(idle_unlisted, [0], 0.0, clock=time.monotonic, sleep=time.sleep).free


def test_fake_scenarios_describe_what_their_names_say() -> None:
    two = FakeGpuInventory.scenario("two_free_sm120").snapshot()
    assert [d.arch for d in two.devices] == ["sm120", "sm120"]
    assert all(d.processes == () for d in two.devices)
    with pytest.raises(GpuUnavailable, match="libnvidia-ml"):
        FakeGpuInventory.scenario("no_driver").snapshot()
    assert FakeGpuInventory.scenario("gpu_lost").snapshot().devices[1].lost
    foreign = FakeGpuInventory.scenario("foreign_pid", mib=1024).snapshot().devices[0]
    assert foreign.processes == (GpuProcess(4242, 1024 * MIB),)
    assert foreign.memory_used_bytes == 1024 * MIB
    assert FakeGpuInventory.scenario("mig").snapshot().devices[0].mig_enabled is True
    unsupported = FakeGpuInventory.scenario("not_supported").snapshot().devices[0]
    assert unsupported.compute_capability is None and unsupported.processes is None
    with pytest.raises(ValueError, match="unknown GPU scenario"):
        FakeGpuInventory.scenario("three_cards")


def test_utilisation_is_read_per_card_and_not_supported_becomes_none() -> None:
    not_supported = pynvml.NVML_ERROR_NOT_SUPPORTED
    nvml = StubNvml(cards=[{"util": 37}, {"util": 90}], fail={("nvmlDeviceGetUtilizationRates", 1): not_supported})
    snapshot = NvmlInventory(nvml=nvml).snapshot()
    assert [d.utilization_percent for d in snapshot.devices] == [37, None]
    assert snapshot.devices[1].problem is None


def test_the_power_cap_is_read_in_watts_and_not_supported_becomes_none() -> None:
    not_supported = pynvml.NVML_ERROR_NOT_SUPPORTED
    nvml = StubNvml(cards=[{"power_mw": 250_500}, {}], fail={("nvmlDeviceGetEnforcedPowerLimit", 1): not_supported})
    snapshot = NvmlInventory(nvml=nvml).snapshot()
    assert [d.power_limit_w for d in snapshot.devices] == [250.5, None]
