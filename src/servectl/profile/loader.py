"""Find, read, merge and schema-validate profile files.

Profiles are searched in ``./profiles``, then each folder of ``SERVECTL_PROFILES`` (colon-separated), then
the user's config folder, then the profiles shipped with servectl; the first file named ``<name>.yaml``
wins. ``extends`` merges deeply (maps merge, lists and scalars replace) and resolves through the same search
path. Every problem is reported with the file and line where the offending key was written, which for an
inherited key is the base file.

This layer checks the schema only; the cross-field rules (``servectl.plan.rules``) run on top of it in
:func:`servectl.plan.validate.load_profile`, the entry point every command uses.
"""

from __future__ import annotations

import difflib
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl.errors import Problem, ProfileError, ProfileTemplate, UsageError
from servectl.files import FileRefused, read_bounded
from servectl.paths import SHIPPED_PROFILES_DIR as SHIPPED_PROFILES_DIR  # re-exported
from servectl.paths import user_profiles_dir

if TYPE_CHECKING:  # PyYAML, pydantic and the models load on first read: finding and listing files needs none
    import yaml
    from pydantic import BaseModel, ValidationError

    from servectl.profile.models import Profile

PathKey = tuple[str | int, ...]
Location = tuple[Path, int]

#: Profile fields holding host paths that are relative to the file that sets them.
_RELATIVE_PATH_FIELDS: tuple[PathKey, ...] = (
    ("model", "path"),
    ("serve", "api_key_file"),
)
_RELATIVE_PATH_LIST_FIELDS: tuple[tuple[PathKey, str], ...] = (
    (("container", "mounts"), "source"),
    (("conflicts",), "compose_file"),
)


def _yaml_loader(text: str) -> Any:
    """A safe loader of ``text``: libyaml's when PyYAML was built with it (same marks, several times faster)."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)


#: Bounds on one profile file (untrusted input): bytes read, values after expanding aliases, nesting depth,
#: and seconds spent reading it (checked between the parsing steps, each linear in the bounded size).
#: 80,000 ``engine.env`` keys (about 1.7 MB, 1.3 s) stay inside them; the shipped profiles are a few KB.
MAX_PROFILE_BYTES = 4 * 2**20
MAX_YAML_NODES = 1_000_000
MAX_YAML_DEPTH = 64
READ_BUDGET_S = 5.0


@dataclass(frozen=True)
class ProfileFolder:
    """One folder of the search path and where it came from."""

    path: Path
    origin: str  # "./profiles", "SERVECTL_PROFILES", "user", "shipped"


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

    def location(self, path: PathKey) -> Location:
        """File and line of the key at ``path`` (or of its closest written parent)."""
        return _locate(self.locations, path, self.file.path)

    def problem(self, path: PathKey, message: str, rule: str = "") -> Problem:
        """A problem at a dotted field path, located in the file that wrote it."""
        file, line = self.location(path)
        return Problem(file=_display(file), line=line, field=_dotted(path), message=message, rule=rule)


def search_path(*, cwd: Path | None = None, environ: Mapping[str, str] | None = None) -> list[ProfileFolder]:
    """The profile folders in search order."""
    env = os.environ if environ is None else environ
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
    return unique


def discover(folders: Sequence[ProfileFolder] | None = None) -> dict[str, ProfileFile]:
    """All profile files on the search path by name; the first folder that has a name wins."""
    found: dict[str, ProfileFile] = {}
    for folder in search_path() if folders is None else folders:
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


def find_profile(name: str, folders: Sequence[ProfileFolder] | None = None) -> ProfileFile:
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
    searched = ", ".join(str(f.path) for f in (search_path() if folders is None else folders))
    raise UsageError(f"profile {name!r} not found in {searched}{hint}")


def read_profile(name: str, *, folders: Sequence[ProfileFolder] | None = None) -> LoadedProfile:
    """Find, merge and schema-validate profile ``name`` (no cross-field rules; see ``plan.validate``).

    Raises:
        UsageError: the profile does not exist.
        ProfileError: every schema problem in the file and its bases, one per line.
    """
    file = find_profile(name, folders)
    return read_profile_file(file, folders=folders)


def read_profile_file(file: ProfileFile, *, folders: Sequence[ProfileFolder] | None = None) -> LoadedProfile:
    """Merge and schema-validate the profile in ``file`` (see :func:`read_profile`).

    Raises:
        ProfileTemplate: the file is a template (a ``template:`` key says how to fill it in).
    """
    data, locations, chain = _resolve(file, folders, stack=())
    if data.get("template") is not None:
        where, line = _locate(locations, ("template",), file.path)
        raise ProfileTemplate(file.name, " ".join(str(data["template"]).split()), file=_display(where), line=line)
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
    return LoadedProfile(profile=profile, file=file, chain=chain, locations=locations, data=data)


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


# -- YAML with locations -------------------------------------------------------------------------------
def read_yaml(path: Path) -> tuple[dict[str, Any], dict[PathKey, Location]]:
    """Parse one YAML mapping and the line of every key in it.

    A profile is untrusted input: the file size, the nodes after expanding aliases, the nesting depth and the
    time spent reading it are bounded (an alias bomb is refused before anything walks it), and every decoding
    error becomes one problem naming the file.

    Raises:
        ProfileError: the file cannot be read, is too big or too slow to read, is not UTF-8 YAML, is not a
            mapping, or repeats a key.
    """
    import yaml

    shown = _display(path)
    deadline = time.monotonic() + READ_BUDGET_S

    def fail(message: str, line: int | None = None) -> ProfileError:
        return ProfileError([Problem(shown, line, "", message, rule="yaml")])

    def in_budget() -> None:
        if time.monotonic() > deadline:
            raise fail(
                f"took more than {READ_BUDGET_S:g} s to read ({len(raw):,} bytes); a profile is a small text "
                "file: split it, or remove what repeats"
            )

    raw = b""
    try:  # a FIFO, socket, device, folder or link loop is refused without blocking
        raw = read_bounded(path, limit_bytes=MAX_PROFILE_BYTES, what="profile")
    except FileRefused as e:
        raise fail(e.reason) from None
    except OSError as e:
        raise fail(f"cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise fail(f"not UTF-8 text (byte {e.start}); a profile is a YAML text file", line) from None
    try:
        # Only a text that could nest too deep pays for a pass over its events (a tenth of the read)
        deep = _nesting_bound(text) > MAX_YAML_DEPTH
        has_aliases = _check_nesting(text, shown) if deep else "*" in text
        in_budget()
        loader = _yaml_loader(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise fail(f"YAML syntax: {e.problem or e.context}", mark.line + 1 if mark else None) from None
    except yaml.YAMLError as e:  # the reader rejects control characters before parsing starts
        raise fail(f"YAML: {(str(e).splitlines() or [type(e).__name__])[0]}") from None
    locations: dict[PathKey, Location] = {(): (path, 1)}
    problems: list[Problem] = []
    try:
        node = loader.get_single_node()
        in_budget()
        if isinstance(node, yaml.MappingNode):
            if has_aliases:
                _check_expansion(node, shown)
            _walk(node, path, locations, problems)
            in_budget()
            data = loader.construct_document(node)
            in_budget()
        else:
            data = None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise fail(f"YAML syntax: {e.problem or e.context}", mark.line + 1 if mark else None) from None
    except yaml.YAMLError as e:
        raise fail(f"YAML: {(str(e).splitlines() or [type(e).__name__])[0]}") from None
    except (ValueError, OverflowError, TypeError) as e:  # a timestamp or number the constructor cannot build
        raise fail(f"YAML value: {(str(e).splitlines() or [type(e).__name__])[0]}") from None
    except RecursionError:
        raise fail(f"nested deeper than {MAX_YAML_DEPTH} levels") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise ProfileError([Problem(shown, 1, "", "a profile must be a YAML mapping of keys to values", rule="yaml")])
    if problems:
        raise ProfileError(problems)
    return data, locations


_LINE_PREFIX = re.compile(r"^[ ?:-]*", re.MULTILINE)


def _nesting_bound(text: str) -> int:
    """An upper bound on the nesting depth, from the text alone.

    A block collection nested one level deeper starts one column further right (its indentation, or the
    ``- ``/``? `` before it on the line), and a flow collection needs its own ``[`` or ``{``.
    """
    prefix = max(map(len, _LINE_PREFIX.findall(text)), default=0)
    return prefix + text.count("[") + text.count("{") + 1


def _check_nesting(text: str, shown: str) -> bool:
    """Refuse nesting deeper than :data:`MAX_YAML_DEPTH` from the event stream, before composing.

    PyYAML's composer recurses once per level (quadratic time, and a crash near 40,000 levels, which a
    small file of ``[`` or ``- `` reaches); the event stream is flat and stops at the first level too deep.

    Returns:
        Whether the document uses aliases (only then can it expand beyond its own size).
    """
    import yaml

    loader = _yaml_loader(text)
    depth = 0
    aliases = False
    try:
        while (event := loader.get_event()) is not None:
            if isinstance(event, yaml.ScalarEvent):  # most events; nothing to count
                continue
            if isinstance(event, yaml.AliasEvent):
                aliases = True
            elif isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    line = event.start_mark.line + 1 if event.start_mark else None
                    raise ProfileError(
                        [Problem(shown, line, "", f"nested deeper than {MAX_YAML_DEPTH} levels", rule="yaml")]
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    finally:
        loader.dispose()
    return aliases


def _check_expansion(root: yaml.Node, shown: str) -> None:
    """Refuse a node tree that expands to too many values, nests too deep, or refers to itself.

    Runs before anything is constructed or walked, in time linear in the *distinct* nodes: sizes and
    heights are memoised per node, so an alias bomb (a few lines, billions of values once expanded, also
    through ``<<`` merges) is refused in milliseconds. Iterative, so depth cannot exhaust Python's stack.
    """
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        children = _children(node)
        if done:
            on_path.discard(id(node))
            size[id(node)] = 1 + sum(size[id(c)] for c in children)
            height[id(node)] = 1 + max((height[id(c)] for c in children), default=0)
            if size[id(node)] > MAX_YAML_NODES:
                message = (
                    f"more than {MAX_YAML_NODES:,} values after expanding aliases; "
                    "a profile this big is a mistake (or an alias bomb): remove the repeated aliases"
                )
                raise ProfileError([Problem(shown, None, "", message, rule="yaml")])
            if height[id(node)] > MAX_YAML_DEPTH:
                line = node.start_mark.line + 1
                raise ProfileError(
                    [Problem(shown, line, "", f"nested deeper than {MAX_YAML_DEPTH} levels", rule="yaml")]
                )
            continue
        if id(node) in size:
            continue
        if id(node) in on_path:
            line = node.start_mark.line + 1
            raise ProfileError([Problem(shown, line, "", "an alias refers to a value that contains it", rule="yaml")])
        on_path.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in size)


def _children(node: yaml.Node) -> list[yaml.Node]:
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _walk(node: yaml.Node, path: Path, out: dict[PathKey, Location], problems: list[Problem]) -> None:
    """Record the line of every key and item, and flag repeated keys (after :func:`_check_expansion`)."""
    import yaml

    shown = _display(path)
    stack: list[tuple[yaml.Node, PathKey]] = [(node, ())]
    while stack:
        current, prefix = stack.pop()
        if isinstance(current, yaml.MappingNode):
            seen: set[str] = set()
            for key_node, value_node in current.value:
                key = str(key_node.value)
                child = (*prefix, key)
                line = key_node.start_mark.line + 1
                if key in seen:
                    problems.append(Problem(shown, line, _dotted(child), "key repeats; keep one", rule="yaml"))
                seen.add(key)
                out[child] = (path, line)
                if not isinstance(value_node, yaml.ScalarNode):  # most values: nothing below them
                    stack.append((value_node, child))
        elif isinstance(current, yaml.SequenceNode):
            for index, item in enumerate(current.value):
                child = (*prefix, index)
                out[child] = (path, item.start_mark.line + 1)
                if not isinstance(item, yaml.ScalarNode):
                    stack.append((item, child))


# -- extends ------------------------------------------------------------------------------------------
def _resolve(
    file: ProfileFile, folders: Sequence[ProfileFolder] | None, stack: tuple[str, ...]
) -> tuple[dict[str, Any], dict[PathKey, Location], tuple[Path, ...]]:
    data, locations = read_yaml(file.path)
    base_name = data.get("extends")
    if base_name is None:
        return data, locations, (file.path,)
    where = _locate(locations, ("extends",), file.path)
    if not isinstance(base_name, str):
        raise ProfileError([Problem(_display(where[0]), where[1], "extends", "must be a profile name", rule="extends")])
    if base_name in (*stack, file.name):
        cycle = " -> ".join((*stack, file.name, base_name))
        raise ProfileError([Problem(_display(where[0]), where[1], "extends", f"cycle: {cycle}", rule="extends")])
    try:
        base_file = find_profile(base_name, folders)
    except UsageError as e:
        raise ProfileError([Problem(_display(where[0]), where[1], "extends", e.message, rule="extends")]) from None
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
        model = _model_of(info.annotation) if info else None
    return model


def _field_names_at(path: PathKey) -> list[str]:
    model = _model_at(path)
    return sorted(model.model_fields) if model else []


def _required_fields_at(path: PathKey) -> list[str]:
    model = _model_at(path)
    return [name for name, info in model.model_fields.items() if info.is_required()] if model else []


def _model_of(annotation: Any) -> type[BaseModel] | None:
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_of(arg)
        if found:
            return found
    return None


def _problem(
    locations: Mapping[PathKey, Location], path: PathKey, default_file: Path, message: str, rule: str = ""
) -> Problem:
    file, line = _locate(locations, path, default_file)
    return Problem(file=_display(file), line=line, field=_dotted(path), message=message, rule=rule)


def _locate(locations: Mapping[PathKey, Location], path: PathKey, default_file: Path) -> Location:
    for cut in range(len(path), -1, -1):
        loc = locations.get(path[:cut])
        if loc is not None and loc[1]:
            return loc
    return (default_file, 1)


def _dotted(path: PathKey) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen: set[str] = set()
    out = []
    for problem in problems:
        if str(problem) not in seen:
            seen.add(str(problem))
            out.append(problem)
    return out
