"""Resolve a profile name to its validated profile and launch plan, with this host's facts."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from servectl.paths import state_dir
from servectl.plan.compile import LaunchPlan, compile_plan, project_dir_of
from servectl.plan.validate import load_profile
from servectl.profile.loader import LoadedProfile


@dataclass(frozen=True)
class Resolved:
    """A loaded profile and its plan."""

    loaded: LoadedProfile
    plan: LaunchPlan

    @property
    def name(self) -> str:
        return self.loaded.profile.name


def plan_for(loaded: LoadedProfile, *, environ: Mapping[str, str] | None = None) -> LaunchPlan:
    """Compile ``loaded`` with this host's state folder, home and environment."""
    env = os.environ if environ is None else environ
    return compile_plan(
        loaded.profile,
        source=str(loaded.file.path),
        state_dir=state_dir(env),
        home=Path(env.get("HOME") or Path.home()),
        environ=env,
        project_dir=project_dir_of(loaded.file.path),
    )


def resolve(name: str, *, environ: Mapping[str, str] | None = None) -> Resolved:
    """Load, validate and compile profile ``name``.

    Raises:
        UsageError: unknown profile. ProfileError: any problem in the profile, all at once.
    """
    loaded = load_profile(name)
    return Resolved(loaded=loaded, plan=plan_for(loaded, environ=environ))
