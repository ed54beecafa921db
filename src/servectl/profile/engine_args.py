"""A profile's SGLang flags: each flag with the profile field it came from, the values the engine would parse,
the profile's flag catalog, and the flags the engine (or servectl's policy) refuses. Pure.

The compiler (:mod:`servectl.plan.compile`) puts these flags in the launch plan's argv; the rules
(:mod:`servectl.profile.rules`) read the settings and problems. Loads without pydantic or the catalogs (they are
imported where used), so a cached plan needs neither.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from servectl.profile.catalog import FlagCatalog
    from servectl.profile.models import Profile

PathKey = tuple[str | int, ...]

ADAPTIVE_CONFIG_CONTAINER_PATH = "/etc/servectl/speculative-adaptive.json"

#: The flags a ``swap.standby: warm`` profile starts with (SGLang 0.5.23 ``arg_groups/fields/exec_.py``, cited
#: under ``flags`` in ``profile/catalogs/memory_saver/sglang-0.5.23.json``): the memory saver makes weights and
#: KV cache releasable, the CPU backup keeps a host copy of the weights to resume from.
MEMORY_SAVER_FLAG = "--enable-memory-saver"
WEIGHTS_CPU_BACKUP_FLAG = "--enable-weights-cpu-backup"


@dataclass(frozen=True)
class EngineArg:
    """Command-line tokens of one flag and the profile field that produced them."""

    flag: str
    tokens: tuple[str, ...]
    field: PathKey


def engine_args(profile: Profile, catalog: FlagCatalog) -> list[EngineArg]:
    """The SGLang flags of a profile, each with the field it came from. Pure (memoized per profile object)."""
    hit = _ENGINE_ARGS.get(id(profile))
    if hit is not None and hit[0] is profile and hit[1] is catalog:
        return list(hit[2])
    out = _engine_args(profile, catalog)
    if len(_ENGINE_ARGS) > 32:
        _ENGINE_ARGS.clear()
    _ENGINE_ARGS[id(profile)] = (profile, catalog, tuple(out))
    return out


#: The rules ask for a profile's flags several times; a profile object is not changed once validated.
_ENGINE_ARGS: dict[int, tuple[Profile, FlagCatalog, tuple[EngineArg, ...]]] = {}


def _engine_args(profile: Profile, catalog: FlagCatalog) -> list[EngineArg]:
    from servectl.profile.catalog import BOOL_OPTIONAL, ArgvError, format_value

    p, e = profile, profile.engine
    out: list[EngineArg] = []

    def add(flag: str, value: Any, path: PathKey) -> None:
        if value is None:
            return
        if value is True:
            out.append(EngineArg(flag, (flag,), path))
        elif value is False:
            try:
                opt = catalog.option(flag)
            except ArgvError:  # an ambiguous abbreviation: reported by the engine.catalog rule
                opt = None
            if opt is not None and opt.kind == BOOL_OPTIONAL:
                negative = "--no-" + opt.flags[0][2:]
                out.append(EngineArg(negative, (negative,), path))
        else:
            out.append(EngineArg(flag, (flag, *format_value(value)), path))

    add("--model-path", p.model.container_path, ("model", "container_path"))
    add("--served-model-name", p.model.served_name, ("model", "served_name"))
    add("--host", "0.0.0.0" if p.serve.network == "bridge" else p.serve.host, ("serve", "host"))
    add("--port", p.serve.port, ("serve", "port"))
    add("--tp-size", e.tp, ("engine", "tp"))
    if e.dp != 1:
        add("--dp-size", e.dp, ("engine", "dp"))
    add("--context-length", e.context_length, ("engine", "context_length"))
    add("--max-total-tokens", e.max_total_tokens, ("engine", "max_total_tokens"))
    add("--max-running-requests", e.max_running_requests, ("engine", "max_running_requests"))
    add("--mem-fraction-static", e.mem_fraction_static, ("engine", "mem_fraction_static"))
    add("--kv-cache-dtype", e.kv_cache_dtype, ("engine", "kv_cache_dtype"))
    add("--quantization", e.quantization, ("engine", "quantization"))
    spec = e.speculative
    if spec is not None:
        base: PathKey = ("engine", "speculative")
        add("--speculative-algorithm", spec.algorithm, (*base, "algorithm"))
        add("--speculative-num-steps", spec.num_steps, (*base, "num_steps"))
        add("--speculative-eagle-topk", spec.eagle_topk, (*base, "eagle_topk"))
        add("--speculative-num-draft-tokens", spec.num_draft_tokens, (*base, "num_draft_tokens"))
        add("--speculative-draft-model-path", spec.draft_model_path, (*base, "draft_model_path"))
        if spec.adaptive_steps is not None:
            add("--speculative-adaptive", True, (*base, "adaptive_steps"))
            add("--speculative-adaptive-config", ADAPTIVE_CONFIG_CONTAINER_PATH, (*base, "adaptive_steps"))
    if p.swap.standby == "warm":  # SGLang's memory saver, so a swap away can release the cards and keep the engine
        add(MEMORY_SAVER_FLAG, True, ("swap", "standby"))
        if catalog.option(WEIGHTS_CPU_BACKUP_FLAG) is not None:  # resume copies the weights back from host RAM
            add(WEIGHTS_CPU_BACKUP_FLAG, True, ("swap", "standby"))
    for key, value in e.args.items():
        try:  # written abbreviated, compiled in full (the engine accepts both; people read the full name)
            flag = catalog.expand("--" + key)
        except ArgvError:
            flag = "--" + key  # ambiguous: reported by the engine.catalog rule
        add(flag, value, ("engine", "args", key))
    return out


@dataclass(frozen=True)
class Setting:
    """The value an engine option gets, as the engine parses it, and the profile field that set it."""

    value: Any
    field: PathKey


def effective_settings(profile: Profile, catalog: FlagCatalog) -> dict[str, Setting]:
    """``{dest: Setting}`` for every flag the profile compiles to that the engine would parse.

    Rules read settings here, so a value counts wherever it is written: a typed key or ``args``, any
    spelling or abbreviation of the flag, a string or a number (``"19"`` and ``19`` alike).
    """
    from servectl.profile.catalog import ArgvError

    out: dict[str, Setting] = {}
    for arg in engine_args(profile, catalog):
        try:
            parsed = catalog.parse_argv(list(arg.tokens))
        except ArgvError:
            continue  # reported by the engine.catalog rule
        for dest, value in parsed.items():
            out[dest] = Setting(value, arg.field)  # the last one wins, as in the engine
    return out


def mem_fraction_static(profile: Profile, *, catalogs: Path) -> float | None:
    """``--mem-fraction-static`` as the engine gets it, however the profile wrote it (the typed
    ``engine.mem_fraction_static`` or ``engine.args``, any spelling, a string or a number); None: not set (or
    the catalog cannot be read, which the engine.catalog rule reports). ``catalogs``: as for :func:`catalog_for`."""
    try:
        setting = effective_settings(profile, catalog_for(profile, catalogs=catalogs)).get("mem_fraction_static")
    except (KeyError, ValueError):
        return profile.engine.mem_fraction_static
    if setting is None or setting.value is None:
        return None
    return float(setting.value)


def catalog_for(profile: Profile, *, catalogs: Path) -> FlagCatalog:
    """The profile's flag catalog, extended for its image when the profile says so.

    ``catalogs`` is the catalog folder of the host the profile was loaded on
    (:attr:`servectl.profile.loader.LoadedProfile.catalogs`), where ``engine.catalog: image`` and a ``sha256:``
    id find the catalog extracted from the image; a shipped catalog or a catalog file needs no folder.

    Raises:
        KeyError: unknown catalog name, or no catalog extracted yet from the profile's image.
        ValueError: a malformed extension.
    """
    from servectl.profile.catalog_store import load_catalog

    image = profile.image
    stored = load_catalog(profile.engine.catalog, image_ref=image.ref, image_digest=image.digest, directory=catalogs)
    catalog = stored.catalog
    ext = profile.engine.catalog_extend
    if ext is not None:
        # by the file it came from: `image` names a different catalog for each image
        key = (str(stored.path), json.dumps(ext.model_dump(), sort_keys=True, default=str))
        extended = _EXTENDED.get(key)
        if extended is None:
            extended = _EXTENDED[key] = catalog.extended(ext.model_dump())
        catalog = extended
    return catalog


#: Extended catalogs by (base catalog file, extension): rules ask for a profile's catalog many times.
_EXTENDED: dict[tuple[str, str], FlagCatalog] = {}


def catalog_problems(profile: Profile, catalog: FlagCatalog) -> Iterator[tuple[PathKey, str]]:
    """Every flag the profile compiles to, checked as the engine's parser checks it: (field, message) per problem.

    Only what the engine itself rejects; servectl's stricter policies (one place per flag, no API key as a
    flag) are :func:`policy_flag_problems`.
    """
    from servectl.profile.catalog import ArgvError

    for arg in engine_args(profile, catalog):
        try:
            opt = catalog.option(arg.flag)
        except ArgvError as err:
            yield arg.field, f"{err}; spell the flag out"
            continue
        if opt is None:
            close = catalog.close_matches(arg.flag)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            yield arg.field, f"{arg.flag} is not a flag of catalog {catalog.name}{hint}"
            continue
        try:
            catalog.parse_argv(list(arg.tokens))
        except ArgvError as err:
            yield arg.field, str(err)


def policy_flag_problems(profile: Profile, catalog: FlagCatalog) -> Iterator[tuple[str, PathKey, str]]:
    """Flags the engine would take but servectl refuses on purpose: (rule name, field, message)."""
    from servectl.profile.catalog import ArgvError

    owner_of: dict[str, PathKey] = {}
    for arg in engine_args(profile, catalog):
        try:
            opt = catalog.option(arg.flag)
        except ArgvError:
            continue
        if opt is None:
            continue
        if opt.dest in owner_of:
            other = ".".join(str(p) for p in owner_of[opt.dest])
            yield "engine.duplicate_flag", arg.field, f"{arg.flag} is already set by {other}; set it in one place only"
            continue
        owner_of[opt.dest] = arg.field
        if opt.dest == "api_key":
            message = "the API key is never written in a profile; use serve.api_key_env or serve.api_key_file"
            yield "engine.api_key_flag", arg.field, message
        elif opt.dest == "admin_api_key":
            message = (
                "the admin key is never written in a profile; use serve.admin_api_key_env or "
                "serve.admin_api_key_file (servectl passes it to the engine and sends it on release and resume)"
            )
            yield "engine.admin_api_key_flag", arg.field, message


__all__ = [
    "ADAPTIVE_CONFIG_CONTAINER_PATH",
    "EngineArg",
    "PathKey",
    "Setting",
    "catalog_for",
    "catalog_problems",
    "effective_settings",
    "engine_args",
    "policy_flag_problems",
]
