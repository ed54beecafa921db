"""``servectl gateway clients``: each client's configuration against the gateway (issue 41).

The documents are read back as each client reads them (JSON, YAML, an env file); the windows and capabilities
come from the profiles on the search path; no key is ever in the output, even one in the environment.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_run import run_cli

from servectl.errors import UsageError
from servectl.gateway.clients import (
    CLIENTS,
    AliasInfo,
    KeySource,
    KeySourceUnsupported,
    alias_info,
    client_setup,
    output_budget,
)
from servectl.testing.host import FakeHost

SECRET = "sk-gw-never-printed-0123456789"
CHAT = AliasInfo("chat", 8192, ("tools", "reasoning"), ("a", "b"))
EMBED = AliasInfo("embed", 512, ("embedding",), ("e",))


def write_world(tmp_path: Path) -> dict[str, str]:
    """Profiles a (8192, tools), b (16384, tools + vision), e (embeddings), and a gateway file over them."""
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    docs = {
        "a": {"engine": {"context_length": 8192}},
        "b": {"engine": {"context_length": 16384}, "model": {"multimodal": True}},
        "e": {"engine": {"context_length": 512, "args": {"is-embedding": True}}},
        "n": {"engine": {"context_length": None}},
    }
    for name, extra in docs.items():
        doc = {"name": name, "extends": "demo", "rollback": None, "serve": {"port": 9000 + len(name)}, **extra}
        (profiles / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "gateway.yaml").write_text(
        "listen: 0.0.0.0:8181\naliases: {chat: [a, b], big: [b], embed: [e], bare: [n]}\n"
    )
    return {"SERVECTL_PROFILES": str(profiles), "SERVECTL_HOME": str(tmp_path / "home"), "SERVECTL_GATEWAY_KEY": SECRET}


def test_an_alias_gets_the_smallest_window_and_the_capabilities_all_its_profiles_have() -> None:
    windows = {"a": 8192, "b": 16384, "n": None}
    caps = {"a": ["tools", "reasoning"], "b": ["tools", "vision"], "n": []}
    assert alias_info("chat", ["a", "b"], windows, caps) == AliasInfo("chat", 8192, ("tools",), ("a", "b"))
    assert alias_info("x", ["n", "gone"], windows, caps) == AliasInfo("x", None, (), ("n", "gone"))
    assert alias_info("x", ["n", "gone"], windows, caps).window == 65536  # told to clients: Hermes needs >= 64K


def test_claude_code_gets_every_model_role_on_the_alias_its_real_window_and_an_output_budget_inside_it() -> None:
    setup = client_setup("claude-code", base_url="http://gw:8", aliases=[EMBED, CHAT], key=KeySource(env="GW"))
    settings = json.loads(setup.text)
    env = settings["env"]
    assert env["ANTHROPIC_BASE_URL"] == "http://gw:8"
    roles = ["ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_SMALL_FAST_MODEL"]
    roles += ["ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"]
    for role in roles:
        assert env[role] == "chat"  # the embedding alias is no chat model
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "8192"  # else it assumes 1M tokens
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "2048"  # 32000 would not fit an 8192 window
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert settings["apiKeyHelper"] == "printenv GW"
    file_key = client_setup("claude-code", base_url="http://gw:8", aliases=[CHAT], key=KeySource(file=Path("/k y")))
    assert json.loads(file_key.text)["apiKeyHelper"] == "cat '/k y'"
    assert output_budget(1_000_000) == 32000 and output_budget(1000) == 256


def test_pi_and_openclaw_list_each_chat_alias_with_its_window_and_read_the_key_from_the_variable_or_file() -> None:
    big = AliasInfo("big", 16384, ("vision",), ("b",))
    pi = json.loads(client_setup("pi", base_url="http://gw:8", aliases=[CHAT, big, EMBED], key=KeySource(env="K")).text)
    provider = pi["providers"]["servectl"]
    assert provider["baseUrl"] == "http://gw:8/v1" and provider["apiKey"] == "K"
    assert [(m["id"], m["contextWindow"], m["input"], m["reasoning"]) for m in provider["models"]] == [
        ("chat", 8192, ["text"], True),
        ("big", 16384, ["text", "image"], False),
    ]
    from_file = client_setup("pi", base_url="http://gw:8", aliases=[CHAT], key=KeySource(file=Path("/run/k")))
    assert json.loads(from_file.text)["providers"]["servectl"]["apiKey"] == "!cat /run/k"  # pi runs a !command
    claw = json.loads(client_setup("openclaw", base_url="http://gw:8", aliases=[CHAT, big], key=KeySource(env="K"),
                                   alias="big").text)  # fmt: skip
    assert claw["agents"]["defaults"]["model"]["primary"] == "servectl/big"
    assert claw["models"]["providers"]["servectl"]["apiKey"] == "${K}"
    claw_file = json.loads(
        client_setup("openclaw", base_url="http://gw:8", aliases=[CHAT], key=KeySource(file=Path("/run/k"))).text
    )
    assert claw_file["models"]["providers"]["servectl"]["apiKey"] == {
        "source": "file", "provider": "servectl_key", "id": "value"
    }  # fmt: skip
    assert claw_file["secrets"]["providers"]["servectl_key"]["path"] == "/run/k"


def test_hermes_llm_and_open_webui_documents_and_what_they_cannot_read() -> None:
    hermes = yaml.safe_load(client_setup("hermes", base_url="http://gw:8", aliases=[CHAT], key=KeySource(env="K")).text)
    assert hermes["model"] == {"provider": "servectl", "default": "chat", "context_length": 8192}
    assert hermes["providers"]["servectl"]["key_env"] == "K"
    with pytest.raises(KeySourceUnsupported, match="--key-env"):
        client_setup("hermes", base_url="http://gw:8", aliases=[CHAT], key=KeySource(file=Path("/k")))
    with pytest.raises(KeySourceUnsupported, match="--key-env"):
        client_setup("openwebui", base_url="http://gw:8", aliases=[CHAT], key=KeySource(file=Path("/k")))
    llm = client_setup("llm", base_url="http://gw:8", aliases=[CHAT, EMBED], key=KeySource(file=Path("/k")))
    assert yaml.safe_load(llm.text) == [
        {"model_id": "chat", "model_name": "chat", "api_base": "http://gw:8/v1", "api_key_name": "servectl",
         "supports_tools": True, "vision": False}
    ]  # fmt: skip
    assert "cat /k | llm keys set servectl" in llm.notes[0]
    webui = client_setup("openwebui", base_url="http://gw:8", aliases=[CHAT], key=KeySource(env="K"))
    lines = [line for line in webui.text.splitlines() if not line.startswith("#")]
    assert lines == ["OPENAI_API_BASE_URL=http://gw:8/v1", "OPENAI_API_KEY", "ENABLE_OLLAMA_API=false"]
    assert 'OPENAI_API_KEY="$K"' in webui.notes[0]
    with pytest.raises(LookupError, match="no chat alias 'embed'; aliases: chat"):
        client_setup("pi", base_url="http://gw:8", aliases=[CHAT, EMBED], key=KeySource(env="K"), alias="embed")


def test_the_host_reads_windows_and_capabilities_off_the_profiles_and_writes_the_file(tmp_path: Path) -> None:
    environ = write_world(tmp_path)
    config = tmp_path / "gateway.yaml"
    with FakeHost(state_dir=tmp_path / "home", environ=environ) as host:
        listing = host.gateway_clients(config_file=config)
        assert listing.base_url == "http://127.0.0.1:8181"  # listen 0.0.0.0: this host's loopback
        assert {a.alias: (a.context_window, a.capabilities) for a in listing.aliases} == {
            "bare": (None, ("tools", "reasoning")),
            "big": (16384, ("tools", "reasoning", "vision")),
            "chat": (8192, ("tools", "reasoning")),
            "embed": (512, ("tools", "reasoning", "embedding")),
        }
        out = tmp_path / "settings.json"
        shown = host.gateway_clients(client="claude-code", config_file=config, alias="big", write_to=out)
        assert shown.written == out and out.read_text() == shown.setup.text  # type: ignore[union-attr]
        assert out.stat().st_mode & 0o777 == 0o600
        assert json.loads(out.read_text())["env"]["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "16384"
        assert json.loads(out.read_text())["apiKeyHelper"] == "printenv SERVECTL_GATEWAY_KEY"
        with pytest.raises(UsageError, match=r"settings.json exists; --force replaces it"):
            host.gateway_clients(client="claude-code", config_file=config, write_to=out)
        with pytest.raises(UsageError, match=r"no alias 'nope' in the gateway; aliases: bare, big, chat, embed"):
            host.gateway_clients(client="pi", config_file=config, alias="nope")
        with pytest.raises(UsageError, match="not both"):
            host.gateway_clients(client="pi", config_file=config, key_env="K", key_file=tmp_path / "k")
        other = host.gateway_clients(client="pi", config_file=config, url="https://gw.example/v1/")
        assert json.loads(other.setup.text)["providers"]["servectl"]["baseUrl"] == "https://gw.example/v1"  # type: ignore[union-attr]
        for client in CLIENTS:  # the key in the environment is never read into a document
            assert SECRET not in host.gateway_clients(client=client, config_file=config).setup.text  # type: ignore[union-attr]


def test_the_command_prints_the_file_on_stdout_and_notes_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in write_world(tmp_path).items():
        monkeypatch.setenv(name, value)
    config = str(tmp_path / "gateway.yaml")
    code, out, err = run_cli(monkeypatch, capsys, "gateway", "clients", "--config", config)
    assert code == 0 and "gateway http://127.0.0.1:8181" in out
    assert "chat             8192 tokens" in out and "window unknown (no engine.context_length)" in out
    code, out, err = run_cli(monkeypatch, capsys, "gateway", "clients", "hermes", "--key-env", "GW", "--config", config)
    assert code == 0 and yaml.safe_load(out)["providers"]["servectl"]["key_env"] == "GW"
    assert "# hermes reads this at ~/.hermes/config.yaml" in err and SECRET not in out + err
    written = tmp_path / "pi.json"
    code, out, err = run_cli(
        monkeypatch, capsys, "gateway", "clients", "pi", "--write", str(written), "--config", config
    )
    assert code == 0 and out == "" and f"wrote {written}" in err and json.loads(written.read_text())["providers"]
    code, out, err = run_cli(monkeypatch, capsys, "gateway", "clients", "cursor", "--config", config)
    assert code == 2 and err.strip().splitlines()[-1].endswith(
        "no client 'cursor'; clients: pi, openclaw, hermes, claude-code, llm, openwebui"
    )


def test_the_default_alias_tells_the_smallest_window_of_the_chat_profiles_it_may_serve(tmp_path: Path) -> None:
    """With no ``aliases:``, ``default`` is any running service: a client told its window must fit whichever
    chat profile serves (the embedding profile's 512 is not a chat window). It once said "window unknown"."""
    environ = write_world(tmp_path)
    (tmp_path / "gateway.yaml").write_text("listen: 127.0.0.1:8181\n")
    with FakeHost(state_dir=tmp_path / "home", environ=environ) as host:
        listing = host.gateway_clients(config_file=tmp_path / "gateway.yaml")
        by_alias = {a.alias: a for a in listing.aliases}
        windows = {name: a.context_window for name, a in by_alias.items() if name != "default"}
        chat_windows = [w for name, w in windows.items() if w is not None and name != "e"]
        assert by_alias["default"].context_window == min(chat_windows) == 8192  # a's, not e's 512
        assert by_alias["default"].profiles == ("*",)
        assert "vision" not in by_alias["default"].capabilities  # only b has it: not every profile does
        setup = host.gateway_clients(client="hermes", config_file=tmp_path / "gateway.yaml", alias="default").setup
        assert setup is not None and yaml.safe_load(setup.text)["model"]["context_length"] == 8192
