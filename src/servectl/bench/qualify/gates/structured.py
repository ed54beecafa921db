"""Structured output: ``response_format`` JSON mode and JSON schema; answers parse and validate.

``json_object`` cases must answer a JSON object; ``json_schema`` cases (``strict``) must validate against
the schema sent (Draft 2020-12, :mod:`jsonschema`, imported when the gate runs).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from servectl.bench.qualify.gates.common import GateRun, clip, merged
from servectl.bench.qualify.model import CaseResult, GateResult
from servectl.bench.qualify.suite import StructuredGate

GATE = "structured"

#: ``(name, ask, schema)``: each closed (``additionalProperties: false``) with required keys, so that an
#: answer that ignores the schema cannot validate by accident.
SCHEMAS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (
        "person",
        "Describe a fictional person: their name and age.",
        {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
            "required": ["name", "age"],
            "additionalProperties": False,
        },
    ),
    (
        "weather",
        "Give a weather report for Oslo.",
        {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "temperature_c": {"type": "number"},
                "conditions": {"type": "string", "enum": ["sunny", "cloudy", "rain", "snow"]},
            },
            "required": ["city", "temperature_c", "conditions"],
            "additionalProperties": False,
        },
    ),
    (
        "todo_list",
        "Write a short to-do list for moving house.",
        {
            "type": "object",
            "properties": {
                "items": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {"title": {"type": "string"}, "done": {"type": "boolean"}},
                        "required": ["title", "done"],
                        "additionalProperties": False,
                    },
                }
            },
            "required": ["items"],
            "additionalProperties": False,
        },
    ),
    (
        "address",
        "Give the postal address of a fictional bakery.",
        {
            "type": "object",
            "properties": {
                "street": {"type": "string"},
                "city": {"type": "string"},
                "postcode": {"type": "string"},
                "country": {"type": "string"},
            },
            "required": ["street", "city", "postcode", "country"],
            "additionalProperties": False,
        },
    ),
)

OBJECT_ASKS: tuple[str, ...] = (
    "Reply in JSON: an object with the keys 'colour' and 'fruit', one example each.",
    "Reply in JSON: an object mapping three planet names to their order from the sun.",
    "Reply in JSON: an object with the key 'languages' holding a list of two programming languages.",
)


def schema_problem(instance: Any, schema: Mapping[str, Any]) -> str | None:
    """The first way ``instance`` breaks ``schema`` (``at items/0: 'done' is a required property``), or None."""
    import jsonschema  # type: ignore[import-untyped]  # no stubs in the CI image; only Draft202012Validator is used

    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    error = errors[0]
    where = "/".join(str(p) for p in error.absolute_path)
    return f"at {where or '(root)'}: {error.message}" if where else error.message


def _check(case: str, content: str, schema: Mapping[str, Any] | None) -> str | None:
    try:
        value = json.loads(content)
    except json.JSONDecodeError as err:
        return f"{case}: content is not JSON ({err.msg} at character {err.pos}): {clip(content, 60)!r}"
    if schema is None:
        return (
            None if isinstance(value, dict) else f"{case}: JSON mode answered a {type(value).__name__}, not an object"
        )
    problem = schema_problem(value, schema)
    return f"{case}: answer does not validate against the schema {problem}" if problem else None


def run(run: GateRun, spec: StructuredGate) -> GateResult:
    """``json_object`` cases, then ``json_schema`` cases cycling through :data:`SCHEMAS`."""
    jobs: list[tuple[str, str, Mapping[str, Any], Mapping[str, Any] | None]] = []
    for i in range(spec.json_object):
        jobs.append((f"json_object #{i + 1}", OBJECT_ASKS[i % len(OBJECT_ASKS)], {"type": "json_object"}, None))
    for i in range(spec.json_schema):
        title, question, shape = SCHEMAS[i % len(SCHEMAS)]
        wanted = {"type": "json_schema", "json_schema": {"name": title, "schema": shape, "strict": True}}
        jobs.append((f"json_schema #{i + 1} {title}", question, wanted, shape))
    body = merged(spec.extra_body)
    cases = []
    for index, (case, ask, fmt, schema) in enumerate(jobs):
        exchange = run.client.chat(
            [{"role": "user", "content": ask}], max_tokens=spec.max_tokens, response_format=fmt, extra_body=body
        )
        name = f"structured {case}"
        if not exchange.ok:
            result = CaseResult(name, False, f"{name}: {exchange.error}", exchange.latency_s)
        else:
            problem = _check(name, exchange.content, schema)
            result = CaseResult(name, problem is None, problem or clip(exchange.content), exchange.latency_s)
        cases.append(result)
        run.report(GATE, index + 1, len(jobs), result)
    return GateResult.of(GATE, cases)
