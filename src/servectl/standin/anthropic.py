"""The stand-in's Anthropic Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``), as SGLang
0.5.23's ``entrypoints/anthropic/serving.py`` answers it (see :mod:`servectl.standin.families` for all families).

The request is turned into a chat request (system, text, ``tool_use`` -> assistant ``tool_calls``,
``tool_result`` -> ``tool`` messages, tools -> functions), answered by the chat generation (scripted tool calls
included), and turned back: a message with ``thinking``/``text``/``tool_use`` blocks and ``stop_reason`` from
``STOP_REASON_MAP``; streamed as ``event: TYPE\\ndata: JSON\\n\\n`` frames. Refusals use the Anthropic envelope.

Standard library only: this module runs inside the stand-in image.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servectl.standin.tokens import count_chat_prompt_tokens
from servectl.standin.turn import ROUTES, Turn, TurnEndpoints, check, missing

_ANTHROPIC = ROUTES["anthropic"]
STOP_REASONS: dict[str, str] = _ANTHROPIC["stop_reasons"]["map"]
HTTP_ERROR_TYPES: dict[str, str] = _ANTHROPIC["http_error_types"]["map"]
INTERNAL_ERROR = str(_ANTHROPIC["internal_error_message"]["message"])
SSE_FRAME = str(_ANTHROPIC["sse_frame"]["template"])


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    """SGLang's Anthropic envelope for ``status`` (5xx never echo the detail)."""
    kind = HTTP_ERROR_TYPES.get(str(status), str(_ANTHROPIC["http_error_types"]["default"]))
    return {"type": "error", "error": {"type": kind, "message": INTERNAL_ERROR if status >= 500 else message}}


def _check_anthropic(body: Mapping[str, Any], model: str) -> None:
    errors = missing(body, model)
    if "model" in body and (not isinstance(body["model"], str) or not body["model"]):
        errors.append(
            "model: Input should be a valid string"
            if not isinstance(body["model"], str)
            else "model: Value error, Model is required"
        )
    messages = body.get("messages")
    if "messages" in body and not isinstance(messages, list):
        errors.append("messages: Input should be a valid list")
    elif isinstance(messages, list):
        for i, m in enumerate(messages):
            if not isinstance(m, Mapping):
                errors.append(f"messages.{i}: Input should be a valid dictionary or object to extract fields from")
            elif m.get("role") not in ("user", "assistant", "system"):
                errors.append(f"messages.{i}.role: Input should be 'user', 'assistant' or 'system'")
            elif not isinstance(m.get("content"), str | list):
                errors.append(f"messages.{i}.content: Input should be a valid string")
    if model == "AnthropicMessagesRequest" and "max_tokens" in body:
        value = body["max_tokens"]
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append("max_tokens: Input should be a valid integer")
        elif value <= 0:
            errors.append("max_tokens: Value error, max_tokens must be positive")
    check(errors)


# -- Anthropic -> chat (anthropic/serving.py::_convert_to_chat_completion_request) -------------------------------


def _system_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content.strip() or None
    texts = [
        str(b.get("text") or "").strip() for b in content or [] if isinstance(b, Mapping) and b.get("type") == "text"
    ]
    return "\n".join(t for t in texts if t) or None


def _tool_result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, Mapping) and b.get("type") == "text")
    return ""


def anthropic_to_chat(body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat request SGLang builds from an Anthropic Messages request (the parts the stand-in answers from)."""
    messages: list[dict[str, Any]] = []
    system = _system_text(body.get("system")) if body.get("system") is not None else None
    if system:
        messages.append({"role": "system", "content": system})
    for msg in body["messages"]:
        role, content = msg["role"], msg["content"]
        if isinstance(content, str):
            messages.append({"role": role, "content": content})
            continue
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for block in content:
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if kind == "text" and block.get("text") is not None:
                texts.append(str(block["text"]))
            elif kind == "tool_use":
                calls.append(
                    {
                        "id": block.get("id") or f"call_{uuid.uuid4().hex}",
                        "type": "function",
                        "function": {
                            "name": block.get("name") or "",
                            "arguments": json.dumps(block.get("input") or {}),
                        },
                    }
                )
            elif kind == "tool_result":
                if role == "user":
                    if texts:
                        messages.append({"role": "user", "content": " ".join(texts)})
                        texts = []
                    messages.append(
                        {
                            "role": "tool",
                            "tool_call_id": block.get("tool_use_id") or block.get("id") or "",
                            "content": _tool_result_text(block.get("content")),
                        }
                    )
                else:
                    texts.append(f"Tool result: {_tool_result_text(block.get('content'))}")
        if texts or calls:
            turn: dict[str, Any] = {"role": role, "content": " ".join(texts)}
            if calls:
                turn["tool_calls"] = calls
            messages.append(turn)
    chat: dict[str, Any] = {"messages": messages, "model": body["model"], "max_tokens": body.get("max_tokens")}
    tools = [
        {
            "type": "function",
            "function": {"name": t["name"], "description": t.get("description") or "", "parameters": t["input_schema"]},
        }
        for t in body.get("tools") or []
        if isinstance(t, Mapping) and t.get("type") in (None, "custom") and isinstance(t.get("input_schema"), Mapping)
    ]
    if tools:
        chat["tools"] = tools
        choice = body.get("tool_choice")
        kind = choice.get("type") if isinstance(choice, Mapping) else "auto"
        if kind == "none":
            chat["tool_choice"] = "none"
        elif kind == "tool":
            chat["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}  # type: ignore[union-attr]
        else:
            chat["tool_choice"] = "required" if kind == "any" else "auto"
    thinking = body.get("thinking")
    if isinstance(thinking, Mapping):
        chat["chat_template_kwargs"] = {"enable_thinking": thinking.get("type") != "disabled"}
    return chat


@dataclass
class _Block:
    """The content block a stream has open: its index and kind (None between blocks)."""

    index: int = 0
    open: str | None = None


class AnthropicEndpoints(TurnEndpoints):
    """``/v1/messages`` and ``/v1/messages/count_tokens``."""

    def anthropic_messages(self, body: dict[str, Any]) -> None:
        _check_anthropic(body, "AnthropicMessagesRequest")
        chat = anthropic_to_chat(body)
        stream = bool(body.get("stream"))
        turn = self._turn(chat, streamed=stream, max_tokens=int(body["max_tokens"]))
        model = str(body["model"])
        if stream:
            self._anthropic_stream(turn, model)
            return
        for _ in self._paced(turn):
            pass
        content: list[dict[str, Any]] = []
        if reasoning := turn.text("reasoning"):
            content.append({"type": "thinking", "thinking": reasoning})
        if text := turn.text("content"):
            content.append({"type": "text", "text": text})
        for index, name in turn.tool_names.items():
            try:
                tool_input = json.loads(turn.args(index))
            except json.JSONDecodeError:
                tool_input = {}
            content.append({"type": "tool_use", "id": turn.call_ids[index], "name": name, "input": tool_input})
        self._send_json(
            200,
            {
                "id": f"msg_{uuid.uuid4().hex}",
                "type": "message",
                "role": "assistant",
                "content": content or [{"type": "text", "text": ""}],
                "model": model,
                "stop_reason": STOP_REASONS.get(turn.plan.finish_reason, "end_turn"),
                "usage": {"input_tokens": turn.plan.prompt_tokens, "output_tokens": turn.plan.completion_tokens},
            },
        )

    def _anthropic_stream(self, turn: Turn, model: str) -> None:
        def emit(event: dict[str, Any]) -> None:
            data = json.dumps(event, separators=(",", ":"))
            self._chunk(SSE_FRAME.format(event_type=event["type"], data=data).encode())

        self._start_chunked("text/event-stream; charset=utf-8")
        block = _Block()

        def close() -> None:
            if block.open is not None:
                emit({"type": "content_block_stop", "index": block.index})
                block.open, block.index = None, block.index + 1

        def open_block(kind: str, start: dict[str, Any], force: bool = False) -> None:
            if block.open is not None and (force or block.open != kind):
                close()
            if block.open is None:
                emit({"type": "content_block_start", "index": block.index, "content_block": start})
                block.open = kind

        emit(
            {
                "type": "message_start",
                "message": {
                    "id": f"msg_{uuid.uuid4().hex}",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": model,
                    "usage": {"input_tokens": turn.plan.prompt_tokens, "output_tokens": 0},
                },
            }
        )
        done = 0
        for first, count in self._paced(turn):
            done = first + count
            for kind, text, index in turn.items[first:done]:
                if kind == "reasoning":
                    open_block("thinking", {"type": "thinking", "thinking": ""})
                    delta: dict[str, Any] = {"type": "thinking_delta", "thinking": text}
                elif kind == "content":
                    open_block("text", {"type": "text", "text": ""})
                    delta = {"type": "text_delta", "text": text}
                elif kind == "name":
                    open_block(
                        "tool_use",
                        {"type": "tool_use", "id": turn.call_ids[index], "name": text, "input": {}},
                        force=True,
                    )
                    continue
                else:
                    delta = {"type": "input_json_delta", "partial_json": text}
                emit({"type": "content_block_delta", "index": block.index, "delta": delta})
        close()
        emit(
            {
                "type": "message_delta",
                "delta": {"stop_reason": STOP_REASONS.get(turn.plan.finish_reason, "end_turn")},
                "usage": {"output_tokens": done},
            }
        )
        emit({"type": "message_stop"})
        self._chunk(b"")

    def anthropic_count_tokens(self, body: dict[str, Any]) -> None:
        _check_anthropic(body, "AnthropicCountTokensRequest")
        chat = anthropic_to_chat({**body, "max_tokens": 1})
        self._send_json(200, {"input_tokens": count_chat_prompt_tokens(chat["messages"])})


__all__ = ["AnthropicEndpoints", "anthropic_error", "anthropic_to_chat"]
