"""Read a campaign file: the schema, the references between its sections, and its variants spelled out.

Every problem is one :class:`~servectl.errors.Problem` with the file and line of the key that holds it
(``campaign.yaml:14: decision.primary_point: 'c8' is no workload point (c1, c4)``), all reported at once
(:class:`~servectl.errors.ProfileError`, exit 2). The variants come out as :class:`VariantSpec`: the explicit
ones in file order, then the product of the axes (the first axis varying slowest) less the excluded
combinations, each with the file and line of every key its overrides set.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from servectl.campaign.model import AxisValue, Campaign
from servectl.campaign.schedule import INCUMBENT
from servectl.errors import Problem, ProfileError
from servectl.profile.loader import locate_key, model_of
from servectl.profile.yaml_locations import Location, PathKey, display_path, dotted_path, read_yaml

SCHEMA_REF = "# yaml-language-server: $schema=../schema/campaign.schema.json"
#: A variant's profile is named ``<campaign>.<variant>``; profile names are at most 63 characters.
MAX_PROFILE_NAME = 63


@dataclass(frozen=True)
class VariantSpec:
    """One variant spelled out: its name, its overrides of the base, and where each override was written."""

    name: str
    description: str
    overrides: Mapping[str, Any]
    #: file and line of each key of ``overrides`` (paths relative to ``overrides``), and ``()`` for the variant
    locations: Mapping[PathKey, Location] = field(repr=False)
    #: the axis values that made it (empty for an explicit variant)
    axes: Mapping[str, AxisValue] = field(default_factory=dict)


@dataclass(frozen=True)
class LoadedCampaign:
    """A checked campaign file, its variants spelled out, and where each of its keys was written."""

    campaign: Campaign
    path: Path
    variants: tuple[VariantSpec, ...]
    locations: Mapping[PathKey, Location] = field(repr=False)

    def location(self, path: PathKey) -> Location:
        """File and line of the key at ``path`` (or of its closest written parent)."""
        return locate_key(self.locations, path, self.path)

    def problem(self, path: PathKey, message: str, rule: str = "campaign") -> Problem:
        """A problem at a field path of the campaign file, located at the closest written key."""
        return _problem(self.locations, path, self.path, message, rule)

    def profile_name(self, variant: str) -> str:
        """The name of variant ``variant``'s profile: ``<campaign>.<variant>``."""
        return f"{self.campaign.name}.{variant}"


def load_campaign(path: Path) -> LoadedCampaign:
    """Read and check a campaign file, and spell out its variants (the profiles are not loaded here).

    Raises:
        ProfileError: every problem in the file, one per line with file and line (exit 2).
    """
    data, locations = read_yaml(path)
    try:
        campaign = Campaign.model_validate(data)
    except ValidationError as err:
        raise ProfileError(_pydantic_problems(err, locations, path)) from None
    loaded = LoadedCampaign(campaign=campaign, path=path, variants=(), locations=locations)
    problems = _reference_problems(loaded)
    variants, variant_problems = _spell_out(loaded)
    problems.extend(variant_problems)
    if problems:
        raise ProfileError(problems)
    return LoadedCampaign(campaign=campaign, path=path, variants=tuple(variants), locations=locations)


# -- between sections --------------------------------------------------------------------------------------
def _reference_problems(loaded: LoadedCampaign) -> list[Problem]:
    c = loaded.campaign
    problems: list[Problem] = []
    points = [p.name for p in c.workload.points]
    if c.decision.primary_point not in points:
        problems.append(
            loaded.problem(
                ("decision", "primary_point"),
                f"{c.decision.primary_point!r} is no workload point; one of: {', '.join(points)}",
            )
        )
    for index, entry in enumerate(c.exclude):
        if not entry:
            problems.append(loaded.problem(("exclude", index), "an empty entry excludes every combination; remove it"))
        for key in sorted(set(entry) - set(c.axes)):
            close = difflib.get_close_matches(key, list(c.axes), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"axes: {', '.join(c.axes) or 'none'}"
            problems.append(loaded.problem(("exclude", index, key), f"no such axis; {hint}"))
        for key, value in entry.items():
            if key in c.axes and not any(_same(value, v) for v in c.axes[key]):
                problems.append(
                    loaded.problem(("exclude", index, key), f"{value!r} is not a value of this axis {c.axes[key]}")
                )
    if not c.variants and not c.axes:
        problems.append(loaded.problem((), "no variants: give `variants` (a list of overrides) or `axes`"))
    seen: set[str] = set()
    variants = {v.name for v in c.variants}
    for index, objective in enumerate(c.objectives):
        at: PathKey = ("objectives", index, "name")
        if objective.name in seen:
            problems.append(loaded.problem(at, f"{objective.name!r} is named twice"))
        elif objective.name in variants:  # both write the profile <campaign>.<name>
            problems.append(loaded.problem(at, f"{objective.name!r} names a variant too; rename one of them"))
        seen.add(objective.name)
        full = loaded.profile_name(objective.name)
        if len(full) > MAX_PROFILE_NAME:
            problems.append(
                loaded.problem(
                    at,
                    f"profile name {full!r} is longer than {MAX_PROFILE_NAME} characters; shorten the campaign or "
                    "objective name",
                )
            )
    return problems


# -- variants ----------------------------------------------------------------------------------------------
def _spell_out(loaded: LoadedCampaign) -> tuple[list[VariantSpec], list[Problem]]:
    c = loaded.campaign
    out: list[VariantSpec] = []
    for index, variant in enumerate(c.variants):
        prefix: PathKey = ("variants", index, "overrides")
        own = {
            key[len(prefix) :]: loc
            for key, loc in loaded.locations.items()
            if key[: len(prefix)] == prefix and len(key) > len(prefix)
        }
        own[()] = locate_key(loaded.locations, ("variants", index), loaded.path)
        out.append(VariantSpec(variant.name, variant.description, variant.overrides, own))
    keys = list(c.axes)
    combos = itertools.product(*(list(enumerate(c.axes[k])) for k in keys)) if keys else iter(())
    for combo in combos:
        values = {k: v for k, (_, v) in zip(keys, combo, strict=True)}
        if any(all(k in values and _same(values[k], v) for k, v in entry.items()) for entry in c.exclude if entry):
            continue
        overrides: dict[str, Any] = {}
        locations: dict[PathKey, Location] = {(): locate_key(loaded.locations, ("axes",), loaded.path)}
        for key, (value_index, value) in zip(keys, combo, strict=True):
            parts = tuple(key.split("."))
            _set_in(overrides, parts, value)
            where = locate_key(loaded.locations, ("axes", key, value_index), loaded.path)
            for cut in range(1, len(parts) + 1):
                locations[parts[:cut]] = where
        description = ", ".join(f"{k}={_show(v)}" for k, v in values.items())
        out.append(VariantSpec(axis_variant_name(values), description, overrides, locations, values))
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for position, spec in enumerate(out):
        where = spec.locations[()]
        if spec.name == INCUMBENT:
            problems.append(
                Problem(
                    display_path(where[0]),
                    where[1],
                    "variants",
                    "'incumbent' names the incumbent; rename the variant",
                    "campaign",
                )
            )
        if spec.name in seen:
            problems.append(
                Problem(
                    display_path(where[0]), where[1], "variants", f"variant {spec.name!r} is named twice", "campaign"
                )
            )
        seen[spec.name] = position
        full = loaded.profile_name(spec.name)
        if len(full) > MAX_PROFILE_NAME:
            problems.append(
                Problem(
                    display_path(where[0]),
                    where[1],
                    "variants",
                    f"profile name {full!r} is longer than {MAX_PROFILE_NAME} characters; shorten the campaign or "
                    "variant name",
                    "campaign",
                )
            )
    return out, problems


def axis_variant_name(values: Mapping[str, AxisValue]) -> str:
    """The name of the variant made of axis ``values``: each axis's last field part and its value
    (``max_running_requests-4_chunked-prefill-size-512``); over 40 characters, each part by its initials
    (``mrr4_cps512``); still over, cut and made unique by a short hash."""

    def joined(label: Callable[[str], str]) -> str:
        parts = [f"{label(key.rsplit('.', 1)[-1])}{_show(value)}" for key, value in values.items()]
        return re.sub(r"[^a-z0-9._-]+", "-", "_".join(parts).lower()).strip("-._") or "axes"

    name = joined(lambda field: f"{field}-")
    if len(name) <= 40:
        return name
    name = joined(lambda field: "".join(word[0] for word in re.split(r"[-_]+", field) if word))
    if len(name) <= 40:
        return name
    import hashlib

    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:31].rstrip('-._')}-{digest}"


def _same(a: AxisValue, b: AxisValue) -> bool:
    """Equal and of one type (``True`` is not ``1`` here, as it is not on an engine's command line)."""
    return type(a) is type(b) and a == b


def _show(value: AxisValue) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _set_in(into: dict[str, Any], parts: tuple[str, ...], value: Any) -> None:
    for part in parts[:-1]:
        into = into.setdefault(part, {})
    into[parts[-1]] = value


# -- locations and pydantic errors ----------------------------------------------------------------------------
def _problem(locations: Mapping[PathKey, Location], path: PathKey, default: Path, message: str, rule: str) -> Problem:
    file, line = locate_key(locations, path, default)
    return Problem(display_path(file), line, dotted_path(path), message, rule)


def _pydantic_problems(err: ValidationError, locations: Mapping[PathKey, Location], path: Path) -> list[Problem]:
    problems: list[Problem] = []
    for item in err.errors(include_url=False):
        loc: PathKey = tuple(p for p in item["loc"] if not (isinstance(p, str) and ("[" in p or p in _UNION_TAGS)))
        problems.append(_problem(locations, loc, path, _message(item, loc), f"schema.{item['type']}"))
    return list({str(p): p for p in problems}.values())  # pydantic may report one key twice


_UNION_TAGS = frozenset({"str", "int", "float", "bool", "none", "list", "dict"})


def _message(item: Any, loc: PathKey) -> str:
    kind = item["type"]
    if kind == "extra_forbidden":
        names = _fields_at(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
        return "unknown key; " + (f"did you mean {close[0]!r}?" if close else f"allowed keys: {', '.join(names)}")
    if kind == "missing":
        return "missing required key"
    text = str(item["msg"]).removeprefix("Value error, ")
    value = item.get("input")
    if not isinstance(value, str | int | float | bool) or text.startswith(repr(value)):
        return text
    return f"{value!r}: {text}"


def _fields_at(loc: PathKey) -> list[str]:
    model: Any = Campaign
    for part in loc:
        if isinstance(part, int):
            continue
        fields = model.model_fields if isinstance(model, type) and issubclass(model, BaseModel) else {}
        info = fields.get(str(part))
        model = model_of(info.annotation) if info else None
    if isinstance(model, type) and issubclass(model, BaseModel):
        return sorted(model.model_fields)
    return []
