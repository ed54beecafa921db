"""Flag catalogs: every option an engine build's command-line parser accepts.

A catalog is a JSON file (``catalogs/<name>.json``) extracted from the engine's own argparse parser: flag
spellings with aliases, dest, kind, value type, nargs, choices and defaults. Custom images add flags and
choices, so a catalog can be *extended* (``FlagCatalog.extended``) with a mapping of the form::

    {"choices": {"quantization": ["exl3"]},                       # keyed by flag name or dest
     "options": [{"flags": ["--sparkinfer-foo"], "kind": "value", "type": "str"}]}

This module is standard-library only on purpose: the stand-in engine image carries it to parse its argv
exactly as servectl validated it.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

CATALOG_DIR = Path(__file__).resolve().parent / "catalogs"

#: Kinds of options as extracted from argparse actions.
VALUE = "value"  # takes a value (type, nargs, choices)
SWITCH = "switch"  # store_true: takes no value
BOOL_OPTIONAL = "bool-optional"  # --x / --no-x
SWITCH_DEPRECATED = "switch-deprecated"  # store_true, deprecated
CONST_DEPRECATED = "const-deprecated"  # store_const, deprecated: takes no value
_NO_VALUE_KINDS = frozenset({SWITCH, BOOL_OPTIONAL, SWITCH_DEPRECATED, CONST_DEPRECATED})
_KINDS = frozenset({VALUE, *_NO_VALUE_KINDS})


class ArgvError(ValueError):
    """An argv the engine's parser would reject; the message reads like argparse's."""


@dataclass(frozen=True)
class CatalogOption:
    """One option of the engine parser."""

    flags: tuple[str, ...]
    dest: str
    kind: str
    type: str | None = None
    nargs: str | None = None
    choices: tuple[str, ...] | None = None
    default: Any = None

    @property
    def takes_value(self) -> bool:
        """Whether the flag is followed by a value on the command line."""
        return self.kind == VALUE

    @property
    def deprecated(self) -> bool:
        return self.kind.endswith("-deprecated")

    @property
    def primary_flag(self) -> str:
        return self.flags[0]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CatalogOption:
        flags = tuple(data["flags"])
        if not flags or not all(isinstance(f, str) and f.startswith("--") for f in flags):
            raise ValueError(f"option flags must start with '--': {flags!r}")
        kind = data.get("kind", VALUE)
        if kind not in _KINDS:
            raise ValueError(f"option {flags[0]}: unknown kind {kind!r} (one of {sorted(_KINDS)})")
        choices = data.get("choices")
        return cls(
            flags=flags,
            dest=data.get("dest") or flags[0][2:].replace("-", "_"),
            kind=kind,
            type=data.get("type"),
            nargs=None if data.get("nargs") in (None, "None") else str(data["nargs"]),
            choices=tuple(str(c) for c in choices) if choices is not None else None,
            default=data.get("default"),
        )


@dataclass(frozen=True)
class FlagCatalog:
    """The options one engine build accepts, with lookup by any spelling."""

    name: str
    engine: str
    version: str
    options: tuple[CatalogOption, ...]
    _by_flag: dict[str, CatalogOption] = field(init=False, repr=False, compare=False)
    _by_dest: dict[str, CatalogOption] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_flag: dict[str, CatalogOption] = {}
        by_dest: dict[str, CatalogOption] = {}
        for opt in self.options:
            for flag in opt.flags:
                by_flag[flag] = opt
            if opt.kind == BOOL_OPTIONAL:
                by_flag.setdefault("--no-" + opt.flags[0][2:], opt)
            by_dest.setdefault(opt.dest, opt)
        object.__setattr__(self, "_by_flag", by_flag)
        object.__setattr__(self, "_by_dest", by_dest)

    # -- construction -------------------------------------------------------------------------------
    @staticmethod
    def available() -> list[str]:
        """Names of the catalogs shipped with servectl."""
        return sorted(p.stem for p in CATALOG_DIR.glob("*.json"))

    @classmethod
    def load(cls, name: str) -> FlagCatalog:
        """Load a shipped catalog by name, e.g. ``sglang-0.5.23``.

        Raises:
            KeyError: no catalog of that name is shipped (the message lists those that are).
        """
        path = CATALOG_DIR / f"{name}.json"
        if not re.fullmatch(r"[A-Za-z0-9._+-]+", name) or not path.is_file():
            raise KeyError(f"unknown flag catalog {name!r}; shipped catalogs: {', '.join(cls.available())}")
        return _load_path(path)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, name: str) -> FlagCatalog:
        return cls(
            name=name,
            engine=str(data.get("engine", "sglang")),
            version=str(data.get("version", "")),
            options=tuple(CatalogOption.from_dict(o) for o in data["options"]),
        )

    def extended(self, extension: Mapping[str, Any]) -> FlagCatalog:
        """A copy with extra flags and choices, for a custom image whose parser adds them.

        Raises:
            ValueError: the extension names an unknown option, redefines an existing flag, or is malformed.
        """
        unknown_keys = set(extension) - {"choices", "options"}
        if unknown_keys:
            raise ValueError(f"catalog extension: unknown keys {sorted(unknown_keys)} (use 'choices', 'options')")
        options = list(self.options)
        index = {opt.dest: i for i, opt in enumerate(options)}
        for key, extra in (extension.get("choices") or {}).items():
            opt = self.option(key)
            if opt is None:
                raise ValueError(f"catalog extension: choices for unknown option {key!r}")
            if opt.choices is None:
                raise ValueError(f"catalog extension: option {opt.primary_flag} takes any value, not choices")
            added = tuple(str(c) for c in extra if str(c) not in opt.choices)
            options[index[opt.dest]] = replace(opt, choices=opt.choices + added)
        for raw in extension.get("options") or ():
            new = CatalogOption.from_dict(raw)
            clash = [f for f in new.flags if f in self._by_flag]
            if clash:
                raise ValueError(f"catalog extension: flag {clash[0]} already exists in {self.name}")
            options.append(new)
        return FlagCatalog(name=f"{self.name}+ext", engine=self.engine, version=self.version, options=tuple(options))

    # -- lookup -------------------------------------------------------------------------------------
    def option(self, name: str) -> CatalogOption | None:
        """Find an option by flag (``--tp-size``), flag without dashes (``tp-size``), alias, dest, or a
        unique prefix as argparse allows (``--tp`` for ``--tp-size``).

        Raises:
            ArgvError: the name is a prefix of several different options.
        """
        flag = name if name.startswith("--") else "--" + name
        exact = self._by_flag.get(flag) or (None if name.startswith("--") else self._by_dest.get(name))
        if exact is not None:
            return exact
        matches = {opt.dest: opt for f, opt in self._by_flag.items() if f.startswith(flag)}
        if len(matches) == 1:
            return next(iter(matches.values()))
        if len(matches) > 1:
            spelled = ", ".join(sorted(o.primary_flag for o in matches.values())[:6])
            raise ArgvError(f"ambiguous option: {flag} could match {spelled}")
        return None

    def close_matches(self, name: str, n: int = 3) -> list[str]:
        """Flag names (without dashes) that look like ``name``, for "did you mean" hints."""
        bare = name.lstrip("-").replace("_", "-")
        candidates = sorted({f[2:] for f in self._by_flag})
        return difflib.get_close_matches(bare, candidates, n=n, cutoff=0.75)

    # -- values -------------------------------------------------------------------------------------
    def convert(self, opt: CatalogOption, raw: str) -> Any:
        """Convert one command-line token for ``opt`` the way the engine's parser would.

        Raises:
            ArgvError: the token is not a valid value (argparse wording).
        """
        converted = _convert_type(opt, raw)
        if opt.choices is not None:
            probe = raw if opt.type not in ("int", "float") else str(converted)
            if probe not in opt.choices and raw not in opt.choices:
                choices = ", ".join(repr(c) for c in opt.choices)
                raise ArgvError(f"argument {'/'.join(opt.flags)}: invalid choice: {raw!r} (choose from {choices})")
        return converted

    def parse_argv(self, argv: Sequence[str]) -> dict[str, Any]:
        """Parse engine flags (no positional arguments) into ``{dest: value}``.

        Supports ``--flag value``, ``--flag=value``, nargs ``?``/``*``/``+``, switches and ``--no-x``.

        Raises:
            ArgvError: an unknown flag, a missing or invalid value, or a stray token, in argparse wording.
        """
        result: dict[str, Any] = {}
        i = 0
        unrecognized: list[str] = []
        while i < len(argv):
            token = argv[i]
            i += 1
            if not token.startswith("--"):
                unrecognized.append(token)
                continue
            flag, eq, inline = token.partition("=")
            opt = self.option(flag)
            if opt is None:
                unrecognized.append(token)
                continue
            shown = "/".join(opt.flags)
            if not opt.takes_value:
                if eq:
                    raise ArgvError(f"argument {shown}: ignored explicit argument {inline!r}")
                if opt.kind == BOOL_OPTIONAL:
                    result[opt.dest] = "--no-" + opt.flags[0][2:] != flag
                else:
                    result[opt.dest] = True
                continue
            values: list[str] = []
            if eq:
                values.append(inline)
            else:
                while i < len(argv) and not _looks_like_flag(argv[i]):
                    values.append(argv[i])
                    i += 1
                    if opt.nargs in (None, "?"):
                        break
            if opt.nargs is None and len(values) != 1:
                raise ArgvError(f"argument {shown}: expected one argument")
            if opt.nargs == "+" and not values:
                raise ArgvError(f"argument {shown}: expected at least one argument")
            converted = [self.convert(opt, v) for v in values]
            if opt.nargs is None:
                result[opt.dest] = converted[0]
            elif opt.nargs == "?":
                result[opt.dest] = converted[0] if converted else opt.default
            else:
                result[opt.dest] = converted
        if unrecognized:
            raise ArgvError(f"unrecognized arguments: {' '.join(unrecognized)}")
        return result


def _looks_like_flag(token: str) -> bool:
    return token.startswith("--") or (token.startswith("-") and not _is_number(token))


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


_SUFFIX = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_readable_int(raw: str) -> int:
    """SGLang's ``human_readable_int``: ``1k`` = 1,000, ``1K`` = 1,024, ``25.6k`` = 25,600, plain ints."""
    value = raw.strip()
    match = _SUFFIX.fullmatch(value)
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if "." in number:
            raise ValueError(f"decimals are not allowed with binary suffix {suffix}")
        return int(number) * _BINARY[suffix]
    return int(value)


def _convert_type(opt: CatalogOption, raw: str) -> Any:
    kind = opt.type or "str"
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "human_readable_int":
            return human_readable_int(raw)
        if kind == "loads":
            return json.loads(raw)
        if kind == "json_list_type":
            value = json.loads(raw)
            if not isinstance(value, list):
                raise ValueError("not a JSON list")
            return value
        if kind == "nullable_str":
            return None if raw.lower() in ("none", "null", "") else raw
        return raw  # str and parser-specific string types (validated by choices where present)
    except ValueError:
        shown = "/".join(opt.flags)
        raise ArgvError(f"argument {shown}: invalid {kind} value: {raw!r}") from None


def format_value(value: Any) -> list[str]:
    """Command-line tokens for a value from a profile (lists become nargs, mappings become JSON)."""
    if isinstance(value, bool):
        raise TypeError("booleans are switches, not values")
    if isinstance(value, Mapping):
        return [json.dumps(value, separators=(",", ":"), sort_keys=True)]
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    if isinstance(value, float):
        return [repr(value)]
    return [str(value)]


_CACHE: dict[Path, FlagCatalog] = {}


def _load_path(path: Path) -> FlagCatalog:
    cached = _CACHE.get(path)
    if cached is None:
        with path.open(encoding="utf-8") as fh:
            cached = FlagCatalog.from_dict(json.load(fh), name=path.stem)
        _CACHE[path] = cached
    return cached
