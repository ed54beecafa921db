"""The stand-in's other API families: Anthropic Messages, Ollama, OpenAI embeddings, rerank and score.

What they take and answer comes from SGLang 0.5.23's source through the route catalog
(:mod:`servectl.profile.api_routes`, each entry citing file and line), and they behave the way SGLang's handlers do:

* ``POST /v1/messages`` (``anthropic/serving.py``): the request is turned into a chat request (system, text,
  ``tool_use`` -> assistant ``tool_calls``, ``tool_result`` -> ``tool`` messages, tools -> functions), answered by
  the same generation as ``/v1/chat/completions`` (scripted tool calls included), and turned back: a message
  with ``thinking``/``text``/``tool_use`` blocks, ``stop_reason`` from ``STOP_REASON_MAP``; streamed as
  ``event: TYPE\\ndata: JSON\\n\\n`` frames (``message_start`` with the input tokens, then per block
  ``content_block_start``/``_delta``/``_stop``, ``message_delta`` with the stop reason and output tokens,
  ``message_stop``; no ``ping``, as SGLang sends none). Refusals use the Anthropic envelope
  ``{"type": "error", "error": {"type", "message"}}`` with the status -> type map, 5xx as ``Internal server error``.
* ``POST /v1/messages/count_tokens``: ``{"input_tokens": N}``, the chat prompt's token count.
* ``POST /api/chat``, ``/api/generate`` (``ollama/serving.py``): ``stream`` defaults to true; NDJSON lines
  (``application/x-ndjson``) of ``{"model", "created_at", "message"|"response", "done": false}``, then a last
  ``done: true`` line with ``done_reason: "stop"``. As in SGLang, the last generated piece rides on the chunk
  that finishes, whose line is sent with empty content (so a streamed answer lacks its last chunk), and a
  stream carries no token counts; a whole answer has ``prompt_eval_count`` and ``eval_count``. ``options``
  map to sampling parameters (``num_predict`` -> ``max_new_tokens``, 2048 when unset). An empty prompt to
  ``/api/generate`` answers ``done`` at once.
* ``GET /api/tags``, ``POST /api/show``: the served model with SGLang's constant digest and details; ``show``
  has ``num_ctx`` = the context length.
* ``POST /v1/embeddings``: a model started with ``--is-embedding`` answers a unit vector per input (its
  ``hidden_size`` long, derived from the text), ``model`` = the model path as SGLang answers; a generation model
  refuses with SGLang's message. ``/v1/rerank`` and ``/v1/score`` answer deterministic scores in SGLang's shapes.

Standard library only: this module runs inside the stand-in image.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import struct
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from servectl.profile.api_routes import load_routes
from servectl.standin.behaviour import scripted_reply, wants_script
from servectl.standin.generation import GenerationEndpoints, _reply_pieces
from servectl.standin.pacing import GenerationPlan, paced_chunks, plan_generation
from servectl.standin.state import RequestError
from servectl.standin.tokens import content_text, count_chat_prompt_tokens, count_text_tokens

ROUTES = load_routes()
_ANTHROPIC = ROUTES["anthropic"]
_OLLAMA = ROUTES["ollama"]
STOP_REASONS: dict[str, str] = _ANTHROPIC["stop_reasons"]["map"]
HTTP_ERROR_TYPES: dict[str, str] = _ANTHROPIC["http_error_types"]["map"]
INTERNAL_ERROR = str(_ANTHROPIC["internal_error_message"]["message"])
SSE_FRAME = str(_ANTHROPIC["sse_frame"]["template"])
NDJSON = str(_OLLAMA["stream_media_type"]["values"][0])
OLLAMA_DEFAULT_MAX_NEW_TOKENS = int(_OLLAMA["default_max_new_tokens"]["value"])
OLLAMA_OPTIONS: dict[str, str] = _OLLAMA["options"]["map"]
EMBEDDING_REFUSAL = (
    "This model does not appear to be an embedding model by default. "
    "Please add `--is-embedding` when launching the server or try another model."
)  # sglang/srt/managers/tokenizer_manager.py (the check of an EmbeddingReqInput on a generation model)


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    """SGLang's Anthropic envelope for ``status`` (5xx never echo the detail)."""
    kind = HTTP_ERROR_TYPES.get(str(status), str(_ANTHROPIC["http_error_types"]["default"]))
    return {"type": "error", "error": {"type": kind, "message": INTERNAL_ERROR if status >= 500 else message}}


def ollama_timestamp() -> str:
    """``_get_timestamp``: UTC, milliseconds, ``Z``."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# -- request checks (pydantic's messages, as SGLang's validation handler renders them) ------------------------


def _missing(body: Mapping[str, Any], model: str) -> list[str]:
    fields = ROUTES_MODELS[model]["fields"]
    return [f"{name}: Field required" for name, spec in fields.items() if spec["required"] and name not in body]


def _check(errors: list[str]) -> None:
    if errors:
        text = "; ".join(errors)
        raise RequestError(400, text[:500] + ("…" if len(text) > 500 else ""))


def _check_anthropic(body: Mapping[str, Any], model: str) -> None:
    errors = _missing(body, model)
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
    _check(errors)


def _check_ollama(body: Mapping[str, Any], model: str) -> None:
    errors = _missing(body, model)
    if "model" in body and not isinstance(body["model"], str):
        errors.append("model: Input should be a valid string")
    if model == "OllamaChatRequest" and "messages" in body:
        messages = body["messages"]
        if not isinstance(messages, list):
            errors.append("messages: Input should be a valid list")
        else:
            for i, m in enumerate(messages):
                if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
                    errors.append(f"messages.{i}.role: Field required")
                elif not isinstance(m.get("content"), str):
                    errors.append(f"messages.{i}.content: Input should be a valid string")
    if model == "OllamaGenerateRequest" and "prompt" in body and not isinstance(body["prompt"], str):
        errors.append("prompt: Input should be a valid string")
    if "stream" in body and not isinstance(body["stream"], bool):
        errors.append("stream: Input should be a valid boolean")
    if body.get("options") is not None and not isinstance(body["options"], Mapping):
        errors.append("options: Input should be a valid dictionary")
    _check(errors)


ROUTES_MODELS: dict[str, Any] = {**_ANTHROPIC["models"], **_OLLAMA["models"], **ROUTES["openai"]["models"]}


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


# -- one generation, written out by each family ------------------------------------------------------------------


@dataclass
class Turn:
    """What the model "says" for one request: a piece per completion token, and the plan that paces them."""

    plan: GenerationPlan
    items: list[tuple[str, str, int]]  # (reasoning|content|name|args, text, tool index)
    call_ids: list[str]

    @property
    def tool_names(self) -> dict[int, str]:
        return {j: t for k, t, j in self.items if k == "name"}

    def text(self, kind: str, first: int = 0, last: int | None = None) -> str:
        return "".join(t for k, t, _ in self.items[first:last] if k == kind)

    def args(self, index: int) -> str:
        return "".join(t for k, t, j in self.items if k == "args" and j == index)


@dataclass
class _Block:
    """The content block a stream has open: its index and kind (None between blocks)."""

    index: int = 0
    open: str | None = None


class FamilyEndpoints(GenerationEndpoints):
    """Anthropic, Ollama and the embeddings-style endpoints, on the chat generation of the base class."""

    def _turn(self, chat: dict[str, Any], *, streamed: bool, max_tokens: int | None) -> Turn:
        self._require_ready()
        prompt_tokens = count_chat_prompt_tokens(chat["messages"])
        if wants_script(chat):
            parser = self.state.args.get("reasoning_parser")
            reply = scripted_reply(
                chat,
                settings=self.state.settings,
                reasoning_parser=str(parser) if parser else None,
                prompt_tokens=prompt_tokens,
            )
            plan_generation(self.state, prompt_tokens=prompt_tokens, max_tokens=max_tokens, min_tokens=0,
                            ignore_eos=False)  # fmt: skip  # refuses what does not fit the context
            items = _reply_pieces(reply, streamed=streamed)
            finish = reply.finish_reason
            if max_tokens is not None and len(items) > max_tokens:
                items, finish = items[:max_tokens], "length"
            plan = GenerationPlan(prompt_tokens, len(items), finish, self.state.settings.die_after_tokens)
            return Turn(plan, items, [f"toolu_{uuid.uuid4().hex[:24]}" for _ in reply.tool_calls])
        plan = plan_generation(
            self.state, prompt_tokens=prompt_tokens, max_tokens=max_tokens, min_tokens=0, ignore_eos=False
        )
        return Turn(plan, [("content", self._text(i, 1), -1) for i in range(plan.completion_tokens)], [])

    def _paced(self, turn: Turn) -> Iterator[tuple[int, int]]:
        self.state.request_started()
        try:
            yield from paced_chunks(self.state, turn.plan)
        finally:
            self.state.request_finished()

    def _start_chunked(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    # -- Anthropic ---------------------------------------------------------------------------------------------
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

    # -- Ollama ------------------------------------------------------------------------------------------------
    def _ollama_max_tokens(self, body: Mapping[str, Any]) -> int | None:
        options = body.get("options") or {}
        wanted = options.get("num_predict") if "num_predict" in OLLAMA_OPTIONS else None
        if isinstance(wanted, int) and not isinstance(wanted, bool) and wanted > 0:
            return wanted
        return None  # the model stops at its end of sequence, below the 2048 SGLang caps it at

    def ollama_chat(self, body: dict[str, Any]) -> None:
        _check_ollama(body, "OllamaChatRequest")
        chat = {"messages": [{"role": m["role"], "content": m["content"]} for m in body["messages"]]}
        self._ollama_answer(body, chat, field="message")

    def ollama_generate(self, body: dict[str, Any]) -> None:
        _check_ollama(body, "OllamaGenerateRequest")
        prompt = str(body["prompt"])
        if body.get("system"):
            prompt = f"{body['system']}\n\n{prompt}"
        stream = body.get("stream", True)
        if not prompt.strip():  # the Ollama CLI sends an empty request when it starts
            empty = self._ollama_line(body, "response", "", done=True, whole=not stream)
            if stream:
                self._start_chunked(NDJSON)
                self._chunk(json.dumps(empty).encode() + b"\n")
                self._chunk(b"")
            else:
                self._send_json(200, empty)
            return
        self._ollama_answer(body, {"messages": [{"role": "user", "content": prompt}]}, field="response")

    def _ollama_line(
        self,
        body: Mapping[str, Any],
        field: str,
        text: str,
        *,
        done: bool,
        whole: bool = False,
        turn: Turn | None = None,
        started: int = 0,
    ) -> dict[str, Any]:
        line: dict[str, Any] = {"model": self.state.served_model_name, "created_at": ollama_timestamp()}
        line[field] = {"role": "assistant", "content": text, "images": None} if field == "message" else text
        line.update({"done": done, "done_reason": "stop" if done else None})
        if whole:
            if field == "response":
                line["context"] = None
            line.update(
                {
                    "total_duration": time.time_ns() - started if started else None,
                    "load_duration": None,
                    "prompt_eval_count": turn.plan.prompt_tokens if turn else None,
                    "prompt_eval_duration": None,
                    "eval_count": turn.plan.completion_tokens if turn else None,
                    "eval_duration": None,
                }
            )
        return line

    def _ollama_answer(self, body: Mapping[str, Any], chat: dict[str, Any], *, field: str) -> None:
        stream = body.get("stream", True)
        turn = self._turn(chat, streamed=bool(stream), max_tokens=self._ollama_max_tokens(body))
        started = time.time_ns()
        if not stream:
            for _ in self._paced(turn):
                pass
            line = self._ollama_line(
                body, field, turn.text("content"), done=True, whole=True, turn=turn, started=started
            )
            self._send_json(200, line)
            return
        self._start_chunked(NDJSON)
        last = turn.plan.completion_tokens
        for first, count in self._paced(turn):
            done = first + count
            if done >= last:  # SGLang sends the finishing chunk as the done line, its text left out
                break
            line = self._ollama_line(body, field, turn.text("content", first, done), done=False)
            self._chunk(json.dumps(line).encode() + b"\n")
        self._chunk(json.dumps(self._ollama_line(body, field, "", done=True)).encode() + b"\n")
        self._chunk(b"")

    def ollama_tags(self, _body: dict[str, Any]) -> None:
        name = self.state.served_model_name
        tags = _OLLAMA["tags"]
        model = {
            "name": name,
            "model": name,
            "modified_at": ollama_timestamp(),
            "size": tags["size"],
            "digest": tags["digest"],
            "details": {"format": "sglang", "family": name.split("/")[-1], "parameter_size": "unknown"},
        }
        self._send_json(200, {"models": [model]})

    def ollama_show(self, body: dict[str, Any]) -> None:
        _check_ollama(body, "OllamaShowRequest")
        model = str(body["model"])
        family = model.split("/")[-1]
        for suffix in _OLLAMA["show"]["family_suffixes"]:
            if family.endswith(suffix):
                family = family[: -len(suffix)]
                break
        context_len = self.state.context_length
        show = _OLLAMA["show"]
        self._send_json(
            200,
            {
                "license": "",
                "modelfile": str(show["modelfile"]).format(model=model, context_len=context_len),
                "parameters": str(show["parameters"]).format(context_len=context_len),
                "template": "",
                "modified_at": ollama_timestamp(),
                "details": {
                    "parent_model": "",
                    "format": "sglang",
                    "family": family,
                    "families": [family],
                    "parameter_size": "unknown",
                    "quantization_level": "",
                },
                "model_info": {
                    "general.architecture": family,
                    "general.name": model,
                    "general.parameter_count": 0,
                    f"{family}.context_length": context_len,
                    f"{family}.block_count": 0,
                    f"{family}.embedding_length": 0,
                    f"{family}.attention.head_count": 0,
                },
                "capabilities": list(show["capabilities"]),
            },
        )

    # -- embeddings, rerank, score -----------------------------------------------------------------------------
    def embeddings(self, body: dict[str, Any]) -> None:
        self._require_ready()
        if "input" not in body:
            raise RequestError(400, "input: Field required")
        fmt = body.get("encoding_format", "float")
        if fmt not in ("float", "base64"):
            raise RequestError(400, f"encoding_format must be either 'float' or 'base64', got {fmt!r}")
        inputs = body["input"]
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs:
            raise RequestError(400, "Input cannot be empty")
        if all(isinstance(i, str) for i in inputs):
            if any(not i.strip() for i in inputs):
                raise RequestError(400, "Input cannot be empty or whitespace only")
        elif all(isinstance(i, int) and not isinstance(i, bool) for i in inputs):
            inputs = [" ".join(str(i) for i in inputs)]
        else:
            raise RequestError(400, "All items in input list must be strings")
        if not self.state.args.get("is_embedding"):
            raise RequestError(400, EMBEDDING_REFUSAL)
        dims = body.get("dimensions") or self.state.hidden_size
        if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
            raise RequestError(400, f"dimensions must be a positive integer, got {dims!r}")
        data, prompt_tokens = [], 0
        for index, text in enumerate(inputs):
            vector = unit_vector(str(text), dims)
            value: Any = vector if fmt == "float" else base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode()
            data.append({"embedding": value, "index": index, "object": "embedding"})
            prompt_tokens += count_text_tokens(str(text))
        self._send_json(
            200,
            {
                "data": data,
                "model": str(self.state.args["model_path"]),
                "object": "list",
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "total_tokens": prompt_tokens,
                    "completion_tokens": 0,
                    "prompt_tokens_details": None,
                    "reasoning_tokens": 0,
                },
            },
        )

    def rerank(self, body: dict[str, Any]) -> None:
        self._require_ready()
        query, documents = body.get("query"), body.get("documents")
        if not isinstance(query, str) or not isinstance(documents, list) or not documents:
            raise RequestError(400, "query: a string and documents: a non-empty list are required")
        top_n = body.get("top_n")
        if top_n is not None and (not isinstance(top_n, int) or top_n < 1):
            raise RequestError(400, "Value error, parameter top_n should be larger than 0.")
        rows = [
            {"score": similarity(query, content_text(d)), "document": content_text(d), "index": i, "meta_info": None}
            for i, d in enumerate(documents)
        ]
        rows.sort(key=lambda r: -float(r["score"] or 0.0))
        if body.get("return_documents", True) is False:
            for row in rows:
                row.pop("document")
        self._send_json(200, rows[: top_n or len(rows)])

    def score(self, body: dict[str, Any]) -> None:
        self._require_ready()
        query, items = body.get("query"), body.get("items")
        if isinstance(items, str):
            items = [items]
        labels = body.get("label_token_ids")
        if not isinstance(query, str) or not isinstance(items, list) or not isinstance(labels, list) or not labels:
            raise RequestError(400, "query, items and label_token_ids are required")
        scores = [[similarity(query + str(label), str(item)) for label in labels] for item in items]
        if body.get("apply_softmax"):
            scores = [[math.exp(s) / sum(math.exp(x) for x in row) for s in row] for row in scores]
        self._send_json(
            200, {"scores": scores, "model": self.state.served_model_name, "usage": None, "object": "scoring"}
        )


def unit_vector(text: str, dims: int) -> list[float]:
    """A deterministic unit vector for ``text`` (the same text, the same vector)."""
    raw: list[float] = []
    counter = 0
    while len(raw) < dims:
        digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        raw += [b / 127.5 - 1.0 for b in digest]
        counter += 1
    raw = raw[:dims]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [round(x / norm, 6) for x in raw]


def similarity(a: str, b: str) -> float:
    """Word overlap of two texts in [0, 1] (a stand-in relevance score)."""
    wa, wb = set(a.lower().split()), set(b.lower().split())
    return round(len(wa & wb) / max(1, len(wa | wb)), 6)


__all__ = ["ROUTES", "FamilyEndpoints", "anthropic_error", "anthropic_to_chat", "unit_vector"]
