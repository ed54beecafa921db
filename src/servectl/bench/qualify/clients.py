"""Real client programs as the ``clients`` gate runs them: how to install, configure and drive each one.

Each adapter writes the client's configuration into a throwaway home folder (never the user's): the endpoint's
base URL, the model, and the *name* of the variable that holds the key (the key itself only travels in the
child's environment). The documents are :mod:`servectl.gateway.clients`' (what ``servectl gateway clients``
prints), for one model. It then runs the client non-interactively with one prompt and returns what it printed.

* **Pi** (``@mariozechner/pi-coding-agent`` on npm, ``pi``): ``$PI_CODING_AGENT_DIR/models.json`` declares a
  provider with ``api: openai-completions``, ``baseUrl`` and ``apiKey`` = the variable's name (pi resolves
  a name to its value); ``pi -p --no-session --provider servectl --model MODEL PROMPT`` prints the answer.
* **Hermes** (``hermes-agent`` on PyPI, ``hermes``): ``$HERMES_HOME/config.yaml`` declares
  ``providers.servectl`` with ``base_url``, ``key_env`` and ``default_model``, and selects it under
  ``model``; ``hermes -z PROMPT --yolo`` prints only the final answer (``--yolo``: no approval prompt for
  the shell command, which nobody would answer).
* **OpenClaw** (``openclaw`` on npm, needs Node >= 24): ``openclaw.json`` in the throwaway home declares a
  custom provider (``models.providers.servectl``: ``baseUrl``, ``api: openai-completions``, ``apiKey`` as a
  ``${VAR}`` reference) and the default model ``servectl/MODEL``; ``openclaw agent exec PROMPT --config FILE
  --model servectl/MODEL`` runs one headless turn (its documented CI entry point) with its ``exec`` tool. Its
  releases need Node >= 24.16: a launcher script that runs it on such a Node can be its
  ``SERVECTL_CLIENT_OPENCLAW``. OpenClaw 2026.9.6 still writes its dated log under ``/tmp/openclaw`` and
  empty lock files under ``/tmp/openclaw-state-locks-UID`` (fixed paths in its source, not ``$TMPDIR``;
  ``logging.file`` is not honoured by ``agent exec``).

A client is found as ``SERVECTL_CLIENT_<NAME>`` (a path to its executable) or on ``PATH``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from servectl.files import write_atomic
from servectl.gateway.clients import UNKNOWN_WINDOW, AliasInfo, hermes_config, openclaw_config, pi_models

ClientName = Literal["pi", "openclaw", "hermes"]
#: The clients servectl has adapters for, in the order a suite lists them by default.
CLIENT_NAMES: tuple[ClientName, ...] = ("pi", "openclaw", "hermes")
#: The variable the client reads the key from (its value is set only in the child's environment).
KEY_ENV = "SERVECTL_CLIENT_API_KEY"
PROVIDER = "servectl"
#: The context length told to a client when neither the server nor the profile says (Hermes needs >= 64K).
UNKNOWN_CONTEXT = UNKNOWN_WINDOW


@dataclass(frozen=True)
class ClientEndpoint:
    """What a client is pointed at: the server's base URL (no ``/v1``), the model and its context."""

    url: str
    model: str
    context_length: int | None = None


@dataclass(frozen=True)
class ClientAdapter:
    """One client program: its package, executable, install command and how to configure and drive it."""

    name: ClientName
    package: str
    executable: str
    install: str

    def find(self, environ: Mapping[str, str]) -> str | None:
        """The client's executable: ``SERVECTL_CLIENT_<NAME>``, else on ``PATH``; None when absent."""
        given = environ.get(f"SERVECTL_CLIENT_{self.name.upper()}")
        if given:
            return given if Path(given).is_file() and os.access(given, os.X_OK) else None
        return shutil.which(self.executable, path=environ.get("PATH"))

    def configure(self, home: Path, endpoint: ClientEndpoint) -> dict[str, str]:
        """Write the client's configuration under ``home``; return the environment variables it needs."""
        if self.name == "pi":
            return _configure_pi(home, endpoint)
        if self.name == "hermes":
            return _configure_hermes(home, endpoint)
        return _configure_openclaw(home, endpoint)

    def argv(self, executable: str, prompt: str, endpoint: ClientEndpoint, home: Path) -> list[str]:
        """The non-interactive command line that sends ``prompt`` and prints the answer."""
        if self.name == "pi":
            return [executable, "-p", "--no-session", "--no-extensions", "--no-skills", "--no-context-files",
                    "--provider", PROVIDER, "--model", endpoint.model, prompt]  # fmt: skip
        if self.name == "hermes":
            return [executable, "-z", prompt, "--yolo", "--ignore-rules"]
        config = str(home / "openclaw" / "openclaw.json")
        return [executable, "agent", "exec", prompt, "--config", config, "--model", f"{PROVIDER}/{endpoint.model}"]


ADAPTERS: Mapping[ClientName, ClientAdapter] = {
    "pi": ClientAdapter("pi", "@mariozechner/pi-coding-agent", "pi", "npm install -g @mariozechner/pi-coding-agent"),
    "openclaw": ClientAdapter("openclaw", "openclaw", "openclaw", "npm install -g openclaw  # needs Node >= 24.16"),
    "hermes": ClientAdapter("hermes", "hermes-agent", "hermes", "pipx install hermes-agent"),
}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text.encode("utf-8"), mode=0o600)


def _configure_pi(home: Path, endpoint: ClientEndpoint) -> dict[str, str]:
    agent_dir = home / "pi-agent"
    document = pi_models(endpoint.url, [_alias(endpoint)], KEY_ENV, max_tokens=4096)  # pi reads the named variable
    _write(agent_dir / "models.json", json.dumps(document, indent=2))
    return {"PI_CODING_AGENT_DIR": str(agent_dir)}


def _configure_hermes(home: Path, endpoint: ClientEndpoint) -> dict[str, str]:
    hermes_home = home / "hermes"
    # the context is given: hermes would probe /v1/models for it, which a gateway may not report
    _write(hermes_home / "config.yaml", json.dumps(hermes_config(endpoint.url, _alias(endpoint), KEY_ENV), indent=2))
    return {"HERMES_HOME": str(hermes_home)}


def _configure_openclaw(home: Path, endpoint: ClientEndpoint) -> dict[str, str]:
    state = home / "openclaw"
    config = openclaw_config(endpoint.url, [_alias(endpoint)], endpoint.model, f"${{{KEY_ENV}}}", max_tokens=4096)
    _write(state / "openclaw.json", json.dumps(config, indent=2))
    return {"OPENCLAW_STATE_DIR": str(state), "OPENCLAW_CONFIG_PATH": str(state / "openclaw.json")}


def _alias(endpoint: ClientEndpoint) -> AliasInfo:
    return AliasInfo(endpoint.model, endpoint.context_length)
