"""The stand-in's other API families: Anthropic Messages, Ollama, OpenAI embeddings, rerank and score
(Anthropic's endpoints live in :mod:`servectl.standin.anthropic`, the shared generation in
:mod:`servectl.standin.turn`).

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
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from servectl.standin.anthropic import AnthropicEndpoints, anthropic_error
from servectl.standin.state import RequestError
from servectl.standin.tokens import content_text, count_text_tokens
from servectl.standin.turn import ROUTES, Turn, check, missing

_OLLAMA = ROUTES["ollama"]
NDJSON = str(_OLLAMA["stream_media_type"]["values"][0])
OLLAMA_DEFAULT_MAX_NEW_TOKENS = int(_OLLAMA["default_max_new_tokens"]["value"])
OLLAMA_OPTIONS: dict[str, str] = _OLLAMA["options"]["map"]
EMBEDDING_REFUSAL = (
    "This model does not appear to be an embedding model by default. "
    "Please add `--is-embedding` when launching the server or try another model."
)  # sglang/srt/managers/tokenizer_manager.py (the check of an EmbeddingReqInput on a generation model)


def ollama_timestamp() -> str:
    """``_get_timestamp``: UTC, milliseconds, ``Z``."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _check_ollama(body: Mapping[str, Any], model: str) -> None:
    errors = missing(body, model)
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
    check(errors)


class FamilyEndpoints(AnthropicEndpoints):
    """Ollama and the embeddings-style endpoints, beside Anthropic's (:mod:`servectl.standin.anthropic`)."""

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


__all__ = ["ROUTES", "FamilyEndpoints", "anthropic_error", "unit_vector"]
