"""The previous service's profile document, kept in the journal so that the undo restores what ran.

A swap snapshots the running service's merged profile before it stops it; every way back (swap's failure
path, ``recover`` after ``kill -9``, ``rollback`` of a killed transaction) compiles *that* document, so a
failed swap and a killed swap restore the same plan even when the profile file changed in between.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from servectl.errors import ServectlError
from servectl.service.journal import PreviousService, SwapJournal
from servectl.service.services import ServiceInfo

if TYPE_CHECKING:
    from servectl.plan.resolve import Resolved


def take_snapshot(current: ServiceInfo, resolve: Callable[[str], Resolved]) -> PreviousService | None:
    """The running service's profile document now, for the journal (None when the profile does not load)."""
    try:
        loaded = resolve(current.profile).loaded
    except ServectlError:
        return None  # the undo then resolves the profile by name, and says so
    data = json.loads(json.dumps(loaded.data, default=str))  # YAML dates and the like become text
    return PreviousService(
        profile=current.profile, source=str(loaded.file.path), data=data, plan_hash=current.plan_hash
    )


def previous_resolved(
    journal: SwapJournal, *, environ: Mapping[str, str], resolve: Callable[[str], Resolved]
) -> tuple[Resolved, str]:
    """The previous service as it ran (the journal's snapshot), else its profile now; and a drift note.

    Raises:
        ServectlError: neither the snapshot nor the profile file gives a plan.
    """
    assert journal.from_profile is not None
    if journal.previous is not None:
        try:
            resolved = resolved_from_snapshot(journal.previous, environ)
        except ServectlError:
            pass
        else:
            drift = ""
            if journal.previous.plan_hash and resolved.plan.plan_hash != journal.previous.plan_hash:
                drift = (
                    f" (note: it ran plan {journal.previous.plan_hash}; its profile as kept compiles to "
                    f"{resolved.plan.plan_hash} here now)"
                )
            return resolved, drift
    return resolve(journal.from_profile), " (from its profile file as it is now: the journal had no copy)"


def resolved_from_snapshot(previous: PreviousService, environ: Mapping[str, str]) -> Resolved:
    """Validate and compile the profile document kept in a journal.

    Raises:
        ProfileError: the document does not validate or breaks a cross-field rule (servectl changed in between).
    """
    from pydantic import ValidationError

    from servectl.errors import ProfileError
    from servectl.paths import catalog_cache_dir
    from servectl.plan.resolve import Resolved, plan_for
    from servectl.profile.loader import LoadedProfile, ProfileFile
    from servectl.profile.models import Profile
    from servectl.profile.validate import checked

    try:
        profile = Profile.model_validate(dict(previous.data))
    except ValidationError as e:
        first = e.errors()[0]["msg"]
        raise ProfileError(f"the journal's copy of {previous.profile} no longer validates: {first}") from None
    source = Path(previous.source)
    loaded = LoadedProfile(
        profile=profile,
        file=ProfileFile(previous.profile, source, "journal"),
        chain=(source,),
        locations={},
        data=previous.data,
        catalogs=catalog_cache_dir(environ),  # the host's: an `engine.catalog: image` profile finds its catalog
    )
    # the cross-field rules too, as every other load: the undo starts nothing up or swap would refuse
    return Resolved(loaded=checked(loaded), plan=plan_for(loaded, environ=environ))
