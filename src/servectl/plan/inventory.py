"""The profiles on the search path, as rows for listing and as validation results."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from servectl.errors import Problem, ProfileError, ProfileTemplate, ServectlError, UsageError
from servectl.plan.resolve import plan_for
from servectl.profile.evidence import evidence_summary_lines, headline, load_record
from servectl.profile.loader import LoadedProfile, ProfileSearch, discover, find_profile, search_path
from servectl.profile.validate import load_profile_file


@dataclass(frozen=True)
class ProfileRow:
    """One line of `servectl profiles`."""

    name: str
    source: str
    origin: str
    status: str = ""
    model: str = ""
    served_name: str = ""
    tp: int = 0
    context: int | None = None
    port: int = 0
    role: str = ""
    headline: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Profiles in the order people read them: ``demo`` before ``demo-rollback`` (file order puts ``-`` before
    ``.``), ``x-9`` before ``x-10`` (numbers by value)."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part)


def list_profiles(environ: Mapping[str, str]) -> list[ProfileRow]:
    """Every runnable profile on the search path of ``environ`` (default ``os.environ``; bases excluded) with its
    key settings, or why it does not load; its evidence headline compares plans compiled in that environment."""
    folders = search_path(environ=environ)
    rows = []
    for name, file in sorted(discover(folders).items(), key=lambda item: natural_key(item[0])):
        if file.is_base:
            continue
        try:
            loaded = load_profile_file(file, folders=folders)
        except ProfileTemplate:
            rows.append(ProfileRow(name, str(file.path), file.origin, status="template"))
            continue
        except ServectlError as err:  # any broken file affects only its own row
            count = (len(err.problems) or 1) if isinstance(err, ProfileError) else 1
            rows.append(
                ProfileRow(name, str(file.path), file.origin, error=f"{count} problem(s): servectl validate {name}")
            )
            continue
        p = loaded.profile
        rows.append(
            ProfileRow(
                name=name,
                source=str(file.path),
                origin=file.origin,
                status=p.status,
                model=p.model.repo or p.model.served_name,
                served_name=p.model.served_name,
                tp=p.engine.tp,
                context=p.engine.context_length,
                port=p.serve.port,
                role=p.serve.role,
                headline=evidence_headline(loaded, environ),
            )
        )
    return rows


@dataclass(frozen=True)
class Validation:
    """One profile's validation: its error (None when valid), or the loaded profile and its warnings.

    ``note`` is filled in by callers that know more than the profile (the API adds the catalog's staleness).
    """

    name: str
    error: ServectlError | None = None
    loaded: LoadedProfile | None = None
    warnings: tuple[Problem, ...] = ()
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """``validate --json``: the problems of an invalid profile, the warnings of a valid one."""
        out: dict[str, Any] = {"profile": self.name, "valid": self.error is None, "problems": _problems(self.error)}
        if self.warnings:
            out["warnings"] = [w.to_dict() for w in self.warnings]
        return out


def _problems(error: ServectlError | None) -> list[dict[str, Any]]:
    if error is None:
        return []
    if isinstance(error, ProfileError) and error.problems:
        return [p.to_dict() for p in error.problems]
    # a usage error (a base profile named) or a message without a location
    return [
        {"file": "", "line": None, "field": "", "rule": type(error).__name__, "message": line} for line in error.lines()
    ]


def validations(names: list[str] | None, *, with_warnings: bool = True, folders: ProfileSearch) -> list[Validation]:
    """Validate the named profiles (all runnable ones when None) on ``folders`` (the host's search path), each
    file read once; never raises for one.

    ``with_warnings``: also run the warning rules on each valid profile (what SGLang would change silently).

    With no names, templates are not errors: they are reported as :class:`ProfileTemplate` values of the
    result and the caller shows them as such (a fresh install ships one, to be filled in by ``servectl adopt``).

    Raises:
        UsageError: a name is no profile on the search path.
    """
    from servectl.profile.rules import profile_warnings

    if names is None:
        found = sorted(discover(folders).items(), key=lambda item: natural_key(item[0]))
        files = {n: f for n, f in found if not f.is_base}
    else:
        files = {name: find_profile(name, folders) for name in names}
    results: list[Validation] = []
    for name, file in files.items():
        if file.is_base and names is not None:
            message = f"{name} is a base profile (name starts with '_'); validate a profile that extends it"
            results.append(Validation(name, error=UsageError(message)))
            continue
        try:
            loaded = load_profile_file(file, folders=folders)
        except ServectlError as err:  # any broken file affects only its own result
            results.append(Validation(name, error=err))
            continue
        warnings = tuple(profile_warnings(loaded)) if with_warnings else ()
        results.append(Validation(name, loaded=loaded, warnings=warnings))
    return results


def validate_profiles(names: list[str] | None, *, folders: ProfileSearch) -> dict[str, ServectlError | None]:
    """:func:`validations` as name -> error or None (no warnings)."""
    return {v.name: v.error for v in validations(names, with_warnings=False, folders=folders)}


def evidence_headline(loaded: LoadedProfile, environ: Mapping[str, str]) -> str | None:
    """The profile's evidence headline, marked stale when its plan (compiled in ``environ``) changed since the
    measurement."""
    record = load_record(loaded)
    if record is None:
        return None
    return headline(record, current_plan_hash=_current_plan_hash(loaded, environ))


def evidence_lines(loaded: LoadedProfile, environ: Mapping[str, str]) -> list[str]:
    """The lines `servectl show` prints about the profile's evidence (none when it has none); stale as in
    :func:`evidence_headline`."""
    if not loaded.profile.evidence:
        return []
    return evidence_summary_lines(loaded, current_plan_hash=_current_plan_hash(loaded, environ))


def _current_plan_hash(loaded: LoadedProfile, environ: Mapping[str, str]) -> str | None:
    try:
        return plan_for(loaded, environ=environ).plan_hash
    except ProfileError:
        return None
