"""GPU inventory: what the NVIDIA driver says about each card, as plain values.

:class:`GpuInventory` is the interface the core takes; :class:`NvmlInventory` is the real one, built on
nvidia-ml-py (``pynvml``, imported lazily so that ``servectl --help`` never loads it). Fakes with named
scenarios live in :mod:`servectl.testing.fakes`.

Every NVML call goes through :func:`nvml_query`, which turns "this card or driver cannot tell" (not supported,
no permission, function missing in an old driver) into ``None``, so that an unknown field is an explicit
unknown instead of a crash. A card that fell off the bus ("GPU is lost") is reported on its
:class:`GpuDevice` (``lost=True``) rather than aborting the whole snapshot.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal, Protocol

from servectl.errors import GpuUnavailable

MIB = 1024 * 1024

ProcessKind = Literal["compute", "graphics"]


@dataclass(frozen=True)
class GpuProcess:
    """One process with a context on a card.

    ``used_memory_bytes`` is ``None`` where the driver cannot tell (Windows/WSL2 display driver model, MIG).
    """

    pid: int
    used_memory_bytes: int | None
    kind: ProcessKind = "compute"


@dataclass(frozen=True)
class GpuDevice:
    """One card as NVML sees it; any field the driver cannot report is ``None``.

    ``processes`` is ``None`` when the driver cannot list them at all (an empty tuple means "none running").
    ``memory_used_bytes`` excludes the memory the driver reserves for itself where the driver reports it
    separately (``memory_reserved_bytes``), as ``nvidia-smi`` shows it.
    """

    index: int
    uuid: str | None
    name: str | None
    compute_capability: tuple[int, int] | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    memory_free_bytes: int | None
    processes: tuple[GpuProcess, ...] | None
    mig_enabled: bool | None
    memory_reserved_bytes: int | None = None
    lost: bool = False
    problem: str | None = None
    utilization_percent: int | None = None  # busy share of the last sample period (``status --watch``)
    power_limit_w: float | None = None  # the enforced power cap (evidence host facts)

    @property
    def arch(self) -> str | None:
        """The architecture as ``sm<major><minor>`` (``sm120`` for compute capability 12.0), if known."""
        if self.compute_capability is None:
            return None
        major, minor = self.compute_capability
        return f"sm{major}{minor}"

    @classmethod
    def unreadable(cls, index: int, *, lost: bool, problem: str) -> GpuDevice:
        """A card the driver lists but cannot describe: every reading unknown, ``problem`` says why."""
        return cls(
            index=index,
            uuid=None,
            name=None,
            compute_capability=None,
            memory_total_bytes=None,
            memory_used_bytes=None,
            memory_free_bytes=None,
            processes=None,
            mig_enabled=None,
            lost=lost,
            problem=problem,
        )


@dataclass(frozen=True)
class GpuSnapshot:
    """All cards at one moment, with the time the query took."""

    driver_version: str | None
    cuda_driver_version: tuple[int, int] | None
    devices: tuple[GpuDevice, ...]
    taken_at: float = field(default_factory=time.time)
    query_seconds: float = 0.0

    def device(self, index: int) -> GpuDevice | None:
        """The card with this NVML index, or ``None`` when there is none."""
        for device in self.devices:
            if device.index == index:
                return device
        return None


class GpuInventory(Protocol):
    """Reads the cards. Raises :class:`~servectl.errors.GpuUnavailable` when no driver can be reached."""

    def snapshot(self) -> GpuSnapshot:
        """Query every card once."""
        ...


class NullGpuInventory:
    """The inventory that reads no card, by choice: a profile that needs none, a command that reads none, a
    context built without NVML. Every figure is unknown: :meth:`snapshot` raises
    :class:`~servectl.errors.GpuUnavailable` saying why; preflight reports the cards' checks unknown (not failed:
    nothing was asked of a driver) and stops do not wait on it (:func:`reads_cards`)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def snapshot(self) -> GpuSnapshot:
        raise GpuUnavailable(self.reason)

    def __repr__(self) -> str:
        return f"NullGpuInventory({self.reason!r})"


class OpenedWhenRead:
    """An inventory opened at its first read and asked once then (the Context's own NVML): a command that reads
    no card opens no driver. When that first read raises :class:`~servectl.errors.GpuUnavailable` (no driver
    here), every later read raises it again and :func:`reads_cards` is false; :meth:`close` closes what was
    opened.

    Args:
        open_inventory: builds the inventory (``NvmlInventory``), called at most once.
    """

    def __init__(self, open_inventory: Callable[[], GpuInventory]) -> None:
        self._open = open_inventory
        self._opened: GpuInventory | None = None
        self._unavailable: str | None = None
        self._answered = False

    def answers(self) -> bool:
        """Whether a driver answers here (asks it now, once, if nothing has been read yet)."""
        if not self._answered and self._unavailable is None:
            with contextlib.suppress(GpuUnavailable):
                self.snapshot()
        return self._answered

    def snapshot(self) -> GpuSnapshot:
        if self._unavailable is not None:
            raise GpuUnavailable(self._unavailable)
        if self._opened is None:
            self._opened = self._open()
        try:
            snapshot = self._opened.snapshot()
        except GpuUnavailable as err:
            if not self._answered:  # never answered: no driver here, not asked again
                self._unavailable = err.message
            raise
        self._answered = True
        return snapshot

    def close(self) -> None:
        close = getattr(self._opened, "close", None)
        if close is not None:
            close()

    def __repr__(self) -> str:
        return f"OpenedWhenRead({self._opened!r})"


def reads_cards(gpus: GpuInventory) -> bool:
    """Whether ``gpus`` reads cards: every inventory but :class:`NullGpuInventory` and an :class:`OpenedWhenRead`
    whose driver does not answer (asked now if it was not yet). What stops wait on: ask it only for a service
    that holds cards, so that one on none opens no driver."""
    if isinstance(gpus, OpenedWhenRead):
        return gpus.answers()
    return not isinstance(gpus, NullGpuInventory)


_ARCH_RE = re.compile(r"^(?:sm_?)?(\d+)(?:\.(\d+))?[a-z]?$", re.IGNORECASE)


def compute_capability_of_arch(arch: str) -> tuple[int, int]:
    """``sm120``/``sm_120``/``12.0`` -> ``(12, 0)``; ``sm89`` -> ``(8, 9)``; ``sm_90a`` -> ``(9, 0)``.

    Raises:
        ValueError: the text is not an architecture name.
    """
    match = _ARCH_RE.match(arch.strip())
    if not match:
        raise ValueError(f"not a GPU architecture: {arch!r} (expected e.g. 'sm120' or '12.0')")
    digits, minor = match.group(1), match.group(2)
    if minor is not None:
        return int(digits), int(minor)
    if len(digits) < 2:
        raise ValueError(f"not a GPU architecture: {arch!r} (expected e.g. 'sm120' or '12.0')")
    return int(digits[:-1]), int(digits[-1])


# ---------------------------------------------------------------------------------------------------------
# NVML


class _DeviceLost(Exception):
    """Internal: NVML says the card is gone or needs a reset."""


class _DeviceQueryFailed(Exception):
    """Internal: an NVML call failed in a way that is neither "unknown" nor "lost"."""


def _codes(nvml: Any, *names: str) -> frozenset[int]:
    return frozenset(int(getattr(nvml, name)) for name in names if hasattr(nvml, name))


def nvml_query(nvml: Any, function: str, *args: Any, **kwargs: Any) -> Any:
    """Call one NVML function; the one place where NVML errors are sorted.

    Returns ``None`` when the card, driver or binding cannot tell (not supported, no permission, function
    missing, no data, version mismatch): an explicit unknown. Raises an internal "device lost" error for
    a card that fell off the bus or needs a reset, and an internal "query failed" error for anything else,
    so that one bad card never aborts the snapshot of the others.
    """
    fn = getattr(nvml, function, None)
    if fn is None:  # an older nvidia-ml-py without this function
        return None
    try:
        return fn(*args, **kwargs)
    except nvml.NVMLError as err:
        code = int(getattr(err, "value", -1))
        if code in _codes(nvml, "NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_RESET_REQUIRED"):
            raise _DeviceLost(str(err)) from err
        unknown = _codes(
            nvml,
            "NVML_ERROR_NOT_SUPPORTED",
            "NVML_ERROR_NO_PERMISSION",
            "NVML_ERROR_FUNCTION_NOT_FOUND",
            "NVML_ERROR_NO_DATA",
            "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
            "NVML_ERROR_DEPRECATED",
            "NVML_ERROR_NOT_READY",
            "NVML_ERROR_INVALID_ARGUMENT",  # e.g. a MIG query on a card without MIG
        )
        if code in unknown:
            return None
        raise _DeviceQueryFailed(f"{function}: {err}") from err


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _unavailable_message(nvml: Any, err: Exception) -> str:
    code = int(getattr(err, "value", -1))
    reasons: dict[str, str] = {
        "NVML_ERROR_LIBRARY_NOT_FOUND": (
            "NVML library (libnvidia-ml.so.1) not found: the NVIDIA driver is not installed on this host; "
            "install the driver, or run on the GPU host (profiles without GPUs need no driver)"
        ),
        "NVML_ERROR_DRIVER_NOT_LOADED": (
            "the NVIDIA kernel driver is not loaded; load it (sudo modprobe nvidia) or reboot, "
            "then check with nvidia-smi"
        ),
        "NVML_ERROR_LIB_RM_VERSION_MISMATCH": (
            "the NVIDIA driver library and kernel module versions differ (driver updated without reboot); "
            "reboot, then check with nvidia-smi"
        ),
        "NVML_ERROR_NO_PERMISSION": (
            "no permission to open the NVIDIA device files (/dev/nvidia*); run as a user in the video group or as root"
        ),
    }
    for name, message in reasons.items():
        if hasattr(nvml, name) and code == int(getattr(nvml, name)):
            return f"NVML unavailable: {message}"
    return f"NVML unavailable: {err}; check the driver with nvidia-smi"


def _import_pynvml() -> ModuleType:
    try:
        import pynvml  # type: ignore[import-untyped]  # nvidia-ml-py ships no type information
    except ImportError as err:
        raise GpuUnavailable(
            "NVML unavailable: the Python package nvidia-ml-py is not installed; "
            "install it with: pip install nvidia-ml-py"
        ) from err
    module: ModuleType = pynvml
    return module


class NvmlInventory:
    """The real :class:`GpuInventory`: NVML through nvidia-ml-py.

    NVML is initialised on the first :meth:`snapshot` and stays initialised until :meth:`close`, so that
    polling (``wait_until_free``) pays the initialisation once.

    Args:
        nvml: a module with pynvml's interface; ``None`` imports ``pynvml`` on first use (tests pass their
            own to drive the error paths).
    """

    def __init__(self, *, nvml: Any | None = None) -> None:
        self._nvml = nvml
        self._initialised = False

    def __enter__(self) -> NvmlInventory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ensure_initialised(self) -> Any:
        if self._nvml is None:
            self._nvml = _import_pynvml()
        nvml = self._nvml
        if not self._initialised:
            try:
                nvml.nvmlInit()
            except nvml.NVMLError as err:
                raise GpuUnavailable(_unavailable_message(nvml, err)) from err
            except OSError as err:  # a broken library file
                raise GpuUnavailable(f"NVML unavailable: cannot load the NVIDIA library: {err}") from err
            self._initialised = True
        return nvml

    def close(self) -> None:
        """Shut NVML down if this inventory initialised it."""
        if self._initialised and self._nvml is not None:
            # shutting down a driver that went away is not worth an error
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()
            self._initialised = False

    def snapshot(self) -> GpuSnapshot:
        """Query every card once.

        Raises:
            GpuUnavailable: NVML cannot be loaded or initialised, or cannot count the cards.
        """
        nvml = self._ensure_initialised()
        started = time.perf_counter()
        taken_at = time.time()
        try:
            driver_version = _text(nvml_query(nvml, "nvmlSystemGetDriverVersion"))
            cuda = nvml_query(nvml, "nvmlSystemGetCudaDriverVersion")
            count = nvml_query(nvml, "nvmlDeviceGetCount")
        except (_DeviceLost, _DeviceQueryFailed) as err:
            raise GpuUnavailable(f"NVML unavailable: {err}; check the driver with nvidia-smi") from err
        if count is None:
            raise GpuUnavailable("NVML unavailable: the driver cannot count its GPUs; check nvidia-smi")
        cuda_version = (int(cuda) // 1000, (int(cuda) % 1000) // 10) if cuda is not None else None
        devices = tuple(self._device(nvml, index) for index in range(int(count)))
        return GpuSnapshot(
            driver_version=driver_version,
            cuda_driver_version=cuda_version,
            devices=devices,
            taken_at=taken_at,
            query_seconds=time.perf_counter() - started,
        )

    def _device(self, nvml: Any, index: int) -> GpuDevice:
        try:
            return self._read_device(nvml, index)
        except _DeviceLost as err:
            return GpuDevice.unreadable(index, lost=True, problem=f"GPU is lost ({err}); reset the card or reboot")
        except _DeviceQueryFailed as err:
            return GpuDevice.unreadable(index, lost=False, problem=f"NVML query failed: {err}")

    def _read_device(self, nvml: Any, index: int) -> GpuDevice:
        handle = nvml_query(nvml, "nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            return GpuDevice.unreadable(index, lost=False, problem="NVML gives no handle for this index")
        uuid = _text(nvml_query(nvml, "nvmlDeviceGetUUID", handle))
        name = _text(nvml_query(nvml, "nvmlDeviceGetName", handle))
        capability = nvml_query(nvml, "nvmlDeviceGetCudaComputeCapability", handle)
        total, used, free, reserved = _memory(nvml, handle)
        mig = nvml_query(nvml, "nvmlDeviceGetMigMode", handle)
        mig_enabled = None if mig is None else int(mig[0]) == int(getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1))
        rates = nvml_query(nvml, "nvmlDeviceGetUtilizationRates", handle)
        power_mw = nvml_query(nvml, "nvmlDeviceGetEnforcedPowerLimit", handle)
        return GpuDevice(
            index=index,
            uuid=uuid,
            name=name,
            compute_capability=(int(capability[0]), int(capability[1])) if capability is not None else None,
            memory_total_bytes=total,
            memory_used_bytes=used,
            memory_free_bytes=free,
            memory_reserved_bytes=reserved,
            processes=_processes(nvml, handle),
            mig_enabled=mig_enabled,
            utilization_percent=int(rates.gpu) if rates is not None and hasattr(rates, "gpu") else None,
            power_limit_w=int(power_mw) / 1000 if power_mw is not None else None,
        )


def _memory(nvml: Any, handle: Any) -> tuple[int | None, int | None, int | None, int | None]:
    """(total, used, free, reserved) in bytes; version 2 keeps the driver's reservation out of "used"."""
    version2 = getattr(nvml, "nvmlMemory_v2", None)
    if version2 is not None:
        info = nvml_query(nvml, "nvmlDeviceGetMemoryInfo", handle, version=version2)
        if info is not None:
            return int(info.total), int(info.used), int(info.free), int(info.reserved)
    info = nvml_query(nvml, "nvmlDeviceGetMemoryInfo", handle)
    if info is None:
        return None, None, None, None
    return int(info.total), int(info.used), int(info.free), None


def _used_bytes(value: Any, nvml: Any) -> int | None:
    if value is None:
        return None
    not_available = getattr(nvml, "NVML_VALUE_NOT_AVAILABLE_ulonglong", None)
    if not_available is not None and int(value) == int(not_available.value):
        return None
    return int(value)


def _processes(nvml: Any, handle: Any) -> tuple[GpuProcess, ...] | None:
    compute = nvml_query(nvml, "nvmlDeviceGetComputeRunningProcesses", handle)
    graphics = nvml_query(nvml, "nvmlDeviceGetGraphicsRunningProcesses", handle)
    if compute is None and graphics is None:
        return None
    seen: dict[int, GpuProcess] = {}
    lists: tuple[tuple[ProcessKind, Any], ...] = (("compute", compute or ()), ("graphics", graphics or ()))
    for kind, entries in lists:
        for entry in entries:
            pid = int(entry.pid)
            if pid not in seen:  # a process with both kinds of context counts once, as compute
                seen[pid] = GpuProcess(pid=pid, used_memory_bytes=_used_bytes(entry.usedGpuMemory, nvml), kind=kind)
    return tuple(sorted(seen.values(), key=lambda p: p.pid))


# ---------------------------------------------------------------------------------------------------------
# Waiting for cards to empty (down / swap)


@dataclass(frozen=True)
class CardProcess:
    """A process still holding a card."""

    card_index: int
    pid: int
    used_memory_bytes: int | None


@dataclass(frozen=True)
class WaitResult:
    """What :func:`wait_until_free` saw last.

    ``held`` lists processes still on the cards; ``unknown_cards`` the cards whose state could not be read
    (missing, lost, or a driver that cannot list processes while memory is still in use).
    """

    free: bool
    held: tuple[CardProcess, ...]
    unknown_cards: tuple[int, ...]
    waited_seconds: float

    @property
    def leaked_pids(self) -> tuple[int, ...]:
        """The pids still holding the cards, each once."""
        return tuple(sorted({p.pid for p in self.held}))


IDLE_USED_BYTES = 1024 * MIB
"""Used memory under which a card whose processes the driver cannot list counts as empty."""


def _holders(
    snapshot: GpuSnapshot, indices: Iterable[int], ignore_pids: frozenset[int], idle_used_bytes: int
) -> tuple[tuple[CardProcess, ...], tuple[int, ...]]:
    held: list[CardProcess] = []
    unknown: list[int] = []
    for index in indices:
        device = snapshot.device(index)
        if device is None or device.lost:
            unknown.append(index)
            continue
        if device.processes is None:
            if device.memory_used_bytes is None or device.memory_used_bytes > idle_used_bytes:
                unknown.append(index)
            continue
        held.extend(
            CardProcess(card_index=index, pid=p.pid, used_memory_bytes=p.used_memory_bytes)
            for p in device.processes
            if p.pid not in ignore_pids
        )
    return tuple(held), tuple(unknown)


def wait_until_free(
    inventory: GpuInventory,
    indices: Iterable[int],
    deadline_s: float,
    *,
    poll_s: float = 0.5,
    ignore_pids: Iterable[int] = (),
    idle_used_bytes: int = IDLE_USED_BYTES,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> WaitResult:
    """Wait until the given cards hold no process, or ``deadline_s`` seconds have passed.

    Used after stopping a service: a container can be gone while its CUDA contexts are still being torn down.

    Args:
        inventory: where to read the cards.
        indices: NVML indices of the cards to watch.
        deadline_s: how long to wait at most, in seconds from now.
        poll_s: pause between two snapshots.
        ignore_pids: processes that may stay (e.g. a monitor the user runs).
        idle_used_bytes: for drivers that cannot list processes, used memory under which a card is empty.
        clock: monotonic clock (tests pass a fake one).
        sleep: pause function (tests pass a fake one).

    Returns:
        The last state seen; ``leaked_pids`` names what still holds the cards when ``free`` is false.
    """
    cards = tuple(indices)
    ignored = frozenset(ignore_pids)
    started = clock()
    while True:
        held, unknown = _holders(inventory.snapshot(), cards, ignored, idle_used_bytes)
        waited = clock() - started
        if not held and not unknown:
            return WaitResult(free=True, held=(), unknown_cards=(), waited_seconds=waited)
        if waited >= deadline_s:
            return WaitResult(free=False, held=held, unknown_cards=unknown, waited_seconds=waited)
        sleep(min(poll_s, max(0.0, deadline_s - waited)))
