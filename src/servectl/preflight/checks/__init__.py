"""Every preflight check, by id and in report order, and running them on gathered facts.

Each check is a pure function of a :class:`~servectl.preflight.model.PreflightRequest` and the
:class:`~servectl.preflight.facts.Facts` measured once; the checks live by subject: :mod:`.gpu`, :mod:`.host`,
:mod:`.docker`, :mod:`.services` (the container name, other services on the port or cards) and :mod:`.pins`
(what the profile pins: status, image digest, model revision). A new check is
a function in one of those modules plus one line in :data:`CHECKS` (and its title in
:data:`~servectl.preflight.checks.base.TITLES`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import replace

from servectl.errors import UsageError
from servectl.preflight.checks.base import TITLES
from servectl.preflight.checks.docker import check_conflicts, check_docker_engine, check_docker_gpu_runtime
from servectl.preflight.checks.engine import check_engine_parse, check_image_standby_env
from servectl.preflight.checks.gpu import (
    check_gpu_arch,
    check_gpu_count,
    check_gpu_exclusive,
    check_gpu_mig,
    check_gpu_present,
    check_gpu_vram_reserve,
)
from servectl.preflight.checks.host import (
    check_env_set,
    check_host_disk,
    check_host_memory,
    check_host_shm,
    check_model_present,
    check_network_mode,
    check_port_free,
    check_port_role,
    check_standby_ram,
)
from servectl.preflight.checks.pins import check_image_pinned, check_model_revision, check_profile_status
from servectl.preflight.checks.services import check_container_name, check_services
from servectl.preflight.facts import Facts
from servectl.preflight.model import CheckResult, PreflightRequest

CheckFunction = Callable[[PreflightRequest, Facts], CheckResult]

CHECKS: tuple[tuple[str, str, CheckFunction], ...] = tuple(
    (check_id, TITLES[check_id], function)
    for check_id, function in (
        ("profile.status", check_profile_status),
        ("env.set", check_env_set),
        ("gpu.present", check_gpu_present),
        ("gpu.arch", check_gpu_arch),
        ("gpu.count", check_gpu_count),
        ("gpu.mig", check_gpu_mig),
        ("gpu.exclusive", check_gpu_exclusive),
        ("gpu.vram_reserve", check_gpu_vram_reserve),
        ("port.free", check_port_free),
        ("port.role", check_port_role),
        ("network.mode", check_network_mode),
        ("image.pinned", check_image_pinned),
        ("model.present", check_model_present),
        ("model.revision", check_model_revision),
        ("host.shm", check_host_shm),
        ("host.memory", check_host_memory),
        ("host.standby_ram", check_standby_ram),
        ("host.disk", check_host_disk),
        ("docker.engine", check_docker_engine),
        ("docker.gpu_runtime", check_docker_gpu_runtime),
        ("engine.parse", check_engine_parse),
        ("image.standby_env", check_image_standby_env),
        ("container.name", check_container_name),
        ("services", check_services),
        ("conflicts", check_conflicts),
    )
)
"""Every check in report order: (id, title, function)."""

CHECK_IDS: tuple[str, ...] = tuple(check_id for check_id, _, _ in CHECKS)


def validate_skip(skip: Iterable[str]) -> frozenset[str]:
    """The check ids to skip, or a :class:`~servectl.errors.UsageError` naming an unknown one."""
    wanted = frozenset(skip)
    for check_id in sorted(wanted):
        if check_id not in TITLES:
            close = difflib.get_close_matches(check_id, CHECK_IDS, n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; known checks: {', '.join(CHECK_IDS)}"
            raise UsageError(f"--force {check_id}: no such preflight check{hint}")
    return wanted


def run_checks(request: PreflightRequest, facts: Facts, skip: Iterable[str] = frozenset()) -> tuple[CheckResult, ...]:
    """Run every check on already-gathered facts; skipped checks keep what they would have said."""
    skipped = validate_skip(skip)
    results: list[CheckResult] = []
    for check_id, _title, function in CHECKS:
        outcome = function(request, facts)
        if check_id in skipped:
            outcome = replace(
                outcome,
                result="skipped",
                forced=True,
                message=f"skipped with --force (would have been {outcome.result}: {outcome.message})",
                facts={**outcome.facts, "result_without_force": outcome.result},
            )
        results.append(outcome)
    return tuple(results)
