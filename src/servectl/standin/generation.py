"""The stand-in's generation endpoints: OpenAI chat and text completions and SGLang's native ``/generate``,
streamed or not, paced by :mod:`servectl.standin.pacing`; scripted replies from :mod:`servectl.standin.behaviour`."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from servectl.standin.answers import image_parts
from servectl.standin.behaviour import Reply, pieces, scripted_reply, wants_script
from servectl.standin.pacing import GenerationPlan, paced_chunks, plan_generation, spec_figures, usage_body
from servectl.standin.state import RequestError
from servectl.standin.tokens import chat_prompt_keys, count_chat_prompt_tokens, count_text_tokens, generated_text
from servectl.standin.transport import HandlerBase

#: ``max_new_tokens`` default of SGLang's native ``/generate``.
GENERATE_DEFAULT_MAX_NEW_TOKENS = 128


# -- request parsing ---------------------------------------------------------------------------------------


def _int_field(body: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RequestError(400, f"{name} must be a non-negative integer, got {value!r}")
        return value
    return None


def _stream_options(body: Mapping[str, Any]) -> tuple[bool, bool]:
    options = body.get("stream_options") or {}
    if not isinstance(options, Mapping):
        raise RequestError(400, "stream_options must be an object")
    return bool(options.get("include_usage")), bool(options.get("continuous_usage_stats"))


class GenerationEndpoints(HandlerBase):
    """The endpoints that generate tokens; each first checks readiness and ``STANDIN_ERROR_EVERY``."""

    def _text(self, start: int, count: int) -> str:
        """The completion text; ``!`` per token when the weights are gone (the memory saver dropped them),
        the way a model with garbage weights repeats one token."""
        memory = self.state.memory
        if memory is not None and memory.output_is_wrong:
            return "!" * count
        return generated_text(start, count)

    def _require_ready(self) -> None:
        if not self.state.ready.is_set():
            raise RequestError(
                503,
                f"The server is not ready yet (still starting: {self.state.phase}).",
                "ServiceUnavailableError",
            )
        every = self.state.settings.error_every
        number = self.state.next_generation()
        if every is not None and number % every == 0:
            raise RequestError(
                500, f"Internal server error (STANDIN_ERROR_EVERY={every}, request {number})", "InternalServerError"
            )

    # -- generation --------------------------------------------------------------------------------
    def chat_completions(self, body: dict[str, Any]) -> None:
        self._require_ready()
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, Mapping) for m in messages):
            raise RequestError(400, "messages must be a non-empty list of message objects")
        if image_parts(messages) and not self.state.args.get("enable_multimodal"):
            raise RequestError(
                400, "This model is text-only and does not take image input (start it with --enable-multimodal)"
            )
        prompt_tokens = count_chat_prompt_tokens(messages)
        if wants_script(body):
            reasoning_parser = self.state.args.get("reasoning_parser")
            reply = scripted_reply(
                body,
                settings=self.state.settings,
                reasoning_parser=str(reasoning_parser) if reasoning_parser else None,
                prompt_tokens=prompt_tokens,
            )
            self._send_reply(body, reply, prompt_tokens)
            return
        self._generate_openai(body, prompt_tokens, chat=True, cached=self.state.prefix_hit(chat_prompt_keys(messages)))

    def _send_reply(self, body: dict[str, Any], reply: Reply, prompt_tokens: int) -> None:
        """Send a scripted reply (see :mod:`servectl.standin.behaviour`), paced like any completion.

        The reply is cut into one-token pieces; ``max_tokens`` cuts it short (finish ``length``).
        """
        stream = bool(body.get("stream"))
        max_tokens = _int_field(body, "max_completion_tokens", "max_tokens")
        plan_generation(self.state, prompt_tokens=prompt_tokens, max_tokens=max_tokens, min_tokens=0, ignore_eos=False)
        items = _reply_pieces(reply, streamed=stream)
        finish = reply.finish_reason
        if max_tokens is not None and len(items) > max_tokens:
            items, finish = items[:max_tokens], "length"
        plan = GenerationPlan(prompt_tokens, len(items), finish, self.state.settings.die_after_tokens)
        meta = {
            "id": uuid.uuid4().hex,
            "created": int(time.time()),
            "model": str(body.get("model") or self.state.served_model_name),
        }
        include_usage, continuous = _stream_options(body)
        calls = [f"call_{uuid.uuid4().hex[:24]}" for _ in reply.tool_calls]
        self.state.request_started()
        try:
            if stream:
                self._stream_reply(plan, meta, items, calls, include_usage=include_usage, continuous=continuous)
                return
            for _ in paced_chunks(self.state, plan):
                pass
            message: dict[str, Any] = {
                "role": "assistant",
                "content": "".join(t for k, t, _ in items if k == "content"),
                "reasoning_content": "".join(t for k, t, _ in items if k == "reasoning") or None,
                "tool_calls": None,
            }
            tool_calls = [
                {
                    "id": calls[i],
                    "index": i,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": "".join(t for k, t, j in items if k == "args" and j == i),
                    },
                }
                for i, call in enumerate(reply.tool_calls)
                if any(k == "name" and j == i for k, _, j in items)
            ]
            if tool_calls:
                message["tool_calls"] = tool_calls
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish, "matched_stop": None}
            self._send_json(
                200,
                {
                    "id": meta["id"],
                    "object": "chat.completion",
                    "created": meta["created"],
                    "model": meta["model"],
                    "choices": [choice],
                    "usage": usage_body(self.state, plan.prompt_tokens, plan.completion_tokens),
                },
            )
        finally:
            self.state.request_finished()

    def _stream_reply(
        self,
        plan: GenerationPlan,
        meta: dict[str, Any],
        items: list[tuple[str, str, int]],
        calls: list[str],
        *,
        include_usage: bool,
        continuous: bool,
    ) -> None:
        """Stream a scripted reply: one event per run of reasoning, content or tool-call pieces in a chunk."""

        def event(delta: dict[str, Any], finish: str | None, done: int) -> dict[str, Any]:
            usage = usage_body(self.state, plan.prompt_tokens, done) if include_usage and continuous else None
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": None}
            return {
                "id": meta["id"],
                "object": "chat.completion.chunk",
                "created": meta["created"],
                "model": meta["model"],
                "choices": [choice],
                "usage": usage,
            }

        def delta_of(kind: str, text: str, index: int) -> dict[str, Any]:
            if kind == "reasoning":
                return {"reasoning_content": text}
            if kind == "content":
                return {"content": text}
            if kind == "name":
                # sglang/srt/entrypoints/openai/serving_chat.py::_process_tool_call_stream: the first delta
                # carries id and name, later ones only argument text (id and name null)
                function: dict[str, Any] = {"name": text, "arguments": ""}
                return {"tool_calls": [{"id": calls[index], "index": index, "type": "function", "function": function}]}
            function = {"name": None, "arguments": text}
            return {"tool_calls": [{"id": None, "index": index, "type": "function", "function": function}]}

        self._start_stream()
        self._send_event(event({"role": "assistant", "content": ""}, None, 0))
        done = 0
        for first, count in paced_chunks(self.state, plan):
            done = first + count
            runs: list[tuple[str, str, int]] = []
            for kind, text, index in items[first:done]:
                if runs and runs[-1][0] == kind and runs[-1][2] == index and kind != "name":
                    runs[-1] = (kind, runs[-1][1] + text, index)
                else:
                    runs.append((kind, text, index))
            for kind, text, index in runs:
                self._send_event(event(delta_of(kind, text, index), None, done))
        self._send_event(event({}, plan.finish_reason, done))
        if include_usage:
            self._send_event(
                {**event({}, None, done), "choices": [], "usage": usage_body(self.state, plan.prompt_tokens, done)}
            )
        self._send_event("[DONE]")
        self._end_stream()

    def completions(self, body: dict[str, Any]) -> None:
        self._require_ready()
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            prompt_tokens = len(prompt)
        elif isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            prompt_tokens = count_text_tokens(prompt[0])
        elif isinstance(prompt, str):
            prompt_tokens = count_text_tokens(prompt)
        else:
            raise RequestError(400, "prompt must be a string, a list of strings or a list of token ids")
        self._generate_openai(body, prompt_tokens, chat=False)

    def _generate_openai(self, body: dict[str, Any], prompt_tokens: int, *, chat: bool, cached: int = 0) -> None:
        max_tokens = _int_field(body, "max_completion_tokens", "max_tokens") if chat else _int_field(body, "max_tokens")
        if max_tokens is None and not chat:
            max_tokens = 16  # OpenAI/SGLang completions default
        plan = plan_generation(
            self.state,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            min_tokens=_int_field(body, "min_tokens") or 0,
            ignore_eos=bool(body.get("ignore_eos")),
        )
        plan = replace(plan, cached_tokens=cached)
        include_usage, continuous = _stream_options(body)
        meta = {
            "id": uuid.uuid4().hex,
            "created": int(time.time()),
            "model": str(body.get("model") or self.state.served_model_name),
        }
        matched_stop = self.state.eos_token_id if plan.finish_reason == "stop" else None
        self.state.request_started()
        try:
            if body.get("stream"):
                self._stream_openai(
                    plan,
                    meta,
                    chat=chat,
                    include_usage=include_usage,
                    continuous=continuous,
                    matched_stop=matched_stop,
                )
            else:
                for _ in paced_chunks(self.state, plan):
                    pass
                text = self._text(0, plan.completion_tokens)
                choice: dict[str, Any] = {"index": 0}
                if chat:
                    choice["message"] = {
                        "role": "assistant",
                        "content": text,
                        "reasoning_content": None,
                        "tool_calls": None,
                    }
                else:
                    choice["text"] = text
                choice.update({"logprobs": None, "finish_reason": plan.finish_reason, "matched_stop": matched_stop})
                self._send_json(
                    200,
                    {
                        "id": meta["id"],
                        "object": "chat.completion" if chat else "text_completion",
                        "created": meta["created"],
                        "model": meta["model"],
                        "choices": [choice],
                        "usage": usage_body(self.state, plan.prompt_tokens, plan.completion_tokens),
                    },
                )
        finally:
            self.state.request_finished()

    def _stream_openai(
        self,
        plan: GenerationPlan,
        meta: dict[str, Any],
        *,
        chat: bool,
        include_usage: bool,
        continuous: bool,
        matched_stop: int | None,
    ) -> None:
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(choice: dict[str, Any], usage: dict[str, Any] | None) -> dict[str, Any]:
            return {
                "id": meta["id"],
                "object": obj,
                "created": meta["created"],
                "model": meta["model"],
                "choices": [choice] if choice else [],
                "usage": usage,
            }

        def choice(text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
            c: dict[str, Any] = {"index": 0}
            if chat:
                delta: dict[str, Any] = {}
                if role:
                    delta["role"] = "assistant"
                if text is not None:
                    delta["content"] = text
                c["delta"] = delta
            else:
                c["text"] = text or ""
            c.update({"logprobs": None, "finish_reason": finish, "matched_stop": matched_stop if finish else None})
            return c

        def running_usage(done: int) -> dict[str, Any] | None:
            return usage_body(self.state, plan.prompt_tokens, done) if include_usage and continuous else None

        self._start_stream()
        if chat:
            self._send_event(chunk(choice("", None, role=True), running_usage(0)))
        done = 0
        for first, count in paced_chunks(self.state, plan):
            done = first + count
            self._send_event(chunk(choice(self._text(first, count), None), running_usage(done)))
        self._send_event(chunk(choice(None if chat else "", plan.finish_reason), running_usage(done)))
        if include_usage:
            self._send_event(chunk({}, usage_body(self.state, plan.prompt_tokens, done)))
        self._send_event("[DONE]")
        self._end_stream()

    def generate(self, body: dict[str, Any]) -> None:
        """SGLang's native ``/generate``: ``text`` or ``input_ids``, ``sampling_params``, ``meta_info``."""
        self._require_ready()
        if isinstance(body.get("input_ids"), list):
            prompt_tokens = len(body["input_ids"])
        elif isinstance(body.get("text"), str):
            prompt_tokens = count_text_tokens(body["text"])
        else:
            raise RequestError(400, "Either text or input_ids should be provided.")
        sampling = body.get("sampling_params") or {}
        if not isinstance(sampling, Mapping):
            raise RequestError(400, "sampling_params must be an object")
        max_new = _int_field(sampling, "max_new_tokens")
        plan = plan_generation(
            self.state,
            prompt_tokens=prompt_tokens,
            max_tokens=GENERATE_DEFAULT_MAX_NEW_TOKENS if max_new is None else max_new,
            min_tokens=_int_field(sampling, "min_new_tokens") or 0,
            ignore_eos=bool(sampling.get("ignore_eos")),
        )
        rid = uuid.uuid4().hex
        started = time.perf_counter()

        def meta_info(done: int, finished: bool) -> dict[str, Any]:
            finish: dict[str, Any] | None = None
            if finished:
                finish = (
                    {"type": "length", "length": done}
                    if plan.finish_reason == "length"
                    else {"type": "stop", "matched": self.state.eos_token_id}
                )
            info: dict[str, Any] = {
                "id": rid,
                "finish_reason": finish,
                "prompt_tokens": plan.prompt_tokens,
                "completion_tokens": done,
                "cached_tokens": 0,
                "e2e_latency": round(time.perf_counter() - started, 6),
            }
            info.update(spec_figures(self.state, done))
            return info

        self.state.request_started()
        try:
            if body.get("stream"):
                self._start_stream()
                done = 0
                for first, count in paced_chunks(self.state, plan):
                    done = first + count
                    finished = done == plan.completion_tokens
                    self._send_event({"text": self._text(0, done), "meta_info": meta_info(done, finished)})
                if plan.completion_tokens == 0:
                    self._send_event({"text": "", "meta_info": meta_info(0, True)})
                self._send_event("[DONE]")
                self._end_stream()
            else:
                for _ in paced_chunks(self.state, plan):
                    pass
                self._send_json(
                    200,
                    {
                        "text": self._text(0, plan.completion_tokens),
                        "meta_info": meta_info(plan.completion_tokens, True),
                    },
                )
        finally:
            self.state.request_finished()


def _reply_pieces(reply: Reply, *, streamed: bool) -> list[tuple[str, str, int]]:
    """``(kind, text, tool index)`` per completion token: reasoning, content, then each call's name and args."""
    items: list[tuple[str, str, int]] = [("reasoning", t, -1) for t in pieces(reply.reasoning or "")]
    items += [("content", t, -1) for t in pieces(reply.content)]
    for index, call in enumerate(reply.tool_calls):
        items.append(("name", call.name, index))
        args = call.streamed_arguments if streamed and call.streamed_arguments is not None else call.arguments
        items += [("args", t, index) for t in pieces(args)]
    return items


__all__ = ["GENERATE_DEFAULT_MAX_NEW_TOKENS", "GenerationEndpoints"]
