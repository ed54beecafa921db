"""From what an engine image's parser says about itself to a flag catalog.

:mod:`servectl.adapters.sglang_probe` runs inside the image and reports every argparse action raw (class
name, option strings, nargs, type name, choices, default, const). :func:`catalog_from_probe` turns that into the
catalog format of ``catalogs/*.json`` (see :mod:`servectl.profile.catalog`), by the same rules the shipped
``sglang-0.5.23`` catalog was made with, so an extracted catalog and a shipped one compare option for option.

Pure: no I/O; unit tests feed it fakes of the probe's output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servectl.profile.catalog import BOOL_OPTIONAL, CONST_DEPRECATED, SWITCH, SWITCH_DEPRECATED, VALUE

#: argparse action classes (by name) whose options take no value, and the catalog kind of each.
_NO_VALUE_ACTIONS = {
    "_StoreTrueAction": SWITCH,
    "_StoreFalseAction": SWITCH,
    "_StoreConstAction": SWITCH,
    "_CountAction": SWITCH,
    "BooleanOptionalAction": BOOL_OPTIONAL,
}


class ProbeError(ValueError):
    """The probe's output is not a parser dump this module understands."""


def option_kind(action: Mapping[str, Any]) -> str:
    """The catalog kind of one raw action: value, switch, bool-optional or a deprecated form.

    Deprecated actions are SGLang's own classes (``Deprecated...Action``); a deprecated store-const that takes
    a value (``--monokernel-backend amd``) is still ``const-deprecated``, as in the shipped catalog.
    """
    name = str(action.get("action", ""))
    bases = [str(b) for b in action.get("action_bases") or ()]
    for cls in (name, *bases):
        if cls in _NO_VALUE_ACTIONS:
            return _NO_VALUE_ACTIONS[cls]
    if name.startswith("Deprecated"):
        if "StoreTrue" in name:
            return SWITCH_DEPRECATED
        if "StoreConst" in name:
            return CONST_DEPRECATED
    if action.get("nargs") == 0:
        return SWITCH
    return VALUE


def option_from_action(action: Mapping[str, Any]) -> dict[str, Any]:
    """One catalog option (the dict form of :class:`~servectl.profile.catalog.CatalogOption`).

    Raises:
        ProbeError: the action has no ``--`` option string (a positional argument).
    """
    flags = [str(f) for f in action.get("option_strings") or ()]
    if not flags or not all(f.startswith("--") for f in flags):
        raise ProbeError(f"parser action {action.get('dest')!r} has no '--' option string: {flags}")
    kind = option_kind(action)
    option: dict[str, Any] = {"flags": flags, "dest": str(action.get("dest") or flags[0][2:].replace("-", "_"))}
    option["kind"] = kind
    default = action.get("default")
    choices = action.get("choices")
    if kind == VALUE:
        option["type"] = action.get("type") or "str"
        nargs = action.get("nargs")
        if nargs is not None:
            option["nargs"] = str(nargs)
    if choices is not None:
        option["choices"] = list(choices)
    if _keeps_default(kind, default):
        option["default"] = default
    return option


def _keeps_default(kind: str, default: Any) -> bool:
    """Whether a default goes into the catalog: one that says something (not None, False or zero; a switch's
    default is always "off"), as the shipped catalog has it."""
    if kind in (SWITCH, SWITCH_DEPRECATED) or isinstance(default, Mapping) and "__repr__" in default:
        return False
    return not (default is None or isinstance(default, bool | int | float) and not default)


def catalog_from_probe(
    probe: Mapping[str, Any], *, extracted_from: str, entrypoint: str = "python3 -m sglang.launch_server"
) -> dict[str, Any]:
    """A catalog document (``catalogs/*.json`` shape) from the probe's ``catalog`` output.

    Raises:
        ProbeError: the output lacks the parser's actions or one of them cannot be a catalog option.
    """
    actions = probe.get("actions")
    if not isinstance(actions, list) or not actions:
        raise ProbeError("the probe reported no parser actions")
    return {
        "engine": "sglang",
        "version": str(probe.get("sglang_version") or ""),
        "extracted_from": extracted_from,
        "entrypoint": entrypoint,
        "options": [option_from_action(a) for a in actions],
    }
