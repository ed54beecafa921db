"""The plan cache: a profile's launch plan kept in the state folder with every input it was compiled from.

It sits beside the other state adapters (it writes the state folder; ``plan/`` stays pure) and compiles
through the one resolver, :func:`servectl.plan.resolve.resolve`. A :class:`PlanCache` is built with the
environment it reads (never ``os.environ`` directly) and, optionally, its state folder.

``up --dry-run`` and the drift column of ``status`` need a profile's plan, and compiling one (the pydantic
models, the rules, the flag catalog) costs more than the rest of those commands. An entry records, next to
the plan, each input the compile read, as a fact that is cheap to check again:

* the content hash of every profile file in the ``extends`` chain, and that no file of the same name sits
  earlier on the search path (one there would win);
* the flag catalog file the profile names, or the folder of extracted catalogs (by content);
* the environment variables the search path, the state folder and the profile's ``${VAR}`` host paths read,
  set or unset; the working folder; where each profile folder really points;
* servectl's own modules that were loaded, pydantic's and PyYAML's (size and modification time), and the
  Python version: an upgrade or an edit recompiles.

Every lookup checks every fact; one that changed (or an entry that is not exactly what was written: a
SHA-256 over its content guards it) is a miss, and the plan is compiled and the entry rewritten. A
profile that does not load is never cached. The cache is only ever an answer the compiler gave for the same
inputs: no command behaves differently with it, only faster. ``SERVECTL_NO_PLAN_CACHE=1`` turns it off.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl.adapters.state_sharing import file_mode, make_folder
from servectl.files import FileRefused, read_bounded, write_atomic
from servectl.paths import state_dir as state_dir_of

if TYPE_CHECKING:
    from servectl.plan.compile import LaunchPlan
    from servectl.plan.resolve import Resolved

Environ = Mapping[str, str]

#: Bumped whenever the entry format changes; older entries are misses.
FORMAT = 2
OFF_VARIABLE = "SERVECTL_NO_PLAN_CACHE"

#: Environment variables the search path and servectl's folders depend on (platformdirs reads the XDG ones).
#: A file hashed for the cache larger than this counts as unreadable (profiles and catalogs are far smaller).
_MAX_HASHED_BYTES = 64 * 2**20
_FOLDER_VARIABLES = (
    "HOME",
    "SERVECTL_HOME",
    "SERVECTL_PROFILES",
    "SERVECTL_CATALOG_CACHE",
    "XDG_CONFIG_HOME",
    "XDG_STATE_HOME",
    "XDG_CACHE_HOME",
)


@dataclass(frozen=True)
class DryRun:
    """What ``up --dry-run`` shows: a profile's plan as data, with its printed forms; ``resolved`` is there
    when it was compiled in this call (None for a cache hit, which builds no plan objects until :attr:`plan`
    is asked for)."""

    document: Mapping[str, Any]  # LaunchPlan.to_dict()
    script: str  # the dry-run script (servectl.plan.script.dry_run_text)
    unset: tuple[str, ...] = ()  # ``${VAR}`` left as written (only with ``keep_unset``)
    resolved: Resolved | None = None

    @property
    def plan(self) -> LaunchPlan:
        if self.resolved is not None:
            return self.resolved.plan
        from servectl.plan.compile import LaunchPlan

        return LaunchPlan.from_dict(self.document)

    def to_json(self) -> str:
        """As ``LaunchPlan.to_json``."""
        return json.dumps(self.document, indent=2, sort_keys=False)


class PlanCache:
    """The plan cache of one state folder, for one environment.

    Args:
        environ: the environment profiles resolve in (search path, home, ``${VAR}`` references); its
            ``SERVECTL_NO_PLAN_CACHE=1`` turns the cache off.
        state_dir: the state folder (entries in ``<state_dir>/cache/plans``); default: the one ``environ``
            names.
    """

    def __init__(self, *, environ: Environ, state_dir: Path | None = None) -> None:
        self.environ = environ
        self.folder = cache_dir(environ, state_dir=state_dir)
        self._observed: dict[tuple[str, str], Any] | None = None  # see moment()

    def moment(self) -> PlanCache:
        """This cache, observing each input once: for one listing that asks for several profiles at once.

        ``status`` asks for the plan hash of every service; their entries share most facts (the flag catalog,
        a base profile, servectl's own modules: a few hundred stats and file hashes each). The view reads
        each fact once and keeps what it saw, so it answers for one moment: a later change is seen by a new
        ``moment()``, never by this one. Writing entries is as in the cache it came from.
        """
        view = copy.copy(self)
        view._observed = {}
        return view

    def dry_run(self, name: str, *, keep_unset: bool = False) -> DryRun:
        """Profile ``name``'s plan (as :func:`servectl.plan.resolve.resolve` compiles it), from the cache when
        every input it was compiled from is unchanged; otherwise compiled and cached.

        Raises:
            UsageError: unknown profile. ProfileError: any problem in the profile (never cached).
        """
        if self._enabled(name):
            hit = self.lookup(name, keep_unset=keep_unset)
            if hit is not None:
                return hit
        from servectl.plan.script import dry_run_text

        resolved = self.resolve(name, keep_unset=keep_unset)
        document, script = resolved.plan.to_dict(), dry_run_text(resolved.plan)
        return DryRun(document=document, script=script, unset=resolved.unset, resolved=resolved)

    def plan_hash(self, name: str) -> str | None:
        """The plan hash profile ``name`` compiles to now (what ``status`` compares with the label), or None
        when it does not load.

        That no profile of that name is on the search path (a container started from another folder, or
        whose profile was removed) is cached too, as the absence of each file that would be it.
        """
        from servectl.errors import ServectlError

        if self._enabled(name):
            if _still_absent(name, self):
                return None
            entry = _valid_entry(name, self, keep_unset=False)
            if entry is not None:
                return str(entry["plan"]["plan_hash"])  # the hash alone: no plan objects to build
            if _remember_absent(name, self):  # before the compiler loads: another folder's container
                return None
        try:
            return self.dry_run(name).plan.plan_hash
        except ServectlError:
            return None

    def resolve(self, name: str, *, keep_unset: bool = False) -> Resolved:
        """Resolve profile ``name`` (always: :func:`servectl.plan.resolve.resolve`) and cache its plan with
        the facts of its inputs.

        Raises:
            UsageError: unknown profile. ProfileError: any problem in the profile.
        """
        from servectl.plan.resolve import resolve

        resolved = resolve(name, environ=self.environ, keep_unset=keep_unset)
        if self._enabled(name):
            facts = _input_facts(resolved, self)
            if facts is not None:
                entry = _entry(name, keep_unset, facts, resolved.plan, resolved.unset)
                _write(_entry_path(name, self, keep_unset), entry)
        return resolved

    def lookup(self, name: str, *, keep_unset: bool = False) -> DryRun | None:
        """The cached plan of ``name`` when its entry is intact and every fact in it still holds, else None."""
        entry = _valid_entry(name, self, keep_unset=keep_unset)
        if entry is None:
            return None
        return DryRun(document=entry["plan"], script=str(entry["script"]), unset=tuple(entry["unset"]))

    def _enabled(self, name: str) -> bool:
        return not self.environ.get(OFF_VARIABLE) and not name.endswith((".yaml", ".yml"))


def _valid_entry(name: str, where: PlanCache, *, keep_unset: bool) -> dict[str, Any] | None:
    """The entry of ``name``, when it is intact and every fact in it still holds."""
    try:
        path = _entry_path(name, where, keep_unset)
        entry = json.loads(read_bounded(path, limit_bytes=_MAX_HASHED_BYTES))
        if not isinstance(entry, dict) or entry.get("sha256") != _digest(entry):
            return None
        if entry.get("format") != FORMAT or entry.get("name") != name or entry.get("keep_unset") != keep_unset:
            return None
        if not isinstance(entry.get("plan"), dict) or not isinstance(entry.get("script"), str):
            return None
        if not isinstance(entry.get("unset"), list) or not all(_holds(fact, where) for fact in entry["facts"]):
            return None
        return entry
    except (OSError, FileRefused, ValueError, KeyError, TypeError, AttributeError):
        return None  # missing, unreadable or damaged: compiled again, and rewritten


def _still_absent(name: str, where: PlanCache) -> bool:
    """Whether ``name`` was recorded as no profile on the search path, and every fact of that still holds."""
    try:
        path = _entry_path(name, where, False, absent=True)
        entry = json.loads(read_bounded(path, limit_bytes=_MAX_HASHED_BYTES))
        valid = isinstance(entry, dict) and entry.get("sha256") == _digest(entry) and entry.get("format") == FORMAT
        return bool(valid and entry["name"] == name and all(_holds(fact, where) for fact in entry["facts"]))
    except (OSError, FileRefused, ValueError, KeyError, TypeError, AttributeError):
        return False


def _remember_absent(name: str, where: PlanCache) -> bool:
    """When no file on the search path could be profile ``name``, record that (and say so)."""
    from servectl.profile.loader import search_path

    folders = search_path(environ=where.environ)
    candidates = [str(f.path / f"{name}.yaml") for f in folders]
    if any(os.path.lexists(c) for c in candidates):
        return False  # there is a file: a profile to compile (or a broken one)
    facts: list[Fact] = [["cwd", "", os.getcwd()], *[["env", v, where.environ.get(v)] for v in _FOLDER_VARIABLES]]
    facts += [["realpath", str(f.path), os.path.realpath(f.path)] for f in folders]
    facts += [["file", c, None] for c in candidates]
    entry: dict[str, Any] = {"format": FORMAT, "name": name, "absent": True, "facts": facts}
    entry["sha256"] = _digest(entry)
    _write(_entry_path(name, where, False, absent=True), entry)
    return True


def cache_dir(environ: Environ, *, state_dir: Path | None = None) -> Path:
    """Where the entries live: ``<state folder>/cache/plans`` (the folder given, or the one ``environ``
    names)."""
    return (state_dir_of(environ) if state_dir is None else state_dir) / "cache" / "plans"


# -- facts ---------------------------------------------------------------------------------------------
# A fact is [kind, subject, value]; it holds when the value observed now equals the recorded one.
Fact = list[Any]


def _holds(fact: Fact, where: PlanCache) -> bool:
    kind, subject, value = fact
    memo = where._observed
    if memo is None:
        return bool(_observe(kind, subject, where.environ) == value)
    key = (kind, subject)
    if key not in memo:
        memo[key] = _observe(kind, subject, where.environ)
    return bool(memo[key] == value)


def _observe(kind: str, subject: str, environ: Environ) -> Any:
    if kind == "env":
        return environ.get(subject)
    if kind == "cwd":
        return os.getcwd()
    if kind == "realpath":
        return os.path.realpath(subject)
    if kind == "file":  # content hash; None: no such file (nothing may appear there)
        return _file_hash(subject)
    if kind == "stat":  # servectl's own modules: an install or an edit changes size or time
        st = os.stat(subject)
        return [st.st_size, st.st_mtime_ns]
    if kind == "folder":  # the *.json files of a folder, by content
        return _folder_hash(subject)
    if kind == "python":  # the interpreter (and so the platform)
        return sys.version
    raise ValueError(f"unknown fact kind {kind!r}")


def _file_hash(path: str) -> str | None:
    try:  # bounded and never blocking: a FIFO shadowing a profile must not hang `status`
        return hashlib.sha256(read_bounded(Path(path), limit_bytes=_MAX_HASHED_BYTES)).hexdigest()
    except FileNotFoundError:
        return None if not os.path.lexists(path) else "unreadable"
    except (OSError, FileRefused):
        return "unreadable" if os.path.lexists(path) else None


def _folder_hash(folder: str) -> str:
    digest = hashlib.sha256()
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json"))
    except OSError:
        names = []
    for name in names:
        digest.update(f"{name}\0{_file_hash(os.path.join(folder, name))}\0".encode())
    return digest.hexdigest()


def _input_facts(resolved: Resolved, where: PlanCache) -> list[Fact] | None:
    """The facts of everything ``resolved`` was compiled from; None when one cannot be stated (not cached)."""
    from servectl.profile.loader import search_path

    environ = where.environ
    folders = search_path(environ=environ)
    facts: list[Fact] = [["python", "", sys.version], ["cwd", "", os.getcwd()]]
    facts += [["env", name, environ.get(name)] for name in (*_FOLDER_VARIABLES, *resolved.variables)]
    facts += [["realpath", str(f.path), os.path.realpath(f.path)] for f in folders]
    for file in resolved.loaded.chain:  # the profile, then its bases: each found by name on the search path
        candidates = [f.path / f"{file.stem}.yaml" for f in folders]
        if file not in candidates:
            return None  # found some other way (a path given on the command line): not cached
        for candidate in candidates[: candidates.index(file)]:
            facts.append(["file", str(candidate), None])
        facts.append(["file", str(file), _file_hash(str(file))])
    catalog = _catalog_fact(resolved)
    if catalog is not None:
        facts.append(catalog)
    facts += [["stat", path, _observe("stat", path, environ)] for path in _own_modules()]
    return facts


def _catalog_fact(resolved: Resolved) -> Fact | None:
    """The flag catalog the profile names: a file (by content), or the folder of extracted catalogs it was
    validated and compiled against (the host's, :attr:`LoadedProfile.catalogs`; ``SERVECTL_CATALOG_CACHE`` is
    a fact of its own, so another folder is a miss)."""
    from servectl.profile.catalog import CATALOG_DIR
    from servectl.profile.catalog_store import IMAGE, is_catalog_file

    spec = resolved.loaded.profile.engine.catalog
    if is_catalog_file(spec):
        path = str(Path(spec).expanduser())
        return ["file", path, _file_hash(path)]
    if spec == IMAGE or spec.startswith("sha256:"):
        folder = str(resolved.loaded.catalogs)
        return ["folder", folder, _folder_hash(folder)]
    shipped = str(CATALOG_DIR / f"{spec}.json")
    return ["file", shipped, _file_hash(shipped)]


#: Libraries whose upgrade may change what a profile validates or compiles to (their package file is stated).
_LIBRARIES = ("pydantic", "pydantic_core", "yaml")


def _own_modules() -> Iterator[str]:
    """The source files of every servectl module loaded now (the compiler and all it used), and of the
    libraries that read and validate a profile."""
    for name, module in sorted(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and (name == "servectl" or name.startswith("servectl.") or name in _LIBRARIES):
            yield str(file)


# -- entries -------------------------------------------------------------------------------------------
def _entry_path(name: str, where: PlanCache, keep_unset: bool, *, absent: bool = False) -> Path:
    key = hashlib.sha256(json.dumps([name, keep_unset, absent, os.getcwd()]).encode()).hexdigest()[:32]
    return where.folder / f"{key}.json"


def _entry(name: str, keep_unset: bool, facts: list[Fact], plan: LaunchPlan, unset: tuple[str, ...]) -> dict[str, Any]:
    from servectl.plan.script import dry_run_text

    entry: dict[str, Any] = {
        "format": FORMAT,
        "name": name,
        "keep_unset": keep_unset,
        "facts": facts,
        "plan": plan.to_dict(),
        "script": dry_run_text(plan),
        "unset": list(unset),
    }
    entry["sha256"] = _digest(entry)
    return entry


def _digest(entry: Mapping[str, Any]) -> str:
    body = {k: v for k, v in entry.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _write(path: Path, entry: Mapping[str, Any]) -> None:
    """Write the entry atomically (a reader sees the old one or the new one); a state folder that cannot be
    written only means no cache."""
    try:
        make_folder(path.parent)
        data = json.dumps(entry, separators=(",", ":")).encode("utf-8")
        write_atomic(path, data, mode=file_mode(path.parent, 0o600))
    except (OSError, FileRefused):
        pass
