"""Checks of the host: the port, the network mode, the model folder, shared memory, memory and disk."""

from __future__ import annotations

from typing import Any

from servectl.adapters.gpu import MIB
from servectl.adapters.host import HostMemory, addresses_overlap
from servectl.preflight.checks.base import make_result
from servectl.preflight.facts import Facts, classify_process, to_mib
from servectl.preflight.model import GIB, CheckResult, PreflightRequest


def _owner_of_port(request: PreflightRequest, facts: Facts) -> tuple[list[dict[str, Any]], list[str]]:
    """Listeners and Docker published ports that collide with the wanted address and port."""
    owners: list[dict[str, Any]] = []
    problems: list[str] = []
    publishers = [
        (c, p)
        for c in facts.containers
        for p in c.ports
        if p.host_port == request.port and p.protocol == "tcp" and addresses_overlap(request.host_address, p.host_ip)
    ]
    publisher_ids = {c.id for c, _ in publishers}
    for c, p in publishers:
        disposition = classify_process(request, c, c.id, -1)
        owners.append(
            {
                "kind": "container",
                "container_id": c.short_id,
                "container_name": c.name,
                "host_ip": p.host_ip,
                "port": p.host_port,
                "disposition": disposition,
            }
        )
        if disposition == "foreign":
            problems.append(f"container {c.name} ({c.short_id}) publishes {p.host_ip}:{p.host_port}")
    for listener in facts.listeners:
        if not addresses_overlap(request.host_address, listener.address):
            continue
        if publisher_ids and (listener.process_name == "docker-proxy" or listener.pid is None):
            # Docker's userland proxy for a container already named above, by the ports the Docker API says it
            # publishes: a process this user cannot name (the gateway container, not root) is that proxy too
            continue
        replacing = request.replacing
        is_replaced = replacing is not None and listener.pid is not None and listener.pid in replacing.pids
        owners.append(
            {
                "kind": "process",
                "address": listener.address,
                "port": listener.port,
                "pid": listener.pid,
                "process_name": listener.process_name,
                "disposition": "replacing" if is_replaced else "foreign",
            }
        )
        if not is_replaced:
            who = (
                f"pid {listener.pid} {listener.process_name or '?'}"
                if listener.pid is not None
                else "a process of another user (run as root to name it)"
            )
            problems.append(f"{who} listens on {listener.address}:{listener.port}")
    return owners, problems


def check_port_free(request: PreflightRequest, facts: Facts) -> CheckResult:
    """Nothing listens on the profile's host address and port (any listener, not only Docker's)."""
    owners, problems = _owner_of_port(request, facts)
    out = {"host_address": request.host_address, "port": request.port, "owners": owners}
    if problems:
        in_the_way = {o.get("container_id") for o in owners if o["disposition"] == "foreign"}
        ours = sorted({c.servectl_profile for c in facts.containers if c.servectl_profile and c.short_id in in_the_way})
        fix = "stop that service, or choose another port in the profile"
        if ours:  # a servectl service publishes it: the services check says so too
            fix = f"use servectl swap {request.profile_name} (or servectl down {ours[0]}), or choose another port"
        return make_result("port.free", "fail", "; ".join(problems), fix, **out)
    if facts.engine is None and facts.engine_error:
        return make_result(
            "port.free",
            "pass",
            f"{request.host_address}:{request.port} has no listener (Docker unreachable: published ports not checked)",
            **out,
        )
    note = " (held by the service being replaced)" if owners else ""
    return make_result("port.free", "pass", f"{request.host_address}:{request.port} is free{note}", **out)


def check_env_set(request: PreflightRequest, facts: Facts) -> CheckResult:
    """Every variable the service takes from servectl's environment at start is set (names only, never values)."""
    missing = list(request.unset_references)
    if not missing:
        return make_result("env.set", "pass", "every variable the profile passes from the environment is set")
    names = list(dict.fromkeys(var for _, var in missing))
    names_it = ("serve.api_key_env", "serve.admin_api_key_env")
    where = "; ".join(
        f"{field} names it" if field in names_it else f"{field} passes ${{{var}}}" for field, var in missing
    )
    return make_result(
        "env.set",
        "fail",
        f"not set in servectl's environment: {', '.join(names)} ({where})",
        f"export {' '.join(f'{n}=...' for n in names)} in the shell that runs servectl (or remove the reference)",
        unset=names,
    )


def check_port_role(request: PreflightRequest, facts: Facts) -> CheckResult:
    """A bench profile never takes a production port; a production profile takes one."""
    out = {"role": request.role, "port": request.port, "production_ports": list(request.production_ports)}
    on_production = request.port in request.production_ports
    if request.role == "bench" and on_production:
        return make_result(
            "port.role",
            "fail",
            f"bench profile on production port {request.port}: it would take real user traffic",
            "use a bench port (e.g. 8180)",
            **out,
        )
    if request.role == "production" and not on_production:
        return make_result(
            "port.role",
            "fail",
            f"production profile on port {request.port}, not a production port "
            f"{list(request.production_ports)}: clients would not reach it",
            f"use port {request.production_ports[0] if request.production_ports else 8080}",
            **out,
        )
    return make_result("port.role", "pass", f"{request.role} profile on port {request.port}", **out)


def check_network_mode(request: PreflightRequest, facts: Facts) -> CheckResult:
    """SGLang's internal ports stay inside the container unless the profile asks for host networking."""
    out = {"network_mode": request.network_mode, "host_network_reason": request.host_network_reason}
    if request.network_mode == "bridge":
        return make_result(
            "network.mode",
            "pass",
            f"bridge network; only {request.host_address}:{request.port} is published",
            **out,
        )
    if not request.host_network_reason:
        return make_result(
            "network.mode",
            "fail",
            "host networking without a reason: SGLang's internal ports would open on the host",
            "use the bridge network, or give the profile's reason for host networking",
            **out,
        )
    return make_result(
        "network.mode",
        "warn",
        f"host networking: {request.host_network_reason}; SGLang's "
        "internal ports (NCCL, scheduler, tokenizer) open on the host",
        **out,
    )


def check_model_present(request: PreflightRequest, facts: Facts) -> CheckResult:
    """The model folder exists and holds config.json and weight files."""
    model = facts.model
    if model is None:
        return make_result("model.present", "fail", "no model path in the request", "set the profile's model path")
    out: dict[str, Any] = {
        "path": model.path,
        "exists": model.exists,
        "has_config_json": model.has_config_json,
        "weight_files": model.weight_file_count,
        "weights_bytes": model.weights_bytes,
        "weights_gib": round(model.weights_bytes / GIB, 2),
        "hf_repo_id": model.hf_repo_id,
    }
    if not model.exists:
        return make_result(
            "model.present",
            "fail",
            f"model folder {model.path} does not exist",
            "download the model there (hf download REPO --local-dir PATH) or fix the path",
            **out,
        )
    if not model.is_dir:
        return make_result(
            "model.present",
            "fail",
            f"model path {model.path} is not a folder",
            "point the profile at the folder that holds config.json",
            **out,
        )
    missing = [
        what
        for what, ok in (
            ("config.json", model.has_config_json),
            ("weight files", model.weight_file_count > 0),
        )
        if not ok
    ]
    if missing:
        return make_result(
            "model.present",
            "fail",
            f"model folder {model.path} has no {' and no '.join(missing)}",
            "finish the download (hf download resumes) or fix the path",
            **out,
        )
    return make_result(
        "model.present",
        "pass",
        f"{model.weight_file_count} weight file(s), {model.weights_bytes / GIB:,.1f} GiB in {model.path}",
        **out,
    )


def check_host_shm(request: PreflightRequest, facts: Facts) -> CheckResult:
    """Enough shared memory for NCCL between ranks when TP x DP > 1."""
    ranks = request.tp * request.dp
    shm = facts.shm
    out: dict[str, Any] = {
        "ranks": ranks,
        "ipc_host": request.ipc_host,
        "container_shm_mib": None if request.shm_size_bytes is None else to_mib(request.shm_size_bytes),
        "min_shm_mib": to_mib(request.min_shm_bytes),
        "host_shm_total_mib": None if shm is None else to_mib(shm.total_bytes),
        "host_shm_free_mib": None if shm is None else to_mib(shm.free_bytes),
    }
    if ranks <= 1 or not request.gpus_requested:
        return make_result("host.shm", "pass", "single rank: no shared memory needed between ranks", **out)
    if request.ipc_host:
        if shm is None:
            return make_result(
                "host.shm",
                "fail",
                "ipc host but the host has no /dev/shm",
                "mount a tmpfs on /dev/shm",
                **out,
            )
        if shm.free_bytes < request.min_shm_bytes:
            return make_result(
                "host.shm",
                "fail",
                f"ipc host; /dev/shm has {to_mib(shm.free_bytes):,} MiB free, "
                f"needs {to_mib(request.min_shm_bytes):,} MiB",
                "free /dev/shm (stale NCCL segments) or enlarge it",
                **out,
            )
        return make_result("host.shm", "pass", f"ipc host; /dev/shm has {to_mib(shm.free_bytes):,} MiB free", **out)
    size = request.shm_size_bytes if request.shm_size_bytes is not None else 64 * MIB
    if size < request.min_shm_bytes:
        return make_result(
            "host.shm",
            "fail",
            f"{ranks} ranks with a {to_mib(size):,} MiB container /dev/shm "
            f"(needs {to_mib(request.min_shm_bytes):,} MiB)",
            "set shm size in the profile (e.g. 32g) or use ipc host",
            **out,
        )
    return make_result("host.shm", "pass", f"container /dev/shm {to_mib(size):,} MiB for {ranks} ranks", **out)


def check_host_memory(request: PreflightRequest, facts: Facts) -> CheckResult:
    """Enough available host RAM for the engine's host-side buffers."""
    mem = facts.memory
    needed = request.min_host_memory_available_bytes + request.host_memory_extra_bytes
    if mem is None:
        return make_result("host.memory", "unknown", "cannot read host memory")
    out = {
        "total_mib": to_mib(mem.total_bytes),
        "available_mib": to_mib(mem.available_bytes),
        "needed_mib": to_mib(needed),
    }
    if mem.available_bytes < needed:
        return make_result(
            "host.memory",
            "fail",
            f"{to_mib(mem.available_bytes):,} MiB host RAM available, needs {to_mib(needed):,} MiB",
            "stop other services, or lower the host cache size in the profile",
            **out,
        )
    return make_result(
        "host.memory",
        "pass",
        f"{mem.available_bytes / GIB:,.1f} GiB of {mem.total_bytes / GIB:,.1f} GiB available",
        **out,
    )


def standby_ram_shortfall(weights_bytes: int, memory: HostMemory, keep_bytes: int) -> str | None:
    """Why host RAM cannot take a warm standby's CPU copy of the weights (None: it can): the one home of it.

    The copy (``--enable-weights-cpu-backup``) is the model's weights, all ranks together: their size on disk.
    ``keep_bytes`` is the available RAM that must stay free besides it.
    """
    if memory.available_bytes >= weights_bytes + keep_bytes:
        return None
    return (
        f"the CPU copy of the weights needs {to_mib(weights_bytes):,} MiB host RAM (their size on disk) plus "
        f"{to_mib(keep_bytes):,} MiB kept free, but {to_mib(memory.available_bytes):,} MiB are available"
    )


#: Why ``RLIMIT_MEMLOCK`` does not bound the pinned CPU copy: torch_memory_saver 0.0.10 allocates it with
#: ``cudaMallocHost`` (``csrc/cpu_backup.h`` ``cpu_backuper::allocate``, kind ``PINNED``, the default), and the
#: NVIDIA driver pins host pages without charging the limit: its kernel module never reads ``RLIMIT_MEMLOCK`` nor
#: counts ``locked_vm`` (open-gpu-kernel-modules 595.45.04: ``kernel-open/nvidia/nv-vm.c``
#: ``nv_alloc_system_pages`` allocates the pages itself, ``kernel-open/nvidia/os-mlock.c`` ``os_lock_user_pages``
#: pins with ``get_user_pages``, neither checks a limit).
MEMLOCK_WHY = (
    "CUDA's pinned host memory (cudaMallocHost, torch_memory_saver csrc/cpu_backup.h) is not charged to "
    "RLIMIT_MEMLOCK by the NVIDIA driver (kernel-open/nvidia/nv-vm.c, os-mlock.c)"
)


def _memlock_words(request: PreflightRequest) -> str:
    """The engine container's memlock limit and what it means for the pinned copy (a note, never a refusal)."""
    if request.memlock is None:
        limit = "memlock: the Docker engine's default (its default-ulimits, else its own limit)"
    else:
        soft = request.memlock[0]
        shown = "unlimited" if soft < 0 else f"{soft // 1024:,} KiB"
        limit = f"memlock {shown} ({request.memlock_source})"
    return f"{limit} does not bound it: {MEMLOCK_WHY}"


def _copies(request: PreflightRequest, new_bytes: int) -> tuple[int, list[str], list[str]]:
    """Host RAM the pinned CPU copies will take beyond what is in use now: ``(bytes, what will take it, what
    holds it already)``. The new service's copy; a running retained one not paid yet (pinned at its first
    release, then for as long as it runs); the service this start replaces when it takes a copy at its release.
    A copy held now (a retained buffer already paid, or one on standby) is in use: named, not counted again."""
    coming: list[str] = []
    held: list[str] = []
    total = new_bytes
    if new_bytes:
        how = "pinned for as long as it runs" if request.standby_retained else "while it is released"
        coming.append(f"{request.profile_name} {to_mib(new_bytes):,} MiB ({how})")
    replacing = request.replacing
    for s in request.services:
        if not s.backup_bytes or s.backup_hold is None or s.profile == request.profile_name:
            continue
        replaced = replacing is not None and replacing.matches(container_id=s.container_id)
        if s.backup_hold == "held":
            held.append(f"{s.profile} holds {to_mib(s.backup_bytes):,} MiB")
        elif s.backup_hold == "to-pin":
            total += s.backup_bytes
            coming.append(f"{s.profile} {to_mib(s.backup_bytes):,} MiB (retained, pinned at its first release)")
        elif replaced:
            total += s.backup_bytes
            coming.append(f"{s.profile} {to_mib(s.backup_bytes):,} MiB (released by this swap)")
    return total, coming, held


def check_standby_ram(request: PreflightRequest, facts: Facts) -> CheckResult:
    """The pinned CPU copies of the weights fit in host RAM (``swap.standby: warm``): this service's, the running
    retained ones not paid yet and the one this swap releases, beside the reserve kept free (waivable with
    ``swap.standby_ram_waiver``). The engine's memlock limit is a note: it does not bound CUDA's pinned memory."""
    if not request.standby_warm:
        return make_result("host.standby_ram", "pass", "no warm standby (swap.standby: none)")
    mem, model = facts.memory, facts.model
    if mem is None or model is None or not model.exists:
        return make_result("host.standby_ram", "unknown", "cannot read host memory or the model's size on disk")
    need, coming, held = _copies(request, model.weights_bytes)
    reserve = request.min_host_memory_available_bytes
    memlock = _memlock_words(request)
    out = {
        "weights_mib": to_mib(model.weights_bytes),
        "copies_mib": to_mib(need),
        "available_mib": to_mib(mem.available_bytes),
        "keep_free_mib": to_mib(reserve),
        "waived": request.standby_ram_waiver is not None,
        "waiver_reason": request.standby_ram_waiver,
        "coming": coming,
        "held": held,
        "memlock": None if request.memlock is None else list(request.memlock),
        "memlock_note": memlock,
        "retained": request.standby_retained,
    }
    counted = "; ".join(coming) + (f"; already in use: {', '.join(held)}" if held else "")
    fix = (
        f"stop a warm service, set swap.standby_retain_backup: false (the copy is then held only while released) "
        f"or swap.standby: none in {request.profile_name}'s profile"
    )
    if mem.available_bytes < need:
        return make_result(
            "host.standby_ram",
            "fail",
            f"host RAM cannot hold the CPU copies of the weights: {counted}; {to_mib(need):,} MiB needed, "
            f"{to_mib(mem.available_bytes):,} MiB available",
            fix,
            **out,
        )
    if mem.available_bytes < need + reserve and request.standby_ram_waiver is None:
        return make_result(
            "host.standby_ram",
            "fail",
            f"the CPU copies of the weights leave less than {to_mib(reserve):,} MiB of host RAM free: {counted}; "
            f"{to_mib(need):,} MiB needed, {to_mib(mem.available_bytes):,} MiB available",
            f"{fix}, or waive the reserve with swap.standby_ram_waiver: <why>",
            **out,
        )
    waived = f"; reserve waived: {request.standby_ram_waiver}" if mem.available_bytes < need + reserve else ""
    return make_result(
        "host.standby_ram",
        "pass",
        f"CPU copies of the weights {need / GIB:,.1f} GiB fit in {mem.available_bytes / GIB:,.1f} GiB available "
        f"({counted}){waived}; {memlock}",
        **out,
    )


def check_host_disk(request: PreflightRequest, facts: Facts) -> CheckResult:
    """Enough free disk where the caches go."""
    if not facts.disks:
        return make_result("host.disk", "pass", "no cache folders to check")
    rows = [
        {
            "path": d.path,
            "checked_path": d.checked_path,
            "free_mib": to_mib(d.free_bytes),
            "total_mib": to_mib(d.total_bytes),
        }
        for d in facts.disks
    ]
    short = [d for d in facts.disks if d.free_bytes < request.min_cache_free_bytes]
    out = {"paths": rows, "min_free_mib": to_mib(request.min_cache_free_bytes)}
    if short:
        text = "; ".join(f"{d.path}: {d.free_bytes / GIB:,.1f} GiB free" for d in short)
        return make_result(
            "host.disk",
            "fail",
            f"{text} (needs {request.min_cache_free_bytes / GIB:,.0f} GiB)",
            "free disk space or move the cache folder",
            **out,
        )
    text = "; ".join(f"{d.path}: {d.free_bytes / GIB:,.1f} GiB free" for d in facts.disks)
    return make_result("host.disk", "pass", text, **out)
