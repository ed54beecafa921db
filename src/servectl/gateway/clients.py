"""Each client's configuration against this gateway (``servectl gateway clients``): pure, from values.

What a client is told: the gateway's base URL, the aliases it may ask for with their context windows and
capabilities (:mod:`servectl.gateway.cards`: the *smallest* window of an alias's profiles, any of which may serve
it; the capabilities they all have), and where the key comes from - the *name* of a variable or the path of a
file, never a key (servectl is given none, so it prints none). The documents are the clients' own formats:

* **pi** (``@mariozechner/pi-coding-agent``): ``~/.pi/agent/models.json``, a provider with ``api:
  openai-completions``; ``apiKey`` is the variable's name (pi reads it) or ``!cat FILE`` (pi runs it).
* **openclaw**: ``~/.openclaw/openclaw.json``, ``models.providers.servectl`` (``apiKey`` a ``${VAR}`` reference or
  a file SecretRef) and the default model.
* **hermes** (``hermes-agent``): ``~/.hermes/config.yaml``, ``providers.servectl`` with ``key_env`` (a variable
  only) and the model's ``context_length``.
* **claude-code** (``@anthropic-ai/claude-code``): a settings file (``~/.claude/settings.json``, or ``claude
  --settings FILE``) whose ``env`` points Claude Code's Anthropic client at the gateway, names the alias for
  every model role, gives the real window (``CLAUDE_CODE_MAX_CONTEXT_TOKENS``: for a model id it does not know it
  assumes 1M tokens) and an output budget that fits it, and turns off its other traffic; ``apiKeyHelper`` prints
  the key from the variable or the file.
* **llm** (Simon Willison's ``llm``): ``extra-openai-models.yaml`` in llm's folder, one entry per alias; the key
  is llm's stored key ``servectl`` (``llm keys set servectl`` from the variable or the file).
* **openwebui**: an env file for ``docker run --env-file`` (the OpenAI connection's base URL, the key's variable
  passed through by name).

The qualify ``clients`` gate configures pi, openclaw and hermes with these same documents.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

ClientKind = Literal["pi", "openclaw", "hermes", "claude-code", "llm", "openwebui"]
CLIENTS: tuple[ClientKind, ...] = ("pi", "openclaw", "hermes", "claude-code", "llm", "openwebui")
#: The provider (and llm key) name the clients know the gateway by.
PROVIDER = "servectl"
#: The variable the key is read from when neither a variable nor a file is named.
DEFAULT_KEY_ENV = "SERVECTL_GATEWAY_KEY"
#: The context window told to a client for an alias whose profiles say none (Hermes needs >= 64K).
UNKNOWN_WINDOW = 65536
#: Claude Code's own default output budget (it asks for this many tokens unless told otherwise).
CLAUDE_CODE_MAX_OUTPUT = 32000


@dataclass(frozen=True)
class AliasInfo:
    """One alias as clients see it: its window (None: no profile says), capabilities, and profiles."""

    alias: str
    context_window: int | None
    capabilities: tuple[str, ...] = ()
    profiles: tuple[str, ...] = ()

    @property
    def window(self) -> int:
        return self.context_window or UNKNOWN_WINDOW

    @property
    def chat(self) -> bool:
        return "embedding" not in self.capabilities


@dataclass(frozen=True)
class KeySource:
    """Where a client reads the gateway key: a variable's name, or a file's path (one of them)."""

    env: str | None = None
    file: Path | None = None

    def __post_init__(self) -> None:
        if (self.env is None) == (self.file is None):
            raise ValueError("a key source is a variable or a file, exactly one")

    def shell(self) -> str:
        """A shell command that prints the key."""
        return f"printenv {shlex.quote(self.env)}" if self.env is not None else f"cat {shlex.quote(str(self.file))}"

    def describe(self) -> str:
        return f"the variable {self.env}" if self.env is not None else f"the file {self.file}"


@dataclass(frozen=True)
class ClientSetup:
    """One client's configuration: the file it reads (where, and its text), and how to use it (note lines)."""

    client: ClientKind
    path: str  # where the client reads it (``~`` for the user's home)
    text: str
    notes: list[str] = field(default_factory=list)


class KeySourceUnsupported(ValueError):
    """The client cannot read its key from the kind of source asked for."""


def output_budget(window: int) -> int:
    """The output tokens a client may ask for in one answer: a quarter of the window, at most Claude Code's
    default (an engine refuses a prompt plus ``max_tokens`` over its window)."""
    return max(256, min(CLAUDE_CODE_MAX_OUTPUT, window // 4))


def alias_info(
    alias: str, profiles: Sequence[str], windows: Mapping[str, int | None], capabilities: Mapping[str, Sequence[str]]
) -> AliasInfo:
    """An alias's facts from its profiles' cards (``windows`` / ``capabilities`` by profile; a profile missing
    from them has no card): the smallest known window, the capabilities every carded profile has."""
    carded = [p for p in profiles if p in capabilities]
    known = [w for p in profiles if (w := windows.get(p)) is not None]
    caps = set.intersection(*(set(capabilities[p]) for p in carded)) if carded else set()
    order = ("tools", "reasoning", "vision", "embedding")
    return AliasInfo(alias, min(known) if known else None, tuple(c for c in order if c in caps), tuple(profiles))


# -- the documents (the qualify gate writes the same) -------------------------------------------------------------


def pi_models(base_url: str, aliases: Sequence[AliasInfo], api_key: str, *, max_tokens: int | None = None) -> Any:
    """pi's ``models.json``: one provider, a model per alias (``api_key``: a variable's name or ``!command``)."""
    models = [
        {
            "id": a.alias,
            "name": a.alias,
            "reasoning": "reasoning" in a.capabilities,
            "input": ["text", "image"] if "vision" in a.capabilities else ["text"],
            "contextWindow": a.window,
            "maxTokens": max_tokens or output_budget(a.window),
        }
        for a in aliases
    ]
    provider = {
        "baseUrl": f"{base_url}/v1",
        "api": "openai-completions",
        "apiKey": api_key,
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": models,
    }
    return {"providers": {PROVIDER: provider}}


def openclaw_config(
    base_url: str, aliases: Sequence[AliasInfo], default: str, api_key: Any, *, max_tokens: int | None = None
) -> dict[str, Any]:
    """OpenClaw's ``openclaw.json``: the provider and its models, ``default`` as the agents' model (``api_key``:
    a ``${VAR}`` string or a SecretRef)."""
    models = [
        {
            "id": a.alias,
            "name": a.alias,
            "input": ["text", "image"] if "vision" in a.capabilities else ["text"],
            "contextWindow": a.window,
            "maxTokens": max_tokens or output_budget(a.window),
        }
        for a in aliases
    ]
    provider = {"baseUrl": f"{base_url}/v1", "api": "openai-completions", "apiKey": api_key, "models": models}
    return {
        "models": {"mode": "merge", "providers": {PROVIDER: provider}},
        "agents": {"defaults": {"model": {"primary": f"{PROVIDER}/{default}"}}},
    }


def hermes_config(base_url: str, alias: AliasInfo, key_env: str) -> dict[str, Any]:
    """Hermes's ``config.yaml`` (JSON is YAML): the provider, and the model with its context length (given: Hermes
    would probe for it otherwise)."""
    return {
        "model": {"provider": PROVIDER, "default": alias.alias, "context_length": alias.window},
        "providers": {PROVIDER: {"base_url": f"{base_url}/v1", "key_env": key_env, "default_model": alias.alias}},
    }


def claude_code_settings(base_url: str, alias: AliasInfo, key: KeySource) -> dict[str, Any]:
    """Claude Code's settings: every model role on ``alias``, its real window and an output budget inside it, no
    traffic but the gateway's, the key from ``apiKeyHelper``."""
    return {
        "env": {
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_MODEL": alias.alias,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": alias.alias,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": alias.alias,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": alias.alias,
            "ANTHROPIC_SMALL_FAST_MODEL": alias.alias,
            "CLAUDE_CODE_SUBAGENT_MODEL": alias.alias,
            "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(alias.window),
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(output_budget(alias.window)),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        },
        "apiKeyHelper": key.shell(),
    }


def llm_models(base_url: str, aliases: Sequence[AliasInfo]) -> str:
    """llm's ``extra-openai-models.yaml``: one entry per alias, the key stored as ``servectl``."""
    lines = []
    for a in aliases:
        lines += [
            f"# {a.alias}: context window {a.window} tokens",
            f"- model_id: {json.dumps(a.alias)}",
            f"  model_name: {json.dumps(a.alias)}",
            f"  api_base: {json.dumps(base_url + '/v1')}",
            f"  api_key_name: {PROVIDER}",
            f"  supports_tools: {json.dumps('tools' in a.capabilities)}",
            f"  vision: {json.dumps('vision' in a.capabilities)}",
        ]
    return "\n".join(lines) + "\n"


# -- one client -------------------------------------------------------------------------------------------------


def client_setup(
    client: ClientKind, *, base_url: str, aliases: Sequence[AliasInfo], key: KeySource, alias: str | None = None
) -> ClientSetup:
    """``client``'s configuration against the gateway at ``base_url`` (no ``/v1``), for ``aliases`` (the chat
    ones; embedding aliases are left out) and ``alias`` as its model (default: the first chat alias).

    Raises:
        KeySourceUnsupported: the client cannot read a key from a file (hermes, openwebui).
        LookupError: ``alias`` is not one of ``aliases``, or there is no chat alias.
    """
    chats = [a for a in aliases if a.chat]
    if not chats:
        raise LookupError("no chat alias (every alias is an embedding model's)")
    chosen = next((a for a in chats if a.alias == alias), None) if alias else chats[0]
    if chosen is None:
        raise LookupError(f"no chat alias {alias!r}; aliases: {', '.join(a.alias for a in chats)}")
    key_note = f"the key: from {key.describe()}"
    if client == "pi":
        api_key = key.env if key.env is not None else f"!{key.shell()}"
        text = json.dumps(pi_models(base_url, chats, api_key), indent=2) + "\n"
        notes = [key_note, f"run: pi --provider {PROVIDER} --model {chosen.alias}"]
        return ClientSetup(client, "~/.pi/agent/models.json", text, notes)
    if client == "openclaw":
        if key.env is not None:
            ref: Any = f"${{{key.env}}}"
            secrets: dict[str, Any] = {}
        else:
            ref = {"source": "file", "provider": "servectl_key", "id": "value"}
            secrets = {"secrets": {"providers": {"servectl_key": {"source": "file", "path": str(key.file),
                                                                 "mode": "singleValue"}}}}  # fmt: skip
        doc = {**secrets, **openclaw_config(base_url, chats, chosen.alias, ref)}
        notes = [key_note, f"run: openclaw agent --model {PROVIDER}/{chosen.alias}"]
        return ClientSetup(client, "~/.openclaw/openclaw.json", json.dumps(doc, indent=2) + "\n", notes)
    if client == "hermes":
        if key.env is None:
            raise KeySourceUnsupported("hermes reads its key from a variable only (key_env): use --key-env NAME")
        text = json.dumps(hermes_config(base_url, chosen, key.env), indent=2) + "\n"
        return ClientSetup(client, "~/.hermes/config.yaml", text, [key_note, "run: hermes"])
    if client == "claude-code":
        text = json.dumps(claude_code_settings(base_url, chosen, key), indent=2) + "\n"
        notes = [
            f"{key_note} (its apiKeyHelper prints it; Claude Code sends it as x-api-key and Bearer)",
            f"run: claude --settings FILE (or put the file at ~/.claude/settings.json); model {chosen.alias}, "
            f"window {chosen.window} tokens",
        ]
        return ClientSetup(client, "~/.claude/settings.json", text, notes)
    if client == "llm":
        notes = [
            f"the key: {key.shell()} | llm keys set {PROVIDER}",
            'the file goes in llm\'s folder: "$(dirname "$(llm logs path)")/extra-openai-models.yaml"',
            f"run: llm -m {chosen.alias} 'hello'",
        ]
        return ClientSetup(client, "~/.config/io.datasette.llm/extra-openai-models.yaml", llm_models(base_url, chats),
                           notes)  # fmt: skip
    if key.env is None:
        raise KeySourceUnsupported("Open WebUI reads its key from a variable only (OPENAI_API_KEY): use --key-env NAME")
    windows = ", ".join(f"{a.alias} {a.window}" for a in chats)
    text = (
        f"# Open WebUI: docker run --env-file THIS_FILE ... (OPENAI_API_KEY is passed from your environment)\n"
        f"# context windows (set each model's num_ctx in Open WebUI): {windows}\n"
        f"OPENAI_API_BASE_URL={base_url}/v1\n"
        "OPENAI_API_KEY\n"
        "ENABLE_OLLAMA_API=false\n"
    )
    notes = [f'the key: OPENAI_API_KEY="${key.env}" docker run --env-file FILE ... ghcr.io/open-webui/open-webui']
    return ClientSetup(client, "openwebui.env", text, notes)


__all__ = [
    "CLIENTS",
    "DEFAULT_KEY_ENV",
    "AliasInfo",
    "ClientKind",
    "ClientSetup",
    "KeySource",
    "KeySourceUnsupported",
    "alias_info",
    "claude_code_settings",
    "client_setup",
    "hermes_config",
    "llm_models",
    "openclaw_config",
    "output_budget",
    "pi_models",
]
