"""The validated profile: read and schema-check it (``profile.loader``), then run the cross-field rules.

This is the one "load a validated profile" entry point, and it lives in ``profile/`` with the rules it runs
(:mod:`servectl.profile.rules`, over the flags of :mod:`servectl.profile.engine_args`): the rules need the
profile and its flag catalog, never a compiled plan, so imports keep pointing down (profile <- plan) and
``plan/`` only compiles what comes out of here. Every command loads profiles through here, so a profile that
passes :func:`load_profile` passed both the schema and every rule.
"""

from __future__ import annotations

from servectl.errors import ProfileError
from servectl.profile.loader import LoadedProfile, ProfileFile, ProfileSearch, read_profile, read_profile_file
from servectl.profile.rules import check_profile


def load_profile(name: str, *, folders: ProfileSearch) -> LoadedProfile:
    """Find, merge and validate profile ``name`` (schema and cross-field rules) on the search ``folders`` (the
    host's :func:`~servectl.profile.loader.search_path`: its profile folders and its catalog folder).

    Raises:
        UsageError: the profile does not exist.
        ProfileError: every problem in the file and its bases, one per line.
    """
    return checked(read_profile(name, folders=folders))


def load_profile_file(file: ProfileFile, *, folders: ProfileSearch) -> LoadedProfile:
    """Merge and validate the profile in ``file`` (see :func:`load_profile`)."""
    return checked(read_profile_file(file, folders=folders))


def checked(loaded: LoadedProfile) -> LoadedProfile:
    """``loaded`` itself once every cross-field rule passes.

    Raises:
        ProfileError: every rule's problem, located in the file that wrote the field.
    """
    problems = check_profile(loaded)
    if problems:
        raise ProfileError(problems)
    return loaded
