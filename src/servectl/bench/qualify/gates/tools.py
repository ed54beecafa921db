"""Tool calling: N cases, each offering one or more tools and asking for one of them.

A case passes when (1) the answer calls the asked-for function with arguments that are JSON and validate
against that tool's ``parameters`` schema; (2) with ``streaming``, the streamed call assembles (deltas merged
by index) to the same function with the same arguments; (3) with ``tool_result``, sending the tool's result
back (``role: tool`` with the call's id) gets an answer with content: the conversation continues.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from servectl.bench.qualify.client import AssembledCall, Exchange
from servectl.bench.qualify.gates.common import GateRun, clip, merged
from servectl.bench.qualify.gates.structured import schema_problem
from servectl.bench.qualify.model import CaseResult, GateResult
from servectl.bench.qualify.suite import ToolsGate

GATE = "tools"


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    parameters = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


#: ``(tool, ask, result)``: the tool, a user request that needs it, and the result sent back.
TOOLS: tuple[tuple[dict[str, Any], str, dict[str, Any]], ...] = (
    (
        _tool(
            "get_weather",
            "Current weather for a city.",
            {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            ["city", "unit"],
        ),
        "What is the weather in Paris right now, in celsius?",
        {"temperature": 18, "conditions": "cloudy"},
    ),
    (
        _tool(
            "search_docs",
            "Search the product documentation.",
            {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 20}},
            ["query", "limit"],
        ),
        "Find the 5 most relevant documentation pages about resetting a password.",
        {"results": ["Reset your password", "Account recovery"]},
    ),
    (
        _tool(
            "create_event",
            "Create a calendar event.",
            {
                "title": {"type": "string"},
                "start": {"type": "string", "description": "ISO 8601 date and time"},
                "attendees": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            },
            ["title", "start", "attendees"],
        ),
        "Schedule a meeting called 'Budget review' on 2026-03-02 at 10:00 with alice@example.com.",
        {"event_id": "evt_123", "status": "created"},
    ),
    (
        _tool(
            "convert_currency",
            "Convert an amount between currencies.",
            {
                "amount": {"type": "number", "minimum": 0},
                "from_currency": {"type": "string"},
                "to_currency": {"type": "string"},
            },
            ["amount", "from_currency", "to_currency"],
        ),
        "How much is 250 euros in US dollars?",
        {"amount": 270.5, "currency": "USD"},
    ),
    (
        _tool(
            "set_thermostat",
            "Set the home thermostat.",
            {"temperature_c": {"type": "number"}, "mode": {"type": "string", "enum": ["heat", "cool", "auto"]}},
            ["temperature_c", "mode"],
        ),
        "Set the heating to 21 degrees celsius.",
        {"ok": True},
    ),
    (
        _tool(
            "lookup_order",
            "Look up an order by its number.",
            {"order_id": {"type": "string"}, "include_items": {"type": "boolean"}},
            ["order_id", "include_items"],
        ),
        "Where is my order A-1042? Include the items.",
        {"status": "shipped", "items": ["lamp"]},
    ),
)


def case_tools(index: int, max_tools: int) -> tuple[list[int], int]:
    """Indices of the tools a case offers (1 to ``max_tools`` of them, rotating) and the one it asks for."""
    count = 1 + index % min(max_tools, len(TOOLS))
    offered = [(index + k) % len(TOOLS) for k in range(count)]
    return offered, offered[index % count]


def call_problem(call: AssembledCall | None, *, expected: str, schema: Mapping[str, Any]) -> str | None:
    """Why a call is not the expected one with valid arguments (None when it is)."""
    if call is None:
        return f"no tool call (expected {expected})"
    if call.name != expected:
        return f"called {call.name!r}, expected {expected!r}"
    try:
        args = json.loads(call.arguments)
    except json.JSONDecodeError as err:
        return f"{expected} arguments are not valid JSON ({err.msg}): {clip(call.arguments, 60)!r}"
    problem = schema_problem(args, schema)
    return f"{expected} arguments do not validate against the tool schema {problem}" if problem else None


def _first_call(exchange: Exchange) -> AssembledCall | None:
    return exchange.tool_calls[0] if exchange.tool_calls else None


def _run_case(run: GateRun, spec: ToolsGate, index: int, body: Mapping[str, Any]) -> CaseResult:
    offered, wanted = case_tools(index, spec.max_tools_per_case)
    tool, ask, result = TOOLS[wanted]
    function = tool["function"]
    name = f"tools #{index + 1} {function['name']} of {len(offered)} tool{'s' if len(offered) > 1 else ''}"
    tools: Sequence[Mapping[str, Any]] = [TOOLS[i][0] for i in offered]
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"{ask} Use the {function['name']} tool."}]
    plain = run.client.chat(messages, max_tokens=spec.max_tokens, tools=tools, extra_body=body)
    latency = plain.latency_s
    if not plain.ok:
        return CaseResult(name, False, f"{name}: {plain.error}", latency)
    call = _first_call(plain)
    problem = call_problem(call, expected=function["name"], schema=function["parameters"])
    if problem or call is None:
        return CaseResult(name, False, f"{name}: {problem}", latency)
    detail: dict[str, Any] = {"arguments": call.arguments, "finish_reason": plain.finish_reason}
    if spec.streaming:
        streamed = run.client.chat(messages, max_tokens=spec.max_tokens, tools=tools, stream=True, extra_body=body)
        if not streamed.ok:
            return CaseResult(name, False, f"{name}: streaming: {streamed.error}", latency, detail)
        streamed_call = _first_call(streamed)
        problem = call_problem(streamed_call, expected=function["name"], schema=function["parameters"])
        if problem or streamed_call is None:
            return CaseResult(name, False, f"{name}: streaming: {problem}", latency, detail)
        if json.loads(streamed_call.arguments) != json.loads(call.arguments):
            return CaseResult(
                name,
                False,
                f"{name}: streamed call assembles to other arguments: {clip(streamed_call.arguments, 60)!r} "
                f"vs {clip(call.arguments, 60)!r}",
                latency,
                detail,
            )
    if spec.tool_result:
        call_id = call.id or "call_0"
        follow = [
            *messages,
            {
                "role": "assistant",
                "content": plain.content or None,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)},
        ]
        answer = run.client.chat(follow, max_tokens=spec.max_tokens, tools=tools, extra_body=body)
        if not answer.ok:
            return CaseResult(name, False, f"{name}: tool-result turn: {answer.error}", latency, detail)
        if not answer.content.strip():
            what = f"another call to {answer.tool_calls[0].name}" if answer.tool_calls else "no content"
            return CaseResult(name, False, f"{name}: tool-result turn did not continue ({what})", latency, detail)
        detail["tool_result_answer"] = clip(answer.content)
    return CaseResult(name, True, f"{function['name']}({clip(call.arguments, 60)})", latency, detail)


def run(run: GateRun, spec: ToolsGate) -> GateResult:
    """``spec.cases`` cases over :data:`TOOLS`."""
    body = merged(spec.extra_body)
    cases = []
    for index in range(spec.cases):
        result = _run_case(run, spec, index, body)
        cases.append(result)
        run.report(GATE, index + 1, spec.cases, result)
    return GateResult.of(GATE, cases)
