"""Shell completion values: profile names, preflight check ids, catalog names and flag names.

Each function takes what the user typed so far and returns the candidates of one kind from
:meth:`servectl.host.Host.completions`; typer calls them when the shell asks (``servectl --install-completion``
sets that up). The host opens no adapter for them (files only, never Docker or NVML), and a broken profile
folder completes nothing rather than printing an error into the shell.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servectl.host.profiles import Completable


def _complete(of: Completable, incomplete: str) -> list[str]:
    from servectl.host import Host

    with Host() as host:
        return host.completions(of=of, incomplete=incomplete)


def profile_names(incomplete: str) -> list[str]:
    """Runnable profiles on the search path (bases, ``_`` names, are left out)."""
    return _complete("profile", incomplete)


def check_ids(incomplete: str) -> list[str]:
    """Preflight check ids, for ``--force``."""
    return _complete("check", incomplete)


def catalog_or_profile_names(incomplete: str) -> list[str]:
    """Shipped flag catalogs, then profiles (``catalog NAME`` takes either)."""
    return _complete("catalog", incomplete)


def catalog_flags(incomplete: str) -> list[str]:
    """Flag names of every shipped catalog, without the dashes, for ``catalog --grep``."""
    return _complete("flag", incomplete)
