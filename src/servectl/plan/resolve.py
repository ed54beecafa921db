"""Resolve a profile name to its validated profile and launch plan, with this host's facts."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from servectl.paths import state_dir
from servectl.plan.compile import LaunchPlan, UnsetKeptLiteral, compile_plan, project_dir_of
from servectl.plan.validate import load_profile
from servectl.profile.loader import LoadedProfile


@dataclass(frozen=True)
class Resolved:
    """A loaded profile and its plan."""

    loaded: LoadedProfile
    plan: LaunchPlan
    unset: tuple[str, ...] = field(default=())  # variables left as ``${VAR}`` (only with ``keep_unset``)

    @property
    def name(self) -> str:
        return self.loaded.profile.name


def plan_for(
    loaded: LoadedProfile,
    *,
    environ: Mapping[str, str] | None = None,
    variables: Mapping[str, str] | None = None,
) -> LaunchPlan:
    """Compile ``loaded`` with this host's state folder, home and environment.

    ``variables`` answers ``${VAR}`` in host paths (default: the environment itself).
    """
    env = os.environ if environ is None else environ
    return compile_plan(
        loaded.profile,
        source=str(loaded.file.path),
        state_dir=state_dir(env),
        home=Path(env.get("HOME") or Path.home()),
        environ=env if variables is None else variables,
        project_dir=project_dir_of(loaded.file.path),
    )


def resolve(name: str, *, environ: Mapping[str, str] | None = None, keep_unset: bool = False) -> Resolved:
    """Load, validate and compile profile ``name``.

    Args:
        keep_unset: leave an unset ``${VAR}`` in host paths as it is and name it in ``Resolved.unset``
            (a plan to show, never to run); without it an unset variable is an error.

    Raises:
        UsageError: unknown profile. ProfileError: any problem in the profile, all at once.
    """
    loaded = load_profile(name)
    if not keep_unset:
        return Resolved(loaded=loaded, plan=plan_for(loaded, environ=environ))
    env = os.environ if environ is None else environ
    variables = UnsetKeptLiteral(env)
    plan = plan_for(loaded, environ=env, variables=variables)
    return Resolved(loaded=loaded, plan=plan, unset=tuple(variables.unset))
