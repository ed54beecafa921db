"""Scripted answers of the stand-in: tool calls, JSON output, reasoning and needle retrieval, on cue.

A plain chat request gets the paced lorem-ipsum completion (:mod:`servectl.standin.generation`). A request that
asks for something a client checks gets a scripted :class:`Reply` instead, shaped the way SGLang returns it:

* ``tools`` offered (and ``tool_choice`` not ``"none"``): one call of the tool that ``tool_choice`` names, else
  of the first tool whose name appears in the last user message, else of the first tool; its arguments are
  an example built from the tool's JSON schema (every property, enums take their first value). The
  response's ``finish_reason`` is ``tool_calls``. Streaming sends the call as SGLang's
  ``serving_chat.py::_process_tool_call_stream`` does: a first delta with ``id``, ``index``, ``type`` and the
  function ``name`` with empty ``arguments``, then deltas of ``arguments`` text only (``id`` and ``name`` null).
* The last message is a ``tool`` result: a text answer quoting the result (the conversation continues).
* ``response_format`` ``json_object`` / ``json_schema``: JSON content (an example of the schema).
* ``chat_template_kwargs.enable_thinking`` true (GLM/Qwen templates; SGLang passes these kwargs to the chat
  template and reads the same toggle to decide whether the reasoning parser expects thinking:
  ``serving_chat.py::_get_reasoning_from_request``): with ``--reasoning-parser`` set, the reasoning goes to
  ``reasoning_content`` (``delta.reasoning_content`` when streaming, ``_process_reasoning_stream``) and
  ``content`` is clean; without a parser the ``<think>...</think>`` text stays in ``content``, as SGLang
  returns it then. ``enable_thinking`` false: no reasoning. Absent: no reasoning either (real GLM thinks by
  default; the stand-in stays plain so that benchmarks see plain completions).
* A prompt holding ``secret code is <CODE>``: the answer names the code while the prompt fits
  ``STANDIN_NEEDLE_MAX_TOKENS`` (unset: any length); longer prompts get an answer without it.

Faults, so that a client's checks can be seen to fail (``STANDIN_*`` variables, see
:mod:`servectl.standin.settings`): ``STANDIN_TOOL_FAULT`` = ``wrong_function`` | ``malformed_args`` |
``schema_args`` | ``stream_mismatch`` | ``no_continue``; ``STANDIN_JSON_FAULT`` = ``invalid`` | ``schema``;
``STANDIN_REASONING_FAULT=leak`` (think tags in ``content`` even with a parser, and an empty
``<think></think>`` with thinking off); ``STANDIN_USAGE_SKEW`` (usage reports this many extra completion
tokens); ``STANDIN_ERROR_EVERY`` (every k-th generation request fails with HTTP 500).

Standard library only: this module runs inside the stand-in image.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from servectl.standin.answers import (
    code_answer,
    code_function,
    image_answer,
    image_parts,
    named_file_text,
    shell_call,
    shell_result,
)
from servectl.standin.settings import StandinSettings
from servectl.standin.tokens import content_text

#: What a thinking model "thinks" before it answers (counted in completion tokens).
REASONING_TEXT = "The user asks a question. I check the request and answer it briefly."
NEEDLE = re.compile(r"secret code is ([A-Za-z0-9-]+)")
_PIECE = re.compile(r"\s*(?:\w+|[^\w\s])")


@dataclass(frozen=True)
class ToolCall:
    """One function call of a reply: its name and the ``arguments`` text (JSON, unless a fault breaks it)."""

    name: str
    arguments: str
    streamed_arguments: str | None = None  # what streaming sends instead (``stream_mismatch``)


@dataclass(frozen=True)
class Reply:
    """A scripted assistant turn: reasoning, content and tool calls, in the order a model emits them."""

    content: str = ""
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = field(default_factory=tuple)

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"


def pieces(text: str) -> list[str]:
    """``text`` cut into one-token pieces (leading spaces kept), so that streamed deltas join back to it."""
    found = _PIECE.findall(text)
    rest = text[len("".join(found)) :]
    if rest and found:
        found[-1] += rest
    elif rest:
        found = [rest]
    return found


def wants_script(body: Mapping[str, Any]) -> bool:
    """Whether a chat request gets a scripted :class:`Reply` instead of the paced lorem completion."""
    messages = body.get("messages") or []
    last = messages[-1] if messages and isinstance(messages[-1], Mapping) else {}
    return bool(
        (body.get("tools") and body.get("tool_choice") != "none")
        or _response_format(body) is not None
        or _thinking(body) is True
        # thinking off changes nothing for a fixed-length (ignore_eos) request, e.g. a benchmark's: it stays plain
        or (_thinking(body) is False and not body.get("ignore_eos"))
        or last.get("role") == "tool"
        or bool(image_parts([m for m in messages if isinstance(m, Mapping)]))
        or code_function(content_text(last.get("content"))) is not None
        or any(NEEDLE.search(content_text(m.get("content"))) for m in messages if isinstance(m, Mapping))
    )


def scripted_reply(
    body: Mapping[str, Any], *, settings: StandinSettings, reasoning_parser: str | None, prompt_tokens: int
) -> Reply:
    """The reply to a request for which :func:`wants_script` holds."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
    reasoning, leaked = _reasoning(body, settings=settings, reasoning_parser=reasoning_parser)
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        result = content_text(last.get("content"))
        content = "" if settings.tool_fault == "no_continue" else f"The tool returned {result.strip()[:200]}. Done."
        return Reply(content=leaked + content, reasoning=reasoning)
    tools = [t for t in body.get("tools") or [] if isinstance(t, Mapping)]
    user_text = _last_user_text(messages)
    if tools and body.get("tool_choice") != "none":
        read = shell_result(messages)
        if read is not None:  # the file was read already (a client added a turn after the result): answer
            return Reply(content=leaked + f"The tool returned {read.strip()[:200]}. Done.", reasoning=reasoning)
        shell = shell_call(tools, named_file_text(messages))
        call = ToolCall(*shell) if shell else _tool_call(tools, body, user_text, settings)
        return Reply(content=leaked, reasoning=reasoning, tool_calls=(call,))
    response_format = _response_format(body)
    if response_format is not None:
        return Reply(content=leaked + _json_content(response_format, settings), reasoning=reasoning)
    images = image_parts(messages)
    if images:
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        answer = image_answer(images, fault=settings.image_fault, max_tokens=max_tokens)
        return Reply(content=leaked + answer, reasoning=reasoning)
    function = code_function(user_text)
    if function is not None:
        answer = code_answer(function, mode=settings.code_answer, solutions_file=settings.code_solutions)
        return Reply(content=leaked + answer, reasoning=reasoning)
    prompt = " ".join(content_text(m.get("content")) for m in messages)
    needle = NEEDLE.search(prompt)
    if needle is not None:
        limit = settings.needle_max_tokens
        if limit is None or prompt_tokens <= limit:
            return Reply(content=leaked + f"The secret code is {needle.group(1)}.", reasoning=reasoning)
        return Reply(content=leaked + "I could not find a secret code in the text.", reasoning=reasoning)
    return Reply(content=leaked + "Hello! How can I help you today?", reasoning=reasoning)


# -- reasoning -------------------------------------------------------------------------------------------------


def _thinking(body: Mapping[str, Any]) -> bool | None:
    kwargs = body.get("chat_template_kwargs")
    if not isinstance(kwargs, Mapping) or "enable_thinking" not in kwargs:
        return None
    return bool(kwargs["enable_thinking"])


def _reasoning(
    body: Mapping[str, Any], *, settings: StandinSettings, reasoning_parser: str | None
) -> tuple[str | None, str]:
    """``(reasoning_content, text leaked into content)`` for the request's thinking mode."""
    thinking = _thinking(body)
    leak = settings.reasoning_fault == "leak"
    if not thinking:
        return None, ("<think></think>" if leak and thinking is False else "")
    # separate_reasoning defaults to true in SGLang's ChatCompletionRequest; a parser is needed to split.
    if reasoning_parser and body.get("separate_reasoning", True) and not leak:
        return REASONING_TEXT, ""
    return None, f"<think>{REASONING_TEXT}</think>"


# -- tools -------------------------------------------------------------------------------------------------------


def _last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    function = tool.get("function")
    return function if isinstance(function, Mapping) else {}


def _tool_call(
    tools: Sequence[Mapping[str, Any]], body: Mapping[str, Any], user_text: str, settings: StandinSettings
) -> ToolCall:
    names = [str(_function(t).get("name", "")) for t in tools]
    choice = body.get("tool_choice")
    chosen = 0
    if isinstance(choice, Mapping) and isinstance(choice.get("function"), Mapping):
        wanted = str(choice["function"].get("name", ""))
        chosen = names.index(wanted) if wanted in names else 0
    else:
        mentioned = [i for i, name in enumerate(names) if name and re.search(rf"\b{re.escape(name)}\b", user_text)]
        chosen = mentioned[0] if mentioned else 0
    fault = settings.tool_fault
    name = names[chosen]
    if fault == "wrong_function":
        name = names[(chosen + 1) % len(names)] if len(names) > 1 else f"{name}_v2"
    schema = _function(tools[chosen]).get("parameters")
    example = example_for(schema if isinstance(schema, Mapping) else {"type": "object"})
    arguments = json.dumps(example)
    if fault == "malformed_args":
        arguments = arguments[:-1] + ", "  # cut off, as a model that stops mid-object
    elif fault == "schema_args":
        arguments = json.dumps({"unexpected": True})
    streamed = None
    if fault == "stream_mismatch" and isinstance(example, dict):
        streamed = json.dumps(_altered(example, schema if isinstance(schema, Mapping) else {}))
    return ToolCall(name=name, arguments=arguments, streamed_arguments=streamed)


def _altered(example: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """``example`` with one free value changed, still valid: what a stream that drifts from the plain call sends."""
    props = schema.get("properties") or {}
    for key, value in example.items():
        found = props.get(key)
        spec: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        if "enum" in spec or "const" in spec:
            continue
        if isinstance(value, str):
            return {**example, key: value + " (streamed)"}
        if isinstance(value, int | float) and not isinstance(value, bool) and "maximum" not in spec:
            return {**example, key: value + 1}
    return example


def example_for(schema: Mapping[str, Any]) -> Any:
    """A value that validates against a (simple) JSON schema: every property, first enum value, bounds kept."""
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        props = schema.get("properties") or {}
        return {str(k): example_for(v if isinstance(v, Mapping) else {}) for k, v in props.items()}
    if kind == "array":
        items = schema.get("items")
        count = max(1, int(schema.get("minItems") or 1))
        return [example_for(items if isinstance(items, Mapping) else {"type": "string"}) for _ in range(count)]
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.5))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    text = "example"
    return text + "x" * max(0, int(schema.get("minLength") or 0) - len(text))


# -- JSON output -------------------------------------------------------------------------------------------------


def _response_format(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping) and fmt.get("type") in ("json_object", "json_schema"):
        return fmt
    return None


def _json_content(fmt: Mapping[str, Any], settings: StandinSettings) -> str:
    schema: Mapping[str, Any] = {"type": "object", "properties": {"answer": {"type": "string"}}}
    spec = fmt.get("json_schema")
    if fmt.get("type") == "json_schema" and isinstance(spec, Mapping) and isinstance(spec.get("schema"), Mapping):
        schema = spec["schema"]
    text = json.dumps(example_for(schema))
    if settings.json_fault == "invalid":
        return text[: max(1, len(text) // 2)]
    if settings.json_fault == "schema":
        return json.dumps({"unexpected": [1, 2, 3]}) if fmt.get("type") == "json_schema" else json.dumps([1, 2, 3])
    return text
