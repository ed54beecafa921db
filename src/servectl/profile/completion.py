"""Shell-completion candidates from profile files and the shipped flag catalogs: file names only, nothing parsed
beyond the catalogs, so a Tab press never waits on validation or prints an error (``Host.completions``)."""

from __future__ import annotations

from collections.abc import Sequence

from servectl.profile.loader import ProfileFolder


def profile_names(incomplete: str, *, folders: Sequence[ProfileFolder]) -> list[str]:
    """Runnable profiles on ``folders`` (bases, ``_`` names, left out) starting with ``incomplete``; none when a
    profile folder cannot be read."""
    from servectl.profile.loader import discover

    try:
        files = discover(folders)
    except OSError:
        return []
    return sorted(name for name, file in files.items() if not file.is_base and name.startswith(incomplete))


def catalog_names(incomplete: str) -> list[str]:
    """The shipped flag catalogs starting with ``incomplete``."""
    from servectl.profile.catalog import FlagCatalog

    return sorted(name for name in FlagCatalog.available() if name.startswith(incomplete))


def flag_names(incomplete: str) -> list[str]:
    """Flag names of every shipped catalog without their dashes (a shell reads a word starting with ``--`` as an
    option of its own), so ``--speculative-n`` and ``speculative-n`` both give ``speculative-num-steps``."""
    from servectl.profile.catalog import FlagCatalog

    typed = incomplete.lstrip("-")
    return sorted(
        {
            flag[2:]
            for name in FlagCatalog.available()
            for option in FlagCatalog.load(name).options
            for flag in option.flags
            if flag[2:].startswith(typed)
        }
    )
