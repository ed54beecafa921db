"""Shell completion values: profile names, preflight check ids, catalog names and flag names.

Each function takes what the user typed so far and returns the candidates; typer calls them when the shell
asks (``servectl --install-completion`` sets that up). They read files only, never Docker or NVML, and a
broken profile folder completes nothing rather than printing an error into the shell.
"""

from __future__ import annotations


def profile_names(incomplete: str) -> list[str]:
    """Runnable profiles on the search path (bases, ``_`` names, are left out)."""
    from servectl.profile.loader import discover

    try:
        names = [name for name, file in discover().items() if not file.is_base]
    except OSError:
        return []
    return sorted(name for name in names if name.startswith(incomplete))


def check_ids(incomplete: str) -> list[str]:
    """Preflight check ids, for ``--force``."""
    from servectl.preflight.checks import CHECK_IDS

    return [check_id for check_id in CHECK_IDS if check_id.startswith(incomplete)]


def catalog_or_profile_names(incomplete: str) -> list[str]:
    """Shipped flag catalogs, then profiles (``catalog NAME`` takes either)."""
    from servectl.profile.catalog import FlagCatalog

    catalogs = [name for name in FlagCatalog.available() if name.startswith(incomplete)]
    return sorted(catalogs) + profile_names(incomplete)


def catalog_flags(incomplete: str) -> list[str]:
    """Flag names of every shipped catalog, for ``catalog --grep``: without the dashes (the shell reads a
    word that starts with ``--`` as an option of its own), ``speculative-num-steps``."""
    from servectl.profile.catalog import FlagCatalog

    flags: set[str] = set()
    for name in FlagCatalog.available():
        for option in FlagCatalog.load(name).options:
            flags.update(flag[2:] for flag in option.flags if flag[2:].startswith(incomplete.lstrip("-")))
    return sorted(flags)
