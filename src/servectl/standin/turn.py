"""One generation for the stand-in's non-OpenAI families: the chat answer (scripted or paced lorem) as one
piece per completion token, which each family then writes in its own shape; and pydantic-style request checks
against the field lists of SGLang's request models (the route catalog, :mod:`servectl.profile.api_routes`).

Standard library only: this module runs inside the stand-in image.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from servectl.profile.api_routes import load_routes
from servectl.standin.behaviour import scripted_reply, wants_script
from servectl.standin.generation import GenerationEndpoints, _reply_pieces
from servectl.standin.pacing import GenerationPlan, paced_chunks, plan_generation
from servectl.standin.state import RequestError
from servectl.standin.tokens import count_chat_prompt_tokens

ROUTES = load_routes()
#: SGLang's request and response models of every family, by class name: their fields, required or not.
ROUTES_MODELS: dict[str, Any] = {
    **ROUTES["anthropic"]["models"],
    **ROUTES["ollama"]["models"],
    **ROUTES["openai"]["models"],
}


def missing(body: Mapping[str, Any], model: str) -> list[str]:
    fields = ROUTES_MODELS[model]["fields"]
    return [f"{name}: Field required" for name, spec in fields.items() if spec["required"] and name not in body]


def check(errors: list[str]) -> None:
    if errors:
        text = "; ".join(errors)
        raise RequestError(400, text[:500] + ("…" if len(text) > 500 else ""))


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


class TurnEndpoints(GenerationEndpoints):
    """The generation the families share, and chunked writing of their streams."""

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


__all__ = ["ROUTES", "ROUTES_MODELS", "Turn", "TurnEndpoints"]
