"""What a client needs to configure itself for an alias: its context window, its capabilities and its state.

``GET /v1/models`` and ``/v1/models/{alias}`` carry them beside OpenAI's fields (``servectl gateway clients``
writes the same into each client's configuration): the context window is the profile's ``engine.context_length``,
else what the engine itself reports while it runs (SGLang's ``max_model_len`` of its ``/v1/models``: the model's
own limit); the capabilities come from the profile - ``tools`` (a ``tool-call-parser``), ``reasoning`` (a
``reasoning-parser``), ``vision`` (``model.multimodal``), ``embedding`` (``is-embedding``). Pure: the profiles
come in as values (``servectl.gateway.serve`` reads them off the search path).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servectl.profile.models import Profile


@dataclass(frozen=True)
class ProfileCard:
    """One profile's facts that clients configure themselves from."""

    profile: str
    context_window: int | None
    tools: bool
    reasoning: bool
    vision: bool
    embedding: bool
    catalog: str  # the engine build's flag (and route) catalog
    routes_file: Path | None = None  # the route table extracted from its image with that catalog (if any)

    @property
    def capabilities(self) -> list[str]:
        flags = {"tools": self.tools, "reasoning": self.reasoning, "vision": self.vision, "embedding": self.embedding}
        return [name for name, on in flags.items() if on]


def profile_card(profile: Profile, *, routes_file: Path | None = None) -> ProfileCard:
    """The card of a validated profile (``routes_file``: its image's route table, found by the caller)."""
    args = profile.engine.args
    return ProfileCard(
        profile=profile.name,
        context_window=profile.engine.context_length,
        tools=bool(args.get("tool-call-parser")),
        reasoning=bool(args.get("reasoning-parser")),
        vision=profile.model.multimodal,
        embedding=bool(args.get("is-embedding")),
        catalog=profile.engine.catalog,
        routes_file=routes_file,
    )


def model_entry(
    alias: str,
    *,
    profiles: Sequence[str],
    serving: str | None,
    state: str,
    cards: Mapping[str, ProfileCard | None],
    engine_window: int | None = None,
) -> dict[str, Any]:
    """One ``/v1/models`` entry: OpenAI's fields, then the context window (SGLang's ``max_model_len`` too, which
    some clients read), the capabilities, and which profile serves it now in which state."""
    card = cards.get(serving or "") or next((c for p in profiles if (c := cards.get(p)) is not None), None)
    window = (card.context_window if card is not None else None) or engine_window
    return {
        "id": alias,
        "object": "model",
        "created": 0,
        "owned_by": "servectl",
        "max_model_len": window,
        "context_window": window,
        "capabilities": card.capabilities if card is not None else [],
        "servectl": {"profiles": list(profiles), "serving": serving, "state": state},
    }


__all__ = ["ProfileCard", "model_entry", "profile_card"]
