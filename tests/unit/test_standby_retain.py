"""``swap.standby_retain_backup``: torch_memory_saver keeps the pinned buffer of the CPU copy (issue 38)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

Write = Callable[[str, str], Path]


def test_a_retained_backup_puts_the_librarys_variable_in_the_engines_environment(
    write_profile: Write, minimal: Callable[[str], str], profile_dir: Path
) -> None:
    from servectl.plan.resolve import resolve

    write_profile("_min", minimal("_min"))
    write_profile("warm", "name: warm\nextends: _min\nswap: {standby: warm, standby_retain_backup: true}\n")
    write_profile("plain", "name: plain\nextends: _min\nswap: {standby: warm}\n")
    environ = {"SERVECTL_PROFILES": str(profile_dir)}
    assert ("TMS_RETAIN_CPU_BACKUP", "1") in resolve("warm", environ=environ).plan.docker.environment
    assert all(name != "TMS_RETAIN_CPU_BACKUP" for name, _ in resolve("plain", environ=environ).plan.docker.environment)
