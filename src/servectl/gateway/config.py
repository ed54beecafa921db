"""The gateway's configuration: one YAML file (pydantic models, ``extra="forbid"``, JSON Schema shipped).

::

    # yaml-language-server: $schema=../schema/gateway.schema.json
    listen: 127.0.0.1:8080
    aliases:
      chat: [demo, demo-rollback]   # the one of these that runs now serves "chat"
      small: demo
    response_model: alias           # answers name the alias the client asked for (or: served)
    limits: {max_body_bytes: 8388608, header_timeout_s: 10, body_timeout_s: 30, rate_per_minute: 600}
    swap: {drain_s: 30, hold_s: 120}

With no file, every profile name is an alias of itself and ``default`` routes to whichever servectl service
runs (:func:`default_aliases`). Problems are reported like a profile's: file, line, field, fix.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from servectl.errors import Problem, ProfileError
from servectl.gateway.keys import MAX_RATE_PER_MINUTE
from servectl.paths import DATA_DIR, state_dir, user_profiles_dir

GATEWAY_SCHEMA_FILE = DATA_DIR / "schema" / "gateway.schema.json"
SCHEMA_REF = "# yaml-language-server: $schema=../schema/gateway.schema.json"
DEFAULT_ALIAS = "default"
ANY_PROFILE = "*"
"""The profile list of an alias that any running servectl service serves (the ``default`` alias)."""


def default_config_file(environ: Mapping[str, str]) -> Path:
    """``gateway.yaml`` beside the user's profile folder (``~/.config/servectl/gateway.yaml``)."""
    return user_profiles_dir(environ).parent / "gateway.yaml"


def write_example_config(path: Path, *, overwrite: bool = False) -> Path:
    """Write the shipped example gateway file to ``path`` (its schema line pointing at the shipped schema); ``path``.

    Raises:
        UsageError: ``path`` exists and ``overwrite`` is off.
    """
    from servectl.adapters.state import atomic_write_text
    from servectl.errors import UsageError
    from servectl.files import read_text_bounded
    from servectl.profile.yaml_locations import MAX_PROFILE_BYTES

    if path.exists() and not overwrite:
        raise UsageError(f"{path} exists; edit it, or replace it with the example: servectl gateway init --force")
    example = DATA_DIR / "examples" / "gateway.yaml"
    lines = read_text_bounded(example, limit_bytes=MAX_PROFILE_BYTES, what="gateway file").splitlines()
    header = [
        f"# yaml-language-server: $schema={GATEWAY_SCHEMA_FILE.as_uri()}",
        "# servectl gateway: written by `servectl gateway init` from the example servectl ships; edit it here.",
    ]
    body = next(i for i, line in enumerate(lines) if not line.startswith("#"))  # the example's header goes
    lines = header + lines[body:]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def gateway_state_dir(environ: Mapping[str, str]) -> Path:
    """Where the gateway keeps its key file and admin socket: ``<state>/gateway``."""
    return state_dir(environ) / "gateway"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Limits(_Strict):
    """Bounds on every client: body size, read timeouts, requests per key and minute, concurrency."""

    max_body_bytes: int = Field(8 * 2**20, ge=1024, description="larger request bodies get 413")
    header_timeout_s: float = Field(10.0, gt=0, description="a client must send its request headers within this")
    body_timeout_s: float = Field(30.0, gt=0, description="a client must send its request body within this")
    rate_per_minute: int = Field(
        600, ge=1, le=MAX_RATE_PER_MINUTE, description="requests per key and minute (429 with Retry-After past it)"
    )
    max_concurrency: int = Field(1024, ge=1, description="requests handled at once; more get 503")


class SwapPolicy(_Strict):
    """What happens to an alias while servectl swaps, starts or stops the service behind it."""

    drain_s: float = Field(30.0, ge=0, description="wait this long for in-flight requests, then cut them")
    hold_s: float = Field(120.0, ge=0, description="hold new requests this long during a swap, then 503")
    on_request: list[str] = Field(
        default_factory=list,
        description="aliases whose profile servectl swaps to when a request asks for it and it does not run "
        "(a model load: off unless listed); one swap at a time, the request waits up to hold_s",
    )
    min_loaded_s: float = Field(
        60.0,
        ge=0,
        description="a service stays loaded at least this long after it became ready before a swap on request "
        "may replace it (anti-thrash): meanwhile its aliases are served and the requests that need the swap wait "
        "(up to hold_s), then it runs, however busy the loaded alias",
    )
    when_busy: Literal["wait", "refuse"] = Field(
        "wait",
        description="a swap on request that would stop a service with requests in flight: wait (its requests "
        "drain up to drain_s, then the swap runs) or refuse (503 with Retry-After; what runs keeps serving)",
    )


# The file's `upstream:` section; one engine the gateway routes to is servectl.gateway.routes.Upstream.
class UpstreamPool(_Strict):
    """The connection pool to the engines."""

    pool_size: int = Field(256, ge=1, description="connections kept open to the engines, all services together")
    connect_timeout_s: float = Field(5.0, gt=0)
    first_byte_timeout_s: float | None = Field(
        None, gt=0, description="None: wait as long as the engine takes (long prefills take minutes)"
    )


class Endpoint(_Strict):
    """A profile's engine at a fixed address (a compose service, a Kubernetes Service): no discovery."""

    url: str = Field(description="the engine's base URL, e.g. http://demo:30000")
    served_model_name: str = Field("", description="the engine's --served-model-name (empty: model left alone)")
    api_key_file: str | None = Field(None, description="file holding the engine's own API key (read per listing)")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if value.partition("://")[0] not in ("http", "https") or not value.partition("://")[2].strip("/"):
            raise ValueError(f"{value!r}: write a base URL such as http://demo:30000")
        return value.rstrip("/")


class GatewayConfig(_Strict):
    """The whole gateway file."""

    listen: str = Field("127.0.0.1:8080", description="HOST:PORT the gateway listens on")
    aliases: dict[str, list[str]] | None = Field(
        None, description="alias -> profile or list of profiles; none: every profile is an alias of itself"
    )
    auth: Literal["keys", "none"] = Field("keys", description="keys: every /v1 request needs a key")
    keys_file: str | None = Field(None, description="the key file (SHA-256 digests); default <state>/gateway/keys.json")
    response_model: Literal["alias", "served"] = Field(
        "alias", description="the model name answers carry: the alias asked for, or the engine's served name"
    )
    endpoints: dict[str, Endpoint] | None = Field(
        None,
        description="profile -> its engine at a fixed address (rendered compose / Kubernetes files); set, the "
        "gateway routes to these and lists no servectl containers",
    )
    limits: Limits = Field(default_factory=Limits)  # type: ignore[arg-type]  # pydantic fills the defaults
    swap: SwapPolicy = Field(default_factory=SwapPolicy)  # type: ignore[arg-type]
    upstream: UpstreamPool = Field(default_factory=UpstreamPool)  # type: ignore[arg-type]

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        split_listen(value)
        return value

    @field_validator("aliases", mode="before")
    @classmethod
    def _aliases(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: [v] if isinstance(v, str) else v for k, v in value.items()}
        return value

    @field_validator("aliases")
    @classmethod
    def _alias_names(cls, value: dict[str, list[str]] | None) -> dict[str, list[str]] | None:
        for alias, profiles in (value or {}).items():
            if not alias or "/" in alias or alias != alias.strip():
                raise ValueError(f"alias {alias!r}: use a name without '/' or surrounding spaces")
            if not profiles:
                raise ValueError(f"alias {alias!r}: name at least one profile (or '{ANY_PROFILE}' for any)")
        return value

    @model_validator(mode="after")
    def _on_request_aliases(self) -> GatewayConfig:
        for alias in self.swap.on_request:
            if self.aliases is not None and alias not in self.aliases:
                raise ValueError(f"swap.on_request: {alias!r} is not an alias ({', '.join(sorted(self.aliases))})")
            if self.aliases is not None and ANY_PROFILE in self.aliases[alias]:
                raise ValueError(f"swap.on_request: {alias!r} serves any profile; name the profile to swap to")
        return self

    @model_validator(mode="after")
    def _endpoints_swap(self) -> GatewayConfig:
        if self.endpoints is not None and self.swap.on_request:
            raise ValueError("swap.on_request needs servectl services to swap; drop it or drop endpoints")
        return self

    @property
    def host(self) -> str:
        return split_listen(self.listen)[0]

    @property
    def port(self) -> int:
        return split_listen(self.listen)[1]

    def keys_path(self, environ: Mapping[str, str]) -> Path:
        return Path(self.keys_file).expanduser() if self.keys_file else gateway_state_dir(environ) / "keys.json"


def split_listen(value: str) -> tuple[str, int]:
    """``"127.0.0.1:8080"`` -> ``("127.0.0.1", 8080)``; ``"[::1]:8080"`` works too.

    Raises:
        ValueError: not HOST:PORT with a port in 1..65535.
    """
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r}: not HOST:PORT (e.g. 127.0.0.1:8080)")
    return host, int(port)


def default_aliases(profiles: Iterable[str]) -> dict[str, list[str]]:
    """With no ``aliases:``, each profile is an alias of itself and ``default`` is any running service."""
    out = {name: [name] for name in sorted(profiles)}
    out.setdefault(DEFAULT_ALIAS, [ANY_PROFILE])
    return out


def gateway_json_schema() -> dict[str, Any]:
    """The JSON Schema of the gateway file (shipped as ``schema/gateway.schema.json``)."""
    schema = GatewayConfig.model_json_schema()
    schema["properties"]["aliases"] = {
        "description": GatewayConfig.model_fields["aliases"].description,
        "anyOf": [
            {
                "type": "object",
                "additionalProperties": {
                    "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]
                },
            },
            {"type": "null"},
        ],
    }
    schema["title"] = "servectl gateway"
    return schema


def load_gateway_config(path: Path | None = None, *, environ: Mapping[str, str]) -> GatewayConfig:
    """Read and check the gateway file (default :func:`default_config_file`; no file there: the defaults).

    The file may not be what it should (replaced by a link to a password or ``.env`` file): a problem names the
    file, the line and the field, never the file's content - no value, no unknown key (:func:`_quiet`).

    Raises:
        ProfileError: the file is not valid, one line per problem with file, line and field (exit 2); a link
            whose target is gone, a loop, a FIFO, a device or a folder is refused, never read as "no file".
    """
    from servectl.profile.loader import read_yaml

    explicit = path is not None
    path = path or default_config_file(environ)
    if not os.path.lexists(path):
        if explicit:
            raise ProfileError([Problem(str(path), None, "", "no such gateway file; create it or drop --config")])
        return GatewayConfig.model_validate({})
    try:
        data, locations = read_yaml(path)
    except ProfileError as err:
        quiet = [_quiet(p) for p in err.problems] or [Problem(str(path), None, "", "cannot be read")]
        raise ProfileError(quiet) from None
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as err:
        problems = []
        for item in err.errors(include_url=False):
            loc = tuple(p for p in item["loc"] if not (isinstance(p, str) and ("[" in p or p in {"str", "list"})))
            line = next((locations[loc[:n]][1] for n in range(len(loc), 0, -1) if loc[:n] in locations), None)
            field = ".".join(map(str, loc[:-1] if item["type"] == "extra_forbidden" else loc))
            problems.append(Problem(str(path), line, field, _message(item, loc), rule="gateway"))
        raise ProfileError(problems) from None


_QUOTED = re.compile(r"'[^']{2,}'|\"[^\"]{2,}\"")


def _quiet(problem: Problem) -> Problem:
    """A YAML-level problem without the file's text: quoted snippets out, a field only if the schema has it."""
    top = problem.field.split(".", 1)[0]
    field = problem.field if top in GatewayConfig.model_fields else ""
    message = _QUOTED.sub("(text of the file)", problem.message).replace("a profile must", "a gateway file must")
    return Problem(problem.file, problem.line, field, message, problem.rule)


def _message(item: Any, loc: tuple[Any, ...]) -> str:
    """What is wrong, in the schema's words: an unknown key is not repeated, a value is not quoted."""
    if item["type"] == "extra_forbidden":
        model: Any = GatewayConfig
        for part in loc[:-1]:
            is_model = isinstance(model, type) and issubclass(model, BaseModel)
            field = model.model_fields.get(str(part)) if is_model else None
            model = field.annotation if field else None
        names = sorted(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []
        close = difflib.get_close_matches(str(loc[-1]), names, n=1)
        return "an unknown key; " + (f"did you mean {close[0]!r}?" if close else f"allowed keys: {', '.join(names)}")
    text = str(item["msg"]).removeprefix("Value error, ")
    value = item.get("input")
    if isinstance(value, str) and value:
        text = text.replace(repr(value), "the value").replace(value, "the value")
    return text
