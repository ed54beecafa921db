"""What every gate shares: the run's state (:class:`GateRun`) and two helpers for requests and messages."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from servectl.adapters.sandbox import CodeSandbox
from servectl.bench.qualify.client import QualifyClient
from servectl.bench.qualify.model import CaseResult, QualifyProgressEvent, ServiceFacts

if TYPE_CHECKING:
    import httpx


class RouteWatch(Protocol):
    """What a routed run reads from the gateway's own record (see :mod:`servectl.bench.qualify.routed`)."""

    def requests_seen(self, http: httpx.Client) -> int:
        """Requests the gateway has answered on the alias so far (its counter, any status), read with ``http``."""


@dataclass
class GateRun:
    """The shared state of one qualification run, as the gates see it."""

    client: QualifyClient
    facts: ServiceFacts
    run_id: str
    max_model_len: int | None
    seed: int  # QualifySettings.seed (its one home)
    environ: Mapping[str, str]  # the host's: what the agent clients inherit (PATH, HOME, TMPDIR, ...)
    code_sandbox: CodeSandbox | None  # the run's (None: its suite has no coding gate, checked before it starts)
    http: httpx.Client  # the run's, for what is asked outside the SDK (the routed gate's keys, engine, gateway record)
    progress: Callable[[QualifyProgressEvent], None] | None = None
    route: RouteWatch | None = None

    def sandbox(self) -> CodeSandbox:
        """Where the coding gate runs answers (the run's owner makes it; see :mod:`servectl.adapters.sandbox`)."""
        if self.code_sandbox is None:
            raise RuntimeError("this qualification run has no code sandbox")
        return self.code_sandbox

    def report(self, gate: str, done: int, total: int, case: CaseResult | None = None) -> None:
        if self.progress is not None:
            self.progress(QualifyProgressEvent(gate=gate, done=done, total=total, case=case.case if case else ""))


def merged(*bodies: Mapping[str, Any] | None) -> dict[str, Any]:
    """Request fields merged left to right, nested mappings (``chat_template_kwargs``) merged too."""
    out: dict[str, Any] = {}
    for body in bodies:
        for key, value in (body or {}).items():
            if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
                out[key] = {**out[key], **value}
            else:
                out[key] = value
    return out


def clip(text: str, limit: int = 80) -> str:
    """``text`` on one line, cut to ``limit`` characters, for failure messages."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
