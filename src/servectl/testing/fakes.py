"""Fakes of servectl's side-effect interfaces, for unit tests of the core (and of code built on servectl).

- :class:`FakeGpuInventory` with named scenarios: ``FakeGpuInventory.scenario("foreign_pid", mib=20480)``.
- :class:`FakeHostProbe`: listeners, pid -> container, memory, /dev/shm, disk, model folders.

The fake Docker engine is :class:`servectl.testing.docker.FakeDockerEngine`.

The real adapters (:class:`~servectl.adapters.gpu.NvmlInventory`, :class:`~servectl.adapters.host.PsutilHostProbe`,
:class:`~servectl.adapters.docker.DockerSdkEngine`) are tested against the real thing instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from servectl.adapters.gpu import MIB, GpuDevice, GpuProcess, GpuSnapshot
from servectl.adapters.host import DiskSpace, HostMemory, Listener, ModelDirInfo, ShmInfo
from servectl.errors import GpuUnavailable

GIB = 1024 * MIB

RTX_PRO_6000_NAME = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
RTX_PRO_6000_TOTAL_MIB = 97_887
"""What nvidia-smi reports as total memory for one RTX PRO 6000 Blackwell (96 GB) card."""
DRIVER_RESERVED_MIB = 487


def make_device(
    index: int,
    *,
    name: str = RTX_PRO_6000_NAME,
    compute_capability: tuple[int, int] | None = (12, 0),
    total_mib: int = RTX_PRO_6000_TOTAL_MIB,
    reserved_mib: int = DRIVER_RESERVED_MIB,
    processes: Sequence[GpuProcess] | None = (),
    extra_used_mib: int = 0,
    mig_enabled: bool | None = False,
    power_limit_w: float | None = 300.0,
) -> GpuDevice:
    """A healthy card; used memory is what its processes hold plus ``extra_used_mib``."""
    used = sum(p.used_memory_bytes or 0 for p in processes or ()) + extra_used_mib * MIB
    total = total_mib * MIB
    reserved = reserved_mib * MIB
    return GpuDevice(
        index=index,
        uuid=f"GPU-{index:08d}-fake-0000-0000-{index:012d}",
        name=name,
        compute_capability=compute_capability,
        memory_total_bytes=total,
        memory_used_bytes=used,
        memory_free_bytes=total - reserved - used,
        memory_reserved_bytes=reserved,
        processes=None if processes is None else tuple(processes),
        mig_enabled=mig_enabled,
        power_limit_w=power_limit_w,
    )


class FakeGpuInventory:
    """A :class:`~servectl.adapters.gpu.GpuInventory` that returns prepared snapshots.

    Args:
        snapshots: returned in order on each :meth:`snapshot` call; the last one repeats.
        error: when set, every call raises :class:`~servectl.errors.GpuUnavailable` with this text.
    """

    SCENARIOS: tuple[str, ...] = (
        "two_free_sm120",
        "no_driver",
        "gpu_lost",
        "foreign_pid",
        "mig",
        "not_supported",
    )

    def __init__(self, snapshots: Sequence[GpuSnapshot] = (), *, error: str | None = None) -> None:
        if not snapshots and error is None:
            raise ValueError("give at least one snapshot or an error")
        self._snapshots = tuple(snapshots)
        self._error = error
        self.calls = 0

    def snapshot(self) -> GpuSnapshot:
        """The next prepared snapshot (the last one repeats)."""
        self.calls += 1
        if self._error is not None:
            raise GpuUnavailable(self._error)
        return self._snapshots[min(self.calls - 1, len(self._snapshots) - 1)]

    @staticmethod
    def snapshot_of(devices: Iterable[GpuDevice], *, driver_version: str = "580.95.05") -> GpuSnapshot:
        """A snapshot holding these devices."""
        return GpuSnapshot(
            driver_version=driver_version,
            cuda_driver_version=(13, 0),
            devices=tuple(devices),
            taken_at=0.0,
            query_seconds=0.0,
        )

    @classmethod
    def of(cls, *devices: GpuDevice) -> FakeGpuInventory:
        """An inventory whose every snapshot holds these devices."""
        return cls([cls.snapshot_of(devices)])

    @classmethod
    def scenario(cls, name: str, **options: Any) -> FakeGpuInventory:
        """A named scenario, on two RTX PRO 6000 (sm120) cards unless said otherwise.

        - ``two_free_sm120``: two idle cards.
        - ``no_driver``: NVML cannot be loaded (``GpuUnavailable``).
        - ``gpu_lost``: card ``card`` (default 1) fell off the bus.
        - ``foreign_pid``: pid ``pid`` (default 4242) holds ``mib`` MiB (default 20,480) on card ``card``
          (default 0).
        - ``mig``: card ``card`` (default 0) has MIG on; the driver lists no per-process use there.
        - ``not_supported``: the driver reports memory but not compute capability, processes or MIG mode
          (as on WSL2 or old cards).

        Raises:
            ValueError: unknown scenario name.
        """
        if name == "two_free_sm120":
            return cls.of(make_device(0), make_device(1))
        if name == "no_driver":
            return cls(
                error=(
                    "NVML unavailable: NVML library (libnvidia-ml.so.1) not found: the NVIDIA driver is "
                    "not installed on this host; install the driver, or run on the GPU host (profiles "
                    "without GPUs need no driver)"
                )
            )
        if name == "gpu_lost":
            card = int(options.get("card", 1))
            devices = [make_device(i) for i in range(2)]
            devices[card] = GpuDevice.unreadable(
                card, lost=True, problem="GPU is lost (GPU is lost); reset the card or reboot"
            )
            return cls.of(*devices)
        if name == "foreign_pid":
            card = int(options.get("card", 0))
            pid = int(options.get("pid", 4242))
            mib = int(options.get("mib", 20_480))
            devices = [make_device(i) for i in range(2)]
            devices[card] = make_device(card, processes=[GpuProcess(pid=pid, used_memory_bytes=mib * MIB)])
            return cls.of(*devices)
        if name == "mig":
            card = int(options.get("card", 0))
            devices = [make_device(i) for i in range(2)]
            devices[card] = make_device(card, mig_enabled=True, processes=None)
            return cls.of(*devices)
        if name == "not_supported":
            return cls.of(
                *(make_device(i, compute_capability=None, processes=None, mig_enabled=None) for i in range(2))
            )
        raise ValueError(f"unknown GPU scenario {name!r}; known: {', '.join(cls.SCENARIOS)}")


def fake_model_dir(
    path: str,
    *,
    weights_bytes: int = 178 * 10**9,
    weight_files: int = 40,
    has_config_json: bool = True,
    revision: str | None = None,
    hf_repo_id: str | None = None,
    refs: Mapping[str, str] | None = None,
    local_dir_revision: str | None = None,
) -> ModelDirInfo:
    """A model folder as the host probe would report it (a Hugging Face snapshot when ``revision`` is set)."""
    return ModelDirInfo(
        path=path,
        exists=True,
        is_dir=True,
        has_config_json=has_config_json,
        weight_file_count=weight_files,
        weights_bytes=weights_bytes if weight_files else 0,
        hf_repo_id=hf_repo_id,
        hf_snapshot_revision=revision,
        hf_refs=dict(refs or {}),
        local_dir_revision=local_dir_revision,
    )


@dataclass
class FakeHostProbe:
    """A :class:`~servectl.adapters.host.HostProbe` with prepared answers; defaults describe a roomy, idle host.

    Attributes:
        listeners_by_port: port -> listeners.
        process_names: pid -> name.
        container_ids: pid -> container id.
        host_memory: RAM.
        shm_info: /dev/shm (``None``: none).
        disks: path -> room; other paths get ``default_disk_free_bytes``.
        models: path -> model folder; other paths do not exist (unless ``model_folders_from_disk``).
        executables: name -> path.
        existing_paths: paths that exist (for CDI spec files).
        model_folders_from_disk: a model folder not in ``models`` is read from the real file system (config and
            weight files), as the real probe does: profiles whose model folder a test made themselves pass.
    """

    listeners_by_port: dict[int, tuple[Listener, ...]] = field(default_factory=dict)
    process_names: dict[int, str] = field(default_factory=dict)
    container_ids: dict[int, str] = field(default_factory=dict)
    host_memory: HostMemory = field(default_factory=lambda: HostMemory(256 * GIB, 200 * GIB))
    shm_info: ShmInfo | None = field(default_factory=lambda: ShmInfo("/dev/shm", 128 * GIB, 128 * GIB))
    disks: dict[str, DiskSpace] = field(default_factory=dict)
    default_disk_free_bytes: int = 500 * GIB
    models: dict[str, ModelDirInfo] = field(default_factory=dict)
    executables: dict[str, str] = field(
        default_factory=lambda: {"nvidia-container-runtime-hook": "/usr/bin/nvidia-container-runtime-hook"}
    )
    existing_paths: set[str] = field(default_factory=set)
    model_folders_from_disk: bool = False

    def listeners(self, port: int) -> tuple[Listener, ...]:
        """Prepared listeners on ``port``."""
        return self.listeners_by_port.get(port, ())

    def listen(self, address: str, port: int, pid: int | None = None, name: str | None = None) -> None:
        """Add a listener."""
        self.listeners_by_port[port] = (*self.listeners(port), Listener(address, port, pid, name))
        if pid is not None and name is not None:
            self.process_names[pid] = name

    def process_name(self, pid: int) -> str | None:
        """Prepared name of ``pid``."""
        return self.process_names.get(pid)

    def container_id_of(self, pid: int) -> str | None:
        """Prepared container of ``pid``."""
        return self.container_ids.get(pid)

    def memory(self) -> HostMemory:
        """Prepared RAM."""
        return self.host_memory

    def shm(self) -> ShmInfo | None:
        """Prepared /dev/shm."""
        return self.shm_info

    def disk_space(self, path: str) -> DiskSpace:
        """Prepared room for ``path``."""
        if path in self.disks:
            return self.disks[path]
        return DiskSpace(
            path=path,
            checked_path=path,
            total_bytes=2 * self.default_disk_free_bytes,
            free_bytes=self.default_disk_free_bytes,
        )

    def model_dir(self, path: str) -> ModelDirInfo:
        """Prepared model folder, or a missing one."""
        if path in self.models:
            return self.models[path]
        if self.model_folders_from_disk:
            from servectl.adapters.host import PsutilHostProbe

            return PsutilHostProbe().model_dir(path)
        return ModelDirInfo(
            path=path, exists=False, is_dir=False, has_config_json=False, weight_file_count=0, weights_bytes=0
        )

    def find_executable(self, name: str) -> str | None:
        """Prepared executable path."""
        return self.executables.get(name)

    def path_exists(self, path: str) -> bool:
        """Whether the path was prepared as existing."""
        return path in self.existing_paths or path in self.models
