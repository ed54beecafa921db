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

import argparse
import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

from servectl.files import read_bounded, read_text_bounded

#: A flag catalog is about a MiB; a larger file is not one.
MAX_CATALOG_BYTES = 64 * 2**20

CATALOG_DIR = Path(__file__).resolve().parent / "catalogs"
#: The catalog a profile (and an adopted container, and the stand-in) reads SGLang flags with when none is named.
DEFAULT_CATALOG = "sglang-0.5.23"


def read_shipped_catalog(kind: str, name: str, what: str) -> dict[str, Any]:
    """The shipped JSON catalog ``catalogs/<kind>/<name>.json`` (``routes``, ``memory_saver``): the one reader of
    the catalogs extracted from SGLang's source beside the flag catalogs, bounded like them.

    Raises:
        KeyError: no such catalog (the message lists the shipped ones of that kind).
    """
    folder = CATALOG_DIR / kind
    path = folder / f"{name}.json"
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in folder.glob("*.json")))
        raise KeyError(f"unknown {what} {name!r}; shipped: {shipped}")
    data = json.loads(read_text_bounded(path, limit_bytes=MAX_CATALOG_BYTES, what=what))
    if not isinstance(data, dict):
        raise KeyError(f"{what} {name!r} ({path}) is not a JSON object; reinstall servectl")
    return data


#: Kinds of options as extracted from argparse actions.
VALUE = "value"  # takes a value (type, nargs, choices)
SWITCH = "switch"  # store_true: takes no value
BOOL_OPTIONAL = "bool-optional"  # --x / --no-x
SWITCH_DEPRECATED = "switch-deprecated"  # store_true, deprecated
CONST_DEPRECATED = "const-deprecated"  # store_const, deprecated: takes no value
_NO_VALUE_KINDS = frozenset({SWITCH, BOOL_OPTIONAL, SWITCH_DEPRECATED, CONST_DEPRECATED})
_KINDS = frozenset({VALUE, *_NO_VALUE_KINDS})

#: How many names a "did you mean" hint offers (flags here, log lines in the log catalog).
SUGGESTIONS = 3


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
    const: Any = None  # nargs "?": the value of the flag given alone
    action: str | None = None  # SGLang's own argparse action class, e.g. LoRAPathAction (checks the values)

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
            const=data.get("const"),
            action=data.get("action"),
        )


@dataclass(frozen=True)
class FlagCatalog:
    """The options one engine build accepts, with lookup by any spelling."""

    name: str
    engine: str
    version: str
    options: tuple[CatalogOption, ...]
    #: Data SGLang's own type functions check against (``--cuda-graph-config`` phases and keys).
    type_rules: Mapping[str, Any] = field(default_factory=dict, compare=False)
    #: argparse's rule for "-1" / "-.5" being a value, as the engine's Python has it.
    negative_number: str = r"^-\d+$|^-\d*\.\d+$"
    _by_flag: dict[str, CatalogOption] = field(init=False, repr=False, compare=False)
    _by_dest: dict[str, CatalogOption] = field(init=False, repr=False, compare=False)
    _parser: argparse.ArgumentParser | None = field(init=False, repr=False, compare=False)

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
        object.__setattr__(self, "_parser", None)

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
        loaded = _BY_NAME.get(name)
        if loaded is not None:
            return loaded
        path = CATALOG_DIR / f"{name}.json"
        if not re.fullmatch(r"[A-Za-z0-9._+-]+", name) or not path.is_file():
            raise KeyError(f"unknown flag catalog {name!r}; shipped catalogs: {', '.join(cls.available())}")
        loaded = _BY_NAME[name] = _load_path(path)
        return loaded

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, name: str) -> FlagCatalog:
        argparse_facts = data.get("argparse") or {}
        return cls(
            name=name,
            engine=str(data.get("engine", "sglang")),
            version=str(data.get("version", "")),
            options=tuple(CatalogOption.from_dict(o) for o in data["options"]),
            type_rules=dict(data.get("type_rules") or {}),
            negative_number=str(argparse_facts.get("negative_number") or r"^-\d+$|^-\d*\.\d+$"),
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
        return FlagCatalog(
            name=f"{self.name}+ext",
            engine=self.engine,
            version=self.version,
            options=tuple(options),
            type_rules=self.type_rules,
            negative_number=self.negative_number,
        )

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
        prefixes = self.__dict__.get("_prefixes")
        if prefixes is None:  # its own memo: parse_argv's is keyed by argv tuples, which ("option", name) could be
            prefixes = {}
            object.__setattr__(self, "_prefixes", prefixes)
        known = prefixes.get(flag)
        if known is None:
            try:
                full = self._unique_prefix(flag)
                known = prefixes[flag] = (self._by_flag.get(full) if full else None,)
            except ArgvError as err:
                known = prefixes[flag] = err
        if isinstance(known, ArgvError):
            raise ArgvError(str(known))
        return known[0]

    def _unique_prefix(self, flag: str) -> str | None:
        """The one option string ``flag`` abbreviates, or None; argparse (3.11) counts option strings, not
        options (two spellings of one option are ambiguous too), and the parser's own --help takes part.

        Raises:
            ArgvError: several option strings start with ``flag``.
        """
        matches = [f for f in (*self._by_flag, "--help") if f.startswith(flag)]
        if len(matches) > 1:
            raise ArgvError(f"ambiguous option: {flag} could match {', '.join(matches)}")
        return matches[0] if matches else None

    def expand(self, flag: str) -> str:
        """The full spelling of ``flag`` when it is a unique abbreviation (``--tp`` -> ``--tp-size``), else ``flag``.

        Raises:
            ArgvError: the abbreviation is ambiguous.
        """
        if flag in self._by_flag or not flag.startswith("--"):
            return flag
        full = self._unique_prefix(flag)
        return full if full is not None and full != "--help" else flag

    def close_matches(self, name: str, n: int = SUGGESTIONS) -> list[str]:
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
        return self.parse_argv([opt.primary_flag, raw])[opt.dest]

    def parse_argv(self, argv: Sequence[str]) -> dict[str, Any]:
        """Parse engine flags (no positional arguments) into ``{dest: value}`` for the flags given.

        Follows the standard library's argparse (3.11) step by step, with SGLang's own type functions
        (:mod:`servectl.profile.sglang_types`): abbreviations, ``-1``/``-.5`` as values but ``-1e3`` as a flag,
        dash-leading values with a space, ``--flag=value``, nargs, choices and argparse's messages. An argv with
        a ``--`` separator goes through argparse itself (rebuilt from the catalog).

        Raises:
            ArgvError: an unknown flag, a missing or invalid value, or a stray token, in argparse wording.
        """
        key = tuple(argv)
        memo = self._memo()
        known = memo.get(key)
        if known is None:
            try:
                known = memo[key] = self._parse(argv)
            except ArgvError as err:
                known = memo[key] = err
            if len(memo) > 4096:
                memo.clear()
        if isinstance(known, ArgvError):
            raise ArgvError(str(known))
        return dict(known)

    def _memo(self) -> dict[tuple[str, ...], dict[str, Any] | ArgvError]:
        memo = self.__dict__.get("_parsed")
        if memo is None:
            memo = {}
            object.__setattr__(self, "_parsed", memo)
        return memo

    def _parse(self, argv: Sequence[str]) -> dict[str, Any]:
        # argparse's own handling of '--' (as a token, or as an explicit value: '--opt=--' strips it and stores
        # an empty list, unchecked) is left to argparse itself
        if any(token == "--" or token.endswith("=--") for token in argv):
            return self._argparse().parse_args(list(argv)).__dict__
        kinds = [self._classify(token) for token in argv]
        result: dict[str, Any] = {}
        extras: list[str] = []
        i = 0
        while i < len(argv):
            kind = kinds[i]
            if kind is None:  # a value no option took
                extras.append(argv[i])
                i += 1
                continue
            opt, explicit = kind
            i += 1
            if opt is None:  # looks like an option, is none of the parser's
                extras.append(argv[i - 1])
                continue
            shown = "/".join(f for f in opt.flags if not (opt.kind == BOOL_OPTIONAL and f.startswith("--no-")))
            if not opt.takes_value:
                if explicit is not None:
                    raise ArgvError(f"argument {shown}: ignored explicit argument {explicit!r}")
                if opt.kind == BOOL_OPTIONAL:
                    result[opt.dest] = not argv[i - 1].startswith("--no-") or argv[i - 1] in opt.flags[:1]
                else:
                    result[opt.dest] = True
                continue
            if explicit is not None:
                values = [explicit]
            else:
                values = []
                while i < len(argv) and kinds[i] is None:
                    values.append(argv[i])
                    i += 1
                taken = {None: 1, "?": min(1, len(values))}.get(opt.nargs, len(values))
                values, rest = values[:taken], values[taken:]
                extras.extend(rest)
            if opt.nargs is None and len(values) != 1:
                raise ArgvError(f"argument {shown}: expected one argument")
            if opt.nargs == "+" and not values:
                raise ArgvError(f"argument {shown}: expected at least one argument")
            converted = [self._convert(opt, shown, v) for v in values]
            if opt.nargs is None:
                result[opt.dest] = converted[0]
            elif opt.nargs == "?":
                result[opt.dest] = converted[0] if converted else opt.const
            else:
                result[opt.dest] = converted
            if opt.action is not None:
                result[opt.dest] = _run_action(opt, shown, result[opt.dest])
        if extras:
            raise ArgvError(f"unrecognized arguments: {' '.join(extras)}")
        return result

    def _classify(self, token: str) -> tuple[CatalogOption | None, str | None] | None:
        """argparse's ``_parse_optional``: None for a value, else (option or None if unknown, explicit value)."""
        if not token or token[0] != "-" or len(token) == 1:
            return None
        if token in self._by_flag:
            return self._by_flag[token], None
        if "=" in token:
            flag, _, explicit = token.partition("=")
            if flag in self._by_flag:
                return self._by_flag[flag], explicit
        if token.startswith("--"):
            flag, eq, explicit = token.partition("=")
            full = self._unique_prefix(flag)
            if full == "--help":
                raise ArgvError("--help: the engine would print its help and exit")
            if full is not None:
                return self._by_flag[full], explicit if eq else None
        elif token.startswith("-h"):
            raise ArgvError(f"{token}: the engine would print its help and exit")
        if re.match(self.negative_number, token):
            return None  # the parser has no option that looks like a negative number
        if " " in token:
            return None
        return None, None

    def _convert(self, opt: CatalogOption, shown: str, raw: str) -> Any:
        convert = self._type_functions().get(opt.dest)
        if convert is None:
            from servectl.profile.sglang_types import type_function

            convert = type_function(opt.type, self.type_rules)
            self._type_functions()[opt.dest] = convert
        try:
            value = convert(raw)
        except argparse.ArgumentTypeError as err:
            raise ArgvError(f"argument {shown}: {err}") from None
        except (TypeError, ValueError):
            name = getattr(convert, "__name__", repr(convert))
            raise ArgvError(f"argument {shown}: invalid {name} value: {raw!r}") from None
        if opt.choices is not None:
            allowed = [convert(c) for c in opt.choices] if opt.type in ("int", "float") else list(opt.choices)
            if value not in allowed:
                choices = ", ".join(repr(c) for c in allowed)
                raise ArgvError(f"argument {shown}: invalid choice: {value!r} (choose from {choices})")
        return value

    def _type_functions(self) -> dict[str, Any]:
        cache = self.__dict__.get("_types")
        if cache is None:
            cache = {}
            object.__setattr__(self, "_types", cache)
        return cache

    def _argparse(self) -> argparse.ArgumentParser:
        parser = self._parser
        if parser is None:
            parser = _build_parser(self)
            object.__setattr__(self, "_parser", parser)
        return parser


def _run_action(opt: CatalogOption, shown: str, value: Any) -> Any:
    """SGLang's own action of ``opt`` on its converted value (names no port: stored as is, like a custom image's)."""
    from servectl.profile.sglang_types import ACTIONS

    action = ACTIONS.get(opt.action or "")
    if action is None:
        return value
    try:
        return action(value)
    except ValueError as err:
        raise ArgvError(f"argument {shown}: {err}") from None


class _CatalogAction(argparse.Action):
    """argparse's store, followed by SGLang's own action of the option (for the rebuilt parser)."""

    def __init__(self, *args: Any, option: CatalogOption, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.option = option

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, _run_action(self.option, "/".join(self.option_strings), values))


class _RaisingParser(argparse.ArgumentParser):
    """argparse that raises :class:`ArgvError` instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise ArgvError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise ArgvError(message or f"exit {status}")


def _build_parser(catalog: FlagCatalog) -> argparse.ArgumentParser:
    """The engine's parser rebuilt from the catalog (every default suppressed: only given flags come back)."""
    from servectl.profile.sglang_types import type_function

    parser = _RaisingParser(prog="launch_server.py", add_help=False, argument_default=argparse.SUPPRESS)
    # The engine's Python decides which "-1e3"-like tokens are values; use what the catalog recorded.
    parser._negative_number_matcher = re.compile(catalog.negative_number)
    for opt in catalog.options:
        flags = list(opt.flags)
        if opt.kind == BOOL_OPTIONAL:
            flags = [f for f in flags if not (f.startswith("--no-") and "--" + f[5:] in flags)]
            parser.add_argument(*flags, dest=opt.dest, action=argparse.BooleanOptionalAction)
        elif opt.kind in (SWITCH, SWITCH_DEPRECATED):
            parser.add_argument(*flags, dest=opt.dest, action="store_true")
        elif opt.kind == CONST_DEPRECATED:
            parser.add_argument(*flags, dest=opt.dest, action="store_const", const=True)
        else:
            convert = type_function(opt.type, catalog.type_rules)
            choices = None
            if opt.choices is not None:
                choices = [convert(c) if opt.type in ("int", "float") else c for c in opt.choices]
            nargs: Any = opt.nargs
            extra: dict[str, Any] = {"action": _CatalogAction, "option": opt} if opt.action else {}
            parser.add_argument(*flags, dest=opt.dest, type=convert, nargs=nargs, choices=choices, **extra)
    return parser


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
_BY_NAME: dict[str, FlagCatalog] = {}


def _load_path(path: Path) -> FlagCatalog:
    cached = _CACHE.get(path)
    if cached is None:
        raw = read_bounded(path, limit_bytes=MAX_CATALOG_BYTES, what="flag catalog")
        cached = FlagCatalog.from_dict(json.loads(raw), name=path.stem)
        _CACHE[path] = cached
    return cached
