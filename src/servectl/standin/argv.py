"""Command-line handling of the stand-in: SGLang's flags, checked against servectl's flag catalog.

The engine's parser is argparse; the stand-in answers like it: usage text and ``launch_server.py: error: ...``
on stderr, exit status 2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servectl.profile.catalog import BOOL_OPTIONAL, ArgvError, CatalogOption, FlagCatalog

PROG = "launch_server.py"
_USAGE_WIDTH = 78  # argparse: terminal columns (80 without a terminal) minus 2


def load_catalog(name: str, extension: Mapping[str, Any] | None) -> FlagCatalog:
    """The flag catalog ``name``, extended with ``extension`` (``STANDIN_CATALOG_EXTEND``) when given.

    Raises:
        ValueError: unknown catalog name or malformed extension (message says which).
    """
    try:
        catalog = FlagCatalog.load(name)
    except KeyError as err:
        raise ValueError(f"STANDIN_CATALOG: {err.args[0]}") from None
    if extension:
        try:
            catalog = catalog.extended(extension)
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"STANDIN_CATALOG_EXTEND: {err}") from None
    return catalog


def parse_server_args(catalog: FlagCatalog, argv: Sequence[str]) -> dict[str, Any]:
    """Every option's value: parsed from ``argv``, else the catalog default; SGLang's derived defaults filled.

    Raises:
        ArgvError: what argparse would reject, in argparse's words.
    """
    parsed = catalog.parse_argv(list(argv))
    if not parsed.get("model_path"):
        model_opt = catalog.option("model_path")
        shown = "/".join(model_opt.flags) if model_opt else "--model-path"
        raise ArgvError(f"the following arguments are required: {shown}")
    args: dict[str, Any] = {}
    for opt in catalog.options:
        if opt.dest not in args:
            args[opt.dest] = opt.default
    args.update(parsed)
    args["tokenizer_path"] = args.get("tokenizer_path") or args["model_path"]
    args["served_model_name"] = args.get("served_model_name") or args["model_path"]
    return args


def _usage_part(opt: CatalogOption) -> str:
    flag = opt.flags[0]
    if opt.kind == BOOL_OPTIONAL:
        return f"[{flag} | --no-{flag[2:]}]"
    if not opt.takes_value:
        return f"[{flag}]"
    metavar = "{" + ",".join(opt.choices) + "}" if opt.choices else opt.dest.upper()
    if opt.nargs == "?":
        value = f"[{metavar}]"
    elif opt.nargs == "*":
        value = f"[{metavar} ...]"
    elif opt.nargs == "+":
        value = f"{metavar} [{metavar} ...]"
    else:
        value = metavar
    if opt.dest == "model_path":
        return f"{flag} {value}"
    return f"[{flag} {value}]"


def _wrap(prefix: str, parts: Sequence[str], width: int) -> list[str]:
    lines: list[str] = []
    indent = " " * len(prefix)
    current = prefix + parts[0]
    for part in parts[1:]:
        if len(current) + 1 + len(part) > width:
            lines.append(current)
            current = indent + part
        else:
            current += " " + part
    lines.append(current)
    return lines


def usage_text(catalog: FlagCatalog, prog: str = PROG) -> str:
    """argparse's ``usage:`` block for the catalog's options, wrapped the way argparse wraps it."""
    parts = ["[-h]", *(_usage_part(opt) for opt in catalog.options)]
    return "\n".join(_wrap(f"usage: {prog} ", parts, _USAGE_WIDTH))


def error_text(catalog: FlagCatalog, message: str, prog: str = PROG) -> str:
    """What argparse prints on stderr before exiting with status 2."""
    return f"{usage_text(catalog, prog)}\n{prog}: error: {message}\n"


def help_text(catalog: FlagCatalog, prog: str = PROG) -> str:
    """A short ``--help``: the usage block and one line per option."""
    lines = [
        usage_text(catalog, prog),
        "",
        "options:",
        "  -h, --help            show this help message and exit",
    ]
    for opt in catalog.options:
        lines.append(f"  {', '.join(opt.flags)}")
    return "\n".join(lines) + "\n"


def server_args_repr(args: Mapping[str, Any]) -> str:
    """``ServerArgs(model_path='...', ...)`` as SGLang logs it at startup."""
    return "ServerArgs(" + ", ".join(f"{key}={value!r}" for key, value in args.items()) + ")"


__all__ = [
    "PROG",
    "ArgvError",
    "error_text",
    "help_text",
    "load_catalog",
    "parse_server_args",
    "server_args_repr",
    "usage_text",
]
