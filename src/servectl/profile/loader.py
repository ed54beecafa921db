"""Find, read, merge and schema-validate profile files.

Profiles are searched in ``./profiles``, then each folder of ``SERVECTL_PROFILES`` (colon-separated), then
the user's config folder, then the profiles shipped with servectl; the first file named ``<name>.yaml``
wins. ``extends`` merges deeply (maps merge, lists and scalars replace) and resolves through the same search
path. Every problem is reported with the file and line where the offending key was written, which for an
inherited key is the base file.

This layer checks the schema only; the cross-field rules (``servectl.profile.rules``) run on top of it in
:func:`servectl.profile.validate.load_profile`, the entry point every command uses.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from servectl.errors import Problem, ProfileError, ProfileTemplate, UsageError
from servectl.paths import SHIPPED_PROFILES_DIR as SHIPPED_PROFILES_DIR  # re-exported
from servectl.paths import catalog_cache_dir, user_profiles_dir
from servectl.profile.yaml_locations import MAX_PROFILE_BYTES as MAX_PROFILE_BYTES  # re-exported
from servectl.profile.yaml_locations import Location, PathKey, display_path, dotted_path
from servectl.profile.yaml_locations import read_yaml as read_yaml  # re-exported

if TYPE_CHECKING:  # PyYAML, pydantic and the models load on first read: finding and listing files needs none
    from pydantic import BaseModel, ValidationError

    from servectl.profile.catalog import FlagCatalog
    from servectl.profile.models import Profile


#: Profile fields holding host paths that are relative to the file that sets them.
_RELATIVE_PATH_FIELDS: tuple[PathKey, ...] = (
    ("model", "path"),
    ("serve", "api_key_file"),
    ("serve", "admin_api_key_file"),
)
_RELATIVE_PATH_LIST_FIELDS: tuple[tuple[PathKey, str], ...] = (
    (("container", "mounts"), "source"),
    (("conflicts",), "compose_file"),
)


@dataclass(frozen=True)
class ProfileFolder:
    """One folder of the search path and where it came from."""

    path: Path
    origin: str  # "./profiles", "SERVECTL_PROFILES", "user", "shipped"


@dataclass(frozen=True)
class ProfileSearch(Sequence[ProfileFolder]):
    """Where one environment's profiles are found: the profile folders in search order (it is a sequence of
    them) and ``catalogs``, the folder of the flag catalogs extracted from engine images in the same
    environment (:func:`servectl.paths.catalog_cache_dir`), where ``engine.catalog: image`` or a ``sha256:`` id
    is looked up. Both come from the host's environment in :func:`search_path`; a profile loaded through a
    search keeps its catalog folder (:attr:`LoadedProfile.catalogs`) for the rules and the compiler.
    """

    folders: tuple[ProfileFolder, ...]
    catalogs: Path

    @overload
    def __getitem__(self, index: int) -> ProfileFolder: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[ProfileFolder]: ...
    def __getitem__(self, index: int | slice) -> ProfileFolder | Sequence[ProfileFolder]:
        return self.folders[index]

    def __len__(self) -> int:
        return len(self.folders)


@dataclass(frozen=True)
class ProfileFile:
    """A profile file found on the search path."""

    name: str
    path: Path
    origin: str
    shadows: tuple[Path, ...] = ()

    @property
    def is_base(self) -> bool:
        return self.name.startswith("_")


@dataclass(frozen=True)
class LoadedProfile:
    """A schema-valid profile with where each of its keys was written."""

    profile: Profile
    file: ProfileFile
    chain: tuple[Path, ...]  # the file, then its bases
    locations: Mapping[PathKey, Location] = field(repr=False)
    data: Mapping[str, Any] = field(repr=False)  # merged document, relative paths resolved
    #: the catalog folder of the search it was loaded through (where ``engine.catalog: image`` is looked up)
    catalogs: Path

    def flag_catalog(self) -> FlagCatalog:
        """The profile's flag catalog, found in :attr:`catalogs` (see
        :func:`servectl.profile.engine_args.catalog_for`).

        Raises:
            KeyError: unknown catalog name, or no catalog extracted yet from the profile's image.
            ValueError: a malformed extension.
        """
        from servectl.profile.engine_args import catalog_for

        return catalog_for(self.profile, catalogs=self.catalogs)

    def location(self, path: PathKey) -> Location:
        """File and line of the key at ``path`` (or of its closest written parent)."""
        return locate_key(self.locations, path, self.file.path)

    def problem(self, path: PathKey, message: str, rule: str = "") -> Problem:
        """A problem at a dotted field path, located in the file that wrote it."""
        file, line = self.location(path)
        return Problem(file=display_path(file), line=line, field=dotted_path(path), message=message, rule=rule)


def search_path(*, cwd: Path | None = None, environ: Mapping[str, str]) -> ProfileSearch:
    """The profile folders of ``environ`` in search order, with its catalog folder."""
    env = environ
    base = Path.cwd() if cwd is None else cwd
    folders = [ProfileFolder(base / "profiles", "./profiles")]
    for entry in (env.get("SERVECTL_PROFILES") or "").split(":"):
        if entry:
            folders.append(ProfileFolder(Path(entry).expanduser(), "SERVECTL_PROFILES"))
    folders.append(ProfileFolder(user_profiles_dir(env), "user"))
    folders.append(ProfileFolder(SHIPPED_PROFILES_DIR, "shipped"))
    unique: list[ProfileFolder] = []
    seen: set[Path] = set()
    for folder in folders:
        resolved = folder.path.resolve()
        if resolved not in seen:
            seen.add(resolved)
            # keep the path as written (absolute, links not followed): a checkout's ``profiles`` link to the
            # shipped folder shows as ``profiles/...`` and its relative model paths stay under the checkout
            unique.append(ProfileFolder(folder.path.absolute(), folder.origin))
    return ProfileSearch(tuple(unique), catalogs=catalog_cache_dir(env))


def discover(folders: Sequence[ProfileFolder]) -> dict[str, ProfileFile]:
    """All profile files on the search path by name; the first folder that has a name wins."""
    found: dict[str, ProfileFile] = {}
    for folder in folders:
        if not folder.path.is_dir():
            continue
        for path in sorted(folder.path.glob("*.yaml")):
            name = path.stem
            if name in found:
                prior = found[name]
                found[name] = ProfileFile(prior.name, prior.path, prior.origin, (*prior.shadows, path))
            else:
                found[name] = ProfileFile(name, path, folder.origin)
    return found


def find_profile(name: str, folders: Sequence[ProfileFolder]) -> ProfileFile:
    """The file of profile ``name``.

    Raises:
        UsageError: no such profile (with close names and the folders searched).
    """
    if name.endswith((".yaml", ".yml")) and Path(name).is_file():
        path = Path(name).resolve()
        return ProfileFile(path.stem, path, "path")
    files = discover(folders)
    if name in files:
        return files[name]
    close = difflib.get_close_matches(name, [n for n in files if not n.startswith("_")], n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "; `servectl profiles` lists them"
    searched = ", ".join(str(f.path) for f in (folders))
    raise UsageError(f"profile {name!r} not found in {searched}{hint}")


def read_profile(name: str, *, folders: ProfileSearch) -> LoadedProfile:
    """Find, merge and schema-validate profile ``name`` (no cross-field rules; see ``profile.validate``) on the
    search ``folders``; the loaded profile keeps its catalog folder.

    Raises:
        UsageError: the profile does not exist.
        ProfileError: every schema problem in the file and its bases, one per line.
    """
    file = find_profile(name, folders)
    return read_profile_file(file, folders=folders)


def read_profile_file(file: ProfileFile, *, folders: ProfileSearch) -> LoadedProfile:
    """Merge and schema-validate the profile in ``file`` (see :func:`read_profile`).

    Raises:
        ProfileTemplate: the file is a template (a ``template:`` key says how to fill it in).
    """
    data, locations, chain = _resolve(file, folders, stack=())
    return _validated(file, data, locations, chain, catalogs=folders.catalogs)


def read_profile_document(
    file: ProfileFile,
    data: Mapping[str, Any],
    locations: Mapping[PathKey, Location],
    *,
    folders: ProfileSearch,
) -> LoadedProfile:
    """Merge and schema-validate a profile that exists only as a document (``data``), such as a campaign's
    variant: ``extends`` resolves on ``folders`` as a file's would, and each problem is located through
    ``locations`` (file and line of each key of ``data``; the root ``()`` names the document's source).

    ``file`` names the document (its ``name`` and ``path``: the file that wrote it).

    Raises:
        ProfileError: every schema problem in the document and its bases, one per line.
    """
    own = {(): (file.path, 1), **dict(locations)}
    merged, merged_locations, chain = _resolve_document(file, dict(data), own, folders, stack=())
    return _validated(file, merged, merged_locations, chain, catalogs=folders.catalogs)


def _validated(
    file: ProfileFile,
    data: dict[str, Any],
    locations: dict[PathKey, Location],
    chain: tuple[Path, ...],
    *,
    catalogs: Path,
) -> LoadedProfile:
    if data.get("template") is not None:
        where, line = locate_key(locations, ("template",), file.path)
        raise ProfileTemplate(file.name, " ".join(str(data["template"]).split()), file=display_path(where), line=line)
    problems: list[Problem] = []
    if data.get("name") != file.name:
        problems.append(
            _problem(
                locations,
                ("name",),
                file.path,
                f"{data.get('name')!r} must equal the file name {file.name!r}"
                if "name" in data
                else f"missing; add `name: {file.name}`",
                rule="name",
            )
        )
    _resolve_relative_paths(data, locations)
    from pydantic import ValidationError

    from servectl.profile.models import Profile

    try:
        profile = Profile.model_validate(data)
    except ValidationError as e:
        problems.extend(_pydantic_problems(e, locations, file.path))
        raise ProfileError(_dedupe(problems)) from None
    if problems:
        raise ProfileError(problems)
    return LoadedProfile(profile=profile, file=file, chain=chain, locations=locations, data=data, catalogs=catalogs)


# -- templates -----------------------------------------------------------------------------------------
def template_instructions(path: Path) -> str | None:
    """What a template file says to do to fill it in (its ``template:`` value); None for a profile file."""
    try:
        data, _ = read_yaml(path)
    except ProfileError:
        return None
    value = data.get("template")
    return None if value is None else " ".join(str(value).split())


def is_template_file(path: Path) -> bool:
    """Whether ``path`` is a template (a file ``servectl adopt`` may replace without --force)."""
    return template_instructions(path) is not None


# -- extends ------------------------------------------------------------------------------------------
def _resolve(
    file: ProfileFile, folders: Sequence[ProfileFolder], stack: tuple[str, ...]
) -> tuple[dict[str, Any], dict[PathKey, Location], tuple[Path, ...]]:
    data, locations = read_yaml(file.path)
    return _resolve_document(file, data, locations, folders, stack)


def _resolve_document(
    file: ProfileFile,
    data: dict[str, Any],
    locations: dict[PathKey, Location],
    folders: Sequence[ProfileFolder],
    stack: tuple[str, ...],
) -> tuple[dict[str, Any], dict[PathKey, Location], tuple[Path, ...]]:
    base_name = data.get("extends")
    if base_name is None:
        return data, locations, (file.path,)
    where = locate_key(locations, ("extends",), file.path)
    if not isinstance(base_name, str):
        raise ProfileError(
            [Problem(display_path(where[0]), where[1], "extends", "must be a profile name", rule="extends")]
        )
    if base_name in (*stack, file.name):
        cycle = " -> ".join((*stack, file.name, base_name))
        raise ProfileError([Problem(display_path(where[0]), where[1], "extends", f"cycle: {cycle}", rule="extends")])
    try:
        base_file = find_profile(base_name, folders)
    except UsageError as e:
        raise ProfileError([Problem(display_path(where[0]), where[1], "extends", e.message, rule="extends")]) from None
    base_data, base_locations, base_chain = _resolve(base_file, folders, (*stack, file.name))
    merged, merged_locations = _merge(base_data, base_locations, data, locations)
    return merged, merged_locations, (file.path, *base_chain)


def _merge(
    base: dict[str, Any],
    base_locations: dict[PathKey, Location],
    child: dict[str, Any],
    child_locations: dict[PathKey, Location],
) -> tuple[dict[str, Any], dict[PathKey, Location]]:
    """Deep merge: maps merge, lists and scalars replace; locations follow the value that wins.

    Linear in the size of both documents: the locations under a replaced key are found by walking the
    replaced and the replacing values, never by scanning every location.
    """
    locations = dict(base_locations)

    def merge(into: dict[str, Any], over: dict[str, Any], prefix: PathKey) -> dict[str, Any]:
        result = dict(into)
        for key, value in over.items():
            path = (*prefix, str(key))
            if isinstance(value, dict) and isinstance(result.get(key), dict):
                result[key] = merge(result[key], value, path)
                if path in child_locations:
                    locations[path] = child_locations[path]
                continue
            if key in result:
                for stale in _subpaths(result[key], path):
                    locations.pop(stale, None)
            result[key] = value
            for p in _subpaths(value, path):
                if p in child_locations:
                    locations[p] = child_locations[p]
        return result

    merged = merge(base, child, ())
    merged.pop("extends", None)
    locations[()] = child_locations[()]
    return merged, locations


def _subpaths(value: Any, path: PathKey) -> Iterator[PathKey]:
    """``path`` and the path of every key and item nested in ``value`` (as :func:`_walk` records them)."""
    stack: list[tuple[Any, PathKey]] = [(value, path)]
    while stack:
        item, at = stack.pop()
        yield at
        if isinstance(item, dict):
            stack.extend((v, (*at, str(k))) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, (*at, i)) for i, v in enumerate(item))


def _resolve_relative_paths(data: dict[str, Any], locations: Mapping[PathKey, Location]) -> None:
    """Make relative host paths absolute against the folder of the file that wrote them."""

    def fix(container: dict[str, Any], key: str, path: PathKey) -> None:
        value = container.get(key)
        if isinstance(value, str) and value and not value.startswith(("/", "~", "$")):
            file, _ = locations.get(path, (Path.cwd() / "x", 0))
            container[key] = os.path.normpath(str(Path(file).parent / value))

    engine = data.get("engine")
    if isinstance(engine, dict) and str(engine.get("catalog", "")).endswith(".json"):  # a committed catalog file
        fix(engine, "catalog", ("engine", "catalog"))
    for path in _RELATIVE_PATH_FIELDS:
        parent = _get(data, path[:-1])
        if isinstance(parent, dict):
            fix(parent, str(path[-1]), path)
    for list_path, key in _RELATIVE_PATH_LIST_FIELDS:
        items = _get(data, list_path)
        if isinstance(items, list):
            for index, item in enumerate(items):
                if isinstance(item, dict):
                    fix(item, key, (*list_path, index, key))


def _get(data: Any, path: PathKey) -> Any:
    for key in path:
        if isinstance(data, dict) and isinstance(key, str):
            data = data.get(key)
        elif isinstance(data, list) and isinstance(key, int) and key < len(data):
            data = data[key]
        else:
            return None
    return data


# -- pydantic errors -> problems ---------------------------------------------------------------------------
def _pydantic_problems(
    error: ValidationError, locations: Mapping[PathKey, Location], default_file: Path
) -> list[Problem]:
    problems = []
    for item in error.errors(include_url=False):
        path: PathKey = tuple(p for p in item["loc"] if not _is_union_tag(p))
        kind = item["type"]
        if kind == "missing":
            required = _required_fields_at(path)
            message = "missing required key" + (f" (with {', '.join(required)})" if required else "")
        elif kind == "extra_forbidden":
            choices = _field_names_at(path[:-1])
            close = difflib.get_close_matches(str(path[-1]), choices, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else f"allowed keys: {', '.join(choices)}"
            message = f"unknown key; {hint}"
        else:
            shown = item.get("input")
            text = item["msg"].removeprefix("Value error, ")
            message = f"{shown!r}: {text}" if _is_scalar(shown) else text
        problems.append(_problem(locations, path, default_file, message, rule=f"schema.{kind}"))
    return problems


def _is_union_tag(part: str | int) -> bool:
    """Pydantic puts union member names (``int``, ``list[...]``) in error locations; drop them."""
    return isinstance(part, str) and (part in {"int", "float", "str", "bool"} or "[" in part)


def _is_scalar(value: object) -> bool:
    return isinstance(value, str | int | float | bool) or value is None


def _model_at(path: PathKey) -> type[BaseModel] | None:
    """The profile model class that validates the mapping at ``path`` (None for free-form maps)."""
    from servectl.profile.models import Profile

    model: type[BaseModel] | None = Profile
    for part in path:
        if model is None or isinstance(part, int):
            continue
        info = model.model_fields.get(str(part))
        model = model_of(info.annotation) if info else None
    return model


def _field_names_at(path: PathKey) -> list[str]:
    model = _model_at(path)
    return sorted(model.model_fields) if model else []


def _required_fields_at(path: PathKey) -> list[str]:
    model = _model_at(path)
    return [name for name, info in model.model_fields.items() if info.is_required()] if model else []


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (``X``, ``X | None``, ``list[X]``...), or None."""
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = model_of(arg)
        if found:
            return found
    return None


def _problem(
    locations: Mapping[PathKey, Location], path: PathKey, default_file: Path, message: str, rule: str = ""
) -> Problem:
    file, line = locate_key(locations, path, default_file)
    return Problem(file=display_path(file), line=line, field=dotted_path(path), message=message, rule=rule)


def locate_key(locations: Mapping[PathKey, Location], path: PathKey, default_file: Path) -> Location:
    """File and line of the key at ``path``, or of its closest written parent (``default_file``:1 when none)."""
    for cut in range(len(path), -1, -1):
        loc = locations.get(path[:cut])
        if loc is not None and loc[1]:
            return loc
    return (default_file, 1)


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen: set[str] = set()
    out = []
    for problem in problems:
        if str(problem) not in seen:
            seen.add(str(problem))
            out.append(problem)
    return out
