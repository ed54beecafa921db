"""The claim ledger (``claims.json``): every number a finding states, how to compute it again, and its text.

A claim is a plain JSON object::

    {"id": "decode.c1.p4096", "revision": 1, "status": "current", "origin": "measured",
     "label": "decode tok/s", "unit": "tok/s", "value": 112.0712, "text": "112.07",
     "format": {"decimals": 2, "rounding": "down"},
     "conditions": {"prompt_tokens_target": 4096, "prompt_tokens_actual": 2969, "concurrency": 1,
                    "statistic": "p50", "n": 3},
     "condition_claims": {"prompt_tokens_actual": "prompt_tokens.c1.p4096", ...},
     "compute": {"method": "median", "sources": [
         {"artifact": "artifacts/e1/bench/c1-p4096-r3.json", "pointer": "/requests/0/decode_tok_s"}, ...]}}

``compute.method`` is one of :data:`METHODS`, applied to the values the JSON pointers (RFC 6901; a ``*``
segment stands for every element) select in the artifact files. ``format.rounding`` says which way the
text may round: ``down`` for figures where more is better (a text never shows more than was measured),
``up`` for figures where less is better (time to first token), ``exact`` for integers and text. Imported
claims (``origin: imported``) carry a ``source`` instead of ``compute`` and are never recounted.

This module is pure: reading files is the caller's ``load`` function.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any, Literal

LEDGER_FILE = "claims.json"
LEDGER_SCHEMA = "servectl.claims/v1"
METHODS = ("value", "median", "min", "max", "count", "count_true")
Rounding = Literal["down", "up", "exact"]
_ROUNDING = {"down": ROUND_FLOOR, "up": ROUND_CEILING, "exact": ROUND_HALF_EVEN}


class PointerMissing(LookupError):
    """A JSON pointer selects nothing in its artifact."""


class ArtifactMissing(LookupError):
    """An artifact a claim rests on is not in the finding."""


def pointer_values(document: Any, pointer: str) -> list[Any]:
    """The values ``pointer`` selects in ``document`` (``*`` selects every element of a list or object).

    Raises:
        PointerMissing: a segment names nothing.
    """
    if pointer in ("", "/"):
        return [document]
    nodes = [document]
    for raw in pointer.lstrip("/").split("/"):
        key = raw.replace("~1", "/").replace("~0", "~")
        found: list[Any] = []
        for node in nodes:
            if key == "*" and isinstance(node, list | dict):
                found.extend(node if isinstance(node, list) else node.values())
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                found.append(node[int(key)])
            elif isinstance(node, dict) and key in node:
                found.append(node[key])
            else:
                raise PointerMissing(pointer)
        nodes = found
    return nodes


def _numbers(values: Sequence[Any], method: str) -> list[float]:
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if len(numbers) != len(values) or not numbers:
        raise ValueError(f"{method} needs numbers, the pointers select {values!r}")
    return [float(v) for v in numbers]


def apply(method: str, values: Sequence[Any]) -> Any:
    """The claim's value from the selected values (see :data:`METHODS`).

    Raises:
        ValueError: the values do not fit the method (not numbers, not exactly one for ``value``).
    """
    if method == "value":
        if len(values) != 1:
            raise ValueError(f"value needs exactly one value, the pointers select {len(values)}")
        return values[0]
    if method == "count":
        return len(values)
    if method == "count_true":
        return sum(1 for v in values if v is True)
    numbers = _numbers(values, method)
    if method == "median":
        return statistics.median(numbers)
    if method == "min":
        return min(numbers)
    if method == "max":
        return max(numbers)
    raise ValueError(f"unknown method {method!r}; one of {', '.join(METHODS)}")


def recount(claim: Mapping[str, Any], load: Callable[[str], Any]) -> Any:
    """Compute ``claim``'s value again from its artifacts (``load(path)`` returns a parsed artifact).

    Raises:
        ArtifactMissing, PointerMissing, ValueError: the artifacts no longer give a value.
    """
    compute = claim.get("compute") or {}
    values: list[Any] = []
    for source in compute.get("sources") or []:
        document = load(str(source["artifact"]))
        values.extend(pointer_values(document, str(source["pointer"])))
    return apply(str(compute.get("method")), values)


def format_value(value: Any, fmt: Mapping[str, Any]) -> str:
    """The text of a value: numbers with thousands separators at ``decimals`` places, rounded ``rounding``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    decimals = int(fmt.get("decimals", 0))
    rounding = _ROUNDING[str(fmt.get("rounding", "exact"))]
    quantum = Decimal(1).scaleb(-decimals)
    rounded = Decimal(repr(float(value)) if isinstance(value, float) else value).quantize(quantum, rounding=rounding)
    return f"{rounded:,.{decimals}f}"


def parse_text(text: str) -> Decimal | None:
    """The number a claim's text shows (None when it is not a number)."""
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None


def same_value(a: Any, b: Any) -> bool:
    """Equal, allowing for float noise in numbers."""
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(a)), abs(float(b)))
    return bool(a == b)


def text_problem(claim: Mapping[str, Any], value: Any) -> str | None:
    """Why the claim's text does not state ``value`` honestly (None when it does)."""
    fmt, text = claim.get("format") or {}, str(claim.get("text"))
    expected = format_value(value, fmt)
    if text == expected:
        return None
    shown = parse_text(text)
    if shown is not None and isinstance(value, int | float) and not isinstance(value, bool):
        measured = Decimal(repr(float(value)))
        rounding = fmt.get("rounding", "exact")
        if (rounding == "down" and shown > measured) or (rounding == "up" and shown < measured):
            better = "more" if rounding == "down" else "less"
            return f"rounding overstates: the text says {text}, {better} than the measured {value:g}"
    return f"the text says {text} but the value {value!r} reads {expected}"


def current(claims: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The current revision of every claim, by id."""
    return {str(c["id"]): c for c in claims if c.get("status", "current") == "current"}


def ref(claim: Mapping[str, Any]) -> str:
    """``decode.c1.p4096#2``: a claim's id and revision."""
    return f"{claim['id']}#{claim.get('revision', 1)}"


def artifacts_of(claim: Mapping[str, Any]) -> list[str]:
    """The artifact paths a claim is computed from, each once, in order."""
    paths = [str(s["artifact"]) for s in (claim.get("compute") or {}).get("sources") or []]
    return list(dict.fromkeys(paths))
