"""Resolve a profile name to its validated profile and launch plan, with this host's facts: the one resolver.

Every command that needs a plan resolves it here (the plan cache in :mod:`servectl.adapters.plan_cache`
too), so a profile compiles the same way whoever asks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from servectl.paths import state_dir
from servectl.plan.compile import LaunchPlan, UnsetKeptLiteral, compile_plan, project_dir_of
from servectl.profile.loader import LoadedProfile, search_path
from servectl.profile.validate import load_profile


@dataclass(frozen=True)
class Resolved:
    """A loaded profile and its plan."""

    loaded: LoadedProfile
    plan: LaunchPlan
    unset: tuple[str, ...] = field(default=())  # variables left as ``${VAR}`` (only with ``keep_unset``)
    #: every variable the compiler asked the environment for (``${VAR}`` in host paths), set or not
    variables: tuple[str, ...] = field(default=())
    #: ``(field, VAR)`` of each variable the running service needs from this environment - a ``${VAR}`` in an
    #: ``engine.env`` value, the ``serve.api_key_env`` variable - that is not set there (names only: a value
    #: may be a secret; preflight's ``env.set`` fails on them before anything stops)
    unset_references: tuple[tuple[str, str], ...] = field(default=())

    @property
    def name(self) -> str:
        return self.loaded.profile.name


def plan_for(
    loaded: LoadedProfile,
    *,
    environ: Mapping[str, str],
    variables: Mapping[str, str] | None = None,
) -> LaunchPlan:
    """Compile ``loaded`` with this host's state folder, home and environment.

    ``variables`` answers ``${VAR}`` in host paths (default: the environment itself).
    """
    env = environ
    return compile_plan(
        loaded.profile,
        catalog=loaded.flag_catalog(),
        source=str(loaded.file.path),
        state_dir=state_dir(env),
        home=Path(env.get("HOME") or Path.home()),
        environ=env if variables is None else variables,
        project_dir=project_dir_of(loaded.file.path),
    )


def resolve(name: str, *, environ: Mapping[str, str], keep_unset: bool = False) -> Resolved:
    """Load, validate and compile profile ``name`` (found on the search path ``environ`` gives).

    Args:
        environ: the environment: the search path, the state folder, home and the
            ``${VAR}`` references in host paths.
        keep_unset: leave an unset ``${VAR}`` in host paths as it is and name it in ``Resolved.unset``
            (a plan to show, never to run); without it an unset variable is an error.

    Raises:
        UsageError: unknown profile. ProfileError: any problem in the profile, all at once.
    """
    env = environ
    loaded = load_profile(name, folders=search_path(environ=env))
    keeping = UnsetKeptLiteral(env) if keep_unset else None
    variables = _Recording(env if keeping is None else keeping)
    plan = plan_for(loaded, environ=env, variables=variables)
    unset = tuple(keeping.unset) if keeping is not None else ()
    return Resolved(
        loaded=loaded,
        plan=plan,
        unset=unset,
        variables=tuple(sorted(variables.names)),
        unset_references=unset_references(loaded, env),
    )


def unset_references(loaded: LoadedProfile, environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``(field, VAR)`` for each variable the service reads from ``environ`` at start that is not set there."""
    from servectl.plan.compile import env_references

    profile = loaded.profile
    wanted = [
        (f"engine.env.{name}", var)
        for name, value in sorted(profile.engine.env.items())
        for var in env_references(value)
    ]
    if profile.serve.api_key_env:
        wanted.append(("serve.api_key_env", profile.serve.api_key_env))
    if profile.serve.admin_api_key_env:
        wanted.append(("serve.admin_api_key_env", profile.serve.admin_api_key_env))
    return tuple((where, var) for where, var in wanted if var not in environ)


class _Recording(Mapping[str, str]):
    """The environment as the compiler sees it, noting every variable it asks for (set or not)."""

    def __init__(self, inner: Mapping[str, str]) -> None:
        self._inner = inner
        self.names: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.names.add(key)
        return self._inner[key]

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.names.add(key)
        return key in self._inner

    def __iter__(self) -> Iterator[str]:
        return iter(self._inner)

    def __len__(self) -> int:
        return len(self._inner)
