"""Qualification suites: which gates run, with what counts and thresholds (YAML, checked by pydantic).

A suite is a YAML file; a gate runs when its key is present under ``gates``. servectl ships ``default``
(``suites/default.yaml`` beside this module); a profile names another with ``qualify:`` (a file relative to
the profile, or a shipped suite name), and ``servectl qualify --suite FILE`` overrides both.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from servectl.bench.qualify.clients import CLIENT_NAMES, ClientName
from servectl.errors import Problem, ProfileError
from servectl.files import FileRefused, read_bounded

SUITES_DIR = Path(__file__).with_name("suites")
DEFAULT_SUITE = "default"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Gate(_Strict):
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="request fields added to this gate's requests (over the suite's)"
    )


class SmokeGate(_Gate):
    """A chat and a streaming chat answer; usage is present and agrees with the streamed text."""

    max_tokens: int = Field(default=32, ge=2)
    chars_per_token: tuple[float, float] = Field(
        default=(1.0, 16.0), description="bounds of streamed characters per reported completion token"
    )

    @field_validator("chars_per_token")
    @classmethod
    def _ordered(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not 0 < value[0] <= value[1]:
            raise ValueError(f"give [low, high] with 0 < low <= high, got {list(value)}")
        return value


class StructuredGate(_Gate):
    """JSON mode and JSON-schema responses parse, and validate against the schema asked for."""

    json_object: int = Field(default=2, ge=0, description="cases with response_format json_object")
    json_schema: int = Field(default=4, ge=0, description="cases with response_format json_schema")
    max_tokens: int = Field(default=512, ge=16)


class ToolsGate(_Gate):
    """Tool calls name the right function with arguments that validate; streamed calls agree; results continue."""

    cases: int = Field(default=20, ge=1)
    max_tools_per_case: int = Field(default=3, ge=1, le=6, description="tools offered per case, 1 to this")
    streaming: bool = Field(default=True, description="also stream each call and compare it with the plain one")
    tool_result: bool = Field(default=True, description="send the tool's result back; the answer must continue")
    max_tokens: int = Field(default=512, ge=16)


class ReasoningGate(_Gate):
    """Thinking on gives ``reasoning_content`` and clean content; thinking off gives neither reasoning nor tags."""

    thinking_on: dict[str, Any] = Field(
        default_factory=lambda: {"chat_template_kwargs": {"enable_thinking": True}},
        description="request fields that turn thinking on (GLM/Qwen: chat_template_kwargs.enable_thinking)",
    )
    thinking_off: dict[str, Any] = Field(
        default_factory=lambda: {"chat_template_kwargs": {"enable_thinking": False}},
        description="request fields that turn thinking off",
    )
    streaming: bool = True
    max_tokens: int = Field(default=2048, ge=16)


class LongContextGate(_Gate):
    """A needle is found in prompts at each target length, and at the context length minus headroom."""

    targets: list[Annotated[int, Field(ge=256)]] = Field(default_factory=lambda: [8192, 32768])
    context_headroom_tokens: int | None = Field(
        default=1024, ge=0, description="also test context length minus this many tokens (null: do not)"
    )
    depth: float = Field(default=0.5, ge=0, le=1, description="where the needle sits, 0 = start, 1 = end")
    max_tokens: int = Field(default=64, ge=8)


class EnduranceGate(_Gate):
    """M sequential requests without an error, and without latency drifting beyond a bound."""

    requests: int = Field(default=60, ge=2)
    max_tokens: int = Field(default=32, ge=2)
    window: int = Field(default=10, ge=1, description="requests averaged at the start and the end for drift")
    max_drift_ratio: float = Field(default=1.5, gt=1, description="mean latency of the last window / the first")

    @model_validator(mode="after")
    def _window_fits(self) -> EnduranceGate:
        if 2 * self.window > self.requests:
            raise ValueError(f"window {self.window} needs at least {2 * self.window} requests, got {self.requests}")
        return self


class CodingGate(_Gate):
    """Functions the model writes run against hidden tests in a locked-down throwaway container."""

    cases: str = Field(
        default="shipped", description="case file (relative to the suite file), or 'shipped' for servectl's set"
    )
    limit: int | None = Field(default=None, ge=1, description="run only the first this many cases (null: all)")
    max_tokens: int = Field(default=4096, ge=64, description="room for a thinking model's reasoning and the code")
    timeout_s: float = Field(default=10, gt=0, le=300, description="wall-clock limit of one case's run")
    memory_mib: int = Field(default=256, ge=32, description="memory limit of the sandbox (no swap)")
    cpus: float = Field(default=1.0, gt=0, le=8)
    pids: int = Field(default=64, ge=8, description="process limit of the sandbox (a fork bomb stops there)")


class ImageGate(_Gate):
    """Images (text, tables, digits, receipts) sent as content parts; answers contain the expected strings."""

    corpus: str = Field(
        default="shipped",
        description="corpus manifest (or its folder), relative to the suite file; 'shipped' for servectl's",
    )
    limit: int | None = Field(default=None, ge=1, description="send only the first this many images (null: all)")
    max_tokens: int = Field(default=4096, ge=16, description="an answer cut at this many tokens fails")


class ClientsGate(_Gate):
    """Real client programs (Pi, OpenClaw, Hermes) read a nonce through their own shell tool and report it."""

    clients: list[ClientName] = Field(
        default_factory=lambda: list(CLIENT_NAMES), min_length=1, description="clients to run, in order"
    )
    timeout_s: float = Field(default=300, gt=0, le=3600, description="a client still running then is killed")

    @field_validator("clients")
    @classmethod
    def _once(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"a client is listed twice: {value}")
        return value


class RoutedGate(_Gate):
    """Through the gateway (or a keyed URL): exactly the asked-for model answers; wrong and missing keys are refused."""

    max_tokens: int = Field(default=16, ge=1)


class VramGate(_Gate):
    """Free VRAM per card after the run, against the profile's reserve (or its recorded waiver)."""


class Gates(_Strict):
    """The gates of a suite; a gate runs when its key is present."""

    smoke: SmokeGate | None = None
    routed: RoutedGate | None = None
    structured: StructuredGate | None = None
    tools: ToolsGate | None = None
    reasoning: ReasoningGate | None = None
    long_context: LongContextGate | None = None
    coding: CodingGate | None = None
    image: ImageGate | None = None
    clients: ClientsGate | None = None
    endurance: EnduranceGate | None = None
    vram: VramGate | None = None


class Suite(_Strict):
    """A qualification suite."""

    name: str = Field(min_length=1)
    description: str = ""
    temperature: float | None = Field(default=0.0, ge=0, description="sent with every request (null: server's)")
    request_timeout_s: float = Field(default=900, gt=0)
    extra_body: dict[str, Any] = Field(default_factory=dict, description="request fields added to every request")
    gates: Gates


@dataclass(frozen=True)
class LoadedSuite:
    """A suite with where it came from and the hash of its text (recorded in the evidence)."""

    suite: Suite
    source: str
    sha256: str


#: Gate names in the order they run.
GATE_ORDER: tuple[str, ...] = tuple(Gates.model_fields)


def shipped_suites() -> list[str]:
    """Names of the suites servectl ships."""
    return sorted(p.stem for p in SUITES_DIR.glob("*.yaml"))


def suite_path(ref: str | None, *, relative_to: Path | None = None) -> Path:
    """The file of a suite reference: a shipped suite name, or a path (relative to ``relative_to``).

    Raises:
        UsageError: neither a shipped suite nor an existing file.
    """
    from servectl.errors import UsageError

    name = ref or DEFAULT_SUITE
    if name in shipped_suites():
        return SUITES_DIR / f"{name}.yaml"
    path = Path(name).expanduser()
    if not path.is_absolute() and relative_to is not None:
        path = relative_to / path
    if not path.is_file():
        raise UsageError(
            f"qualify suite {name!r}: no such file and not a shipped suite ({', '.join(shipped_suites())})"
        )
    return path


def load_suite(path: Path) -> LoadedSuite:
    """Read and check one suite file.

    Raises:
        ProfileError: unreadable YAML or a schema problem (one line each, with file, line and key).
    """
    from servectl.profile.loader import MAX_PROFILE_BYTES, read_yaml

    data, locations = read_yaml(path)
    try:
        suite = Suite.model_validate(data)
    except ValidationError as err:
        raise ProfileError(_problems(err, locations, path)) from None
    try:  # read_yaml proved it a small regular file; read it the same bounded way for its digest
        raw = read_bounded(path, limit_bytes=MAX_PROFILE_BYTES, what="suite")
    except (OSError, FileRefused) as e:
        raise ProfileError([Problem(str(path), None, "", f"cannot read: {e}")]) from None
    return LoadedSuite(suite=suite, source=str(path), sha256=hashlib.sha256(raw).hexdigest())


def _problems(err: ValidationError, locations: dict[Any, Any], path: Path) -> list[Problem]:
    problems = []
    for item in err.errors(include_url=False):
        loc = tuple(item["loc"])
        line = next((locations[loc[:cut]][1] for cut in range(len(loc), -1, -1) if loc[:cut] in locations), None)
        dotted = ".".join(str(p) for p in loc)
        if item["type"] == "extra_forbidden":
            known = _fields_at(loc[:-1])
            close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
            message = "unknown key; " + (
                f"did you mean {close[0]!r}?" if close else f"allowed keys: {', '.join(known)}"
            )
        elif item["type"] == "missing":
            message = "missing required key"
        else:
            message = item["msg"].removeprefix("Value error, ")
        problems.append(Problem(str(path), line, dotted, message))
    return problems


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] = Suite
    for part in loc:
        annotation = model.model_fields[str(part)].annotation if str(part) in model.model_fields else None
        found = next(
            (
                a
                for a in (annotation, *getattr(annotation, "__args__", ()))
                if isinstance(a, type) and issubclass(a, BaseModel)
            ),
            None,
        )
        if found is None:
            return []
        model = found
    return sorted(model.model_fields)
