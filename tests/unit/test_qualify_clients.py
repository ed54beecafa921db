"""The clients gate's mechanics with stand-in client programs (shell scripts): pass, wrong answer, hang, missing.

The real clients (Pi, Hermes) run in tests/integration/test_qualify_clients.py; here each "client" is a small
script found through ``SERVECTL_CLIENT_<NAME>``, so that every outcome can be forced.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from tests.unit.gate_runs import gate_run

from servectl.bench.qualify.clients import ADAPTERS, KEY_ENV, ClientEndpoint
from servectl.bench.qualify.gates import GateRun, clients
from servectl.bench.qualify.model import gate_counts
from servectl.bench.qualify.suite import ClientsGate, load_suite, suite_path
from servectl.errors import ProfileError

READS_THE_FILE = (
    f"#!{sys.executable}\nimport re, sys\nprint(open(re.search(r'cat ([^`]+)`', sys.argv[-1]).group(1)).read())\n"
)


class _Client:
    url, model, api_key = "http://127.0.0.1:9", "demo", None


def clients_run(environ: dict[str, str]) -> GateRun:
    return gate_run(_Client(), max_model_len=4096, environ=environ)


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(body)
    path.chmod(0o755)
    return str(path)


def test_a_client_that_reads_the_nonce_passes(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "SERVECTL_CLIENT_PI": script(tmp_path, "pi", READS_THE_FILE)}
    result = clients.run(clients_run(env), ClientsGate(clients=["pi"], timeout_s=20))
    assert result.verdict == "pass" and result.count == "1/1", result.cases[0].message
    assert result.cases[0].detail["output_tail"].startswith("nonce-")


def test_a_client_that_answers_something_else_fails_with_its_output(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "SERVECTL_CLIENT_PI": script(tmp_path, "pi", "#!/bin/sh\necho I guess 42\n")}
    result = clients.run(clients_run(env), ClientsGate(clients=["pi"], timeout_s=20))
    assert result.verdict == "fail"
    assert result.cases[0].message == "clients pi: the nonce did not come back (exit code 0): 'I guess 42'"


def test_a_hanging_client_is_killed_at_its_limit_and_its_last_output_kept(tmp_path: Path) -> None:
    body = "#!/bin/sh\necho thinking hard\nsleep 600 &\nsleep 600\n"  # a child in the group sleeps too
    env = {"PATH": "/usr/bin:/bin", "SERVECTL_CLIENT_HERMES": script(tmp_path, "hermes", body)}
    started = time.perf_counter()
    result = clients.run(clients_run(env), ClientsGate(clients=["hermes"], timeout_s=1.5))
    assert time.perf_counter() - started < 10
    (case,) = result.cases
    assert result.verdict == "fail" and not case.ok
    assert case.message.startswith("clients hermes: still running after 1.5 s; killed: 'thinking hard'")
    assert case.detail["output_tail"] == "thinking hard\n" and case.detail["exit_code"] is None


def test_a_missing_client_is_skipped_with_its_install_command_never_passed(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "SERVECTL_CLIENT_PI": script(tmp_path, "pi", READS_THE_FILE)}
    result = clients.run(clients_run(env), ClientsGate(clients=["pi", "openclaw"], timeout_s=20))
    assert result.verdict == "skipped" and result.count == "skipped"
    assert result.passed == 1 and result.total == 2
    missing = result.cases[1]
    assert not missing.ok and missing.detail["skipped"] is True
    assert (
        missing.message
        == f"clients openclaw: skipped: openclaw is not installed; install it: {ADAPTERS['openclaw'].install}"
    )
    assert "openclaw" in result.note
    assert gate_counts([result]) == "clients 1/2 (skipped)"


def test_the_key_reaches_the_client_only_as_a_variable_and_never_the_evidence(tmp_path: Path) -> None:
    body = f'#!/bin/sh\necho "key=${KEY_ENV}"\ncat "$PI_CODING_AGENT_DIR/models.json"\n'
    env = {"PATH": "/usr/bin:/bin", "SERVECTL_CLIENT_PI": script(tmp_path, "pi", body)}
    ok, _, detail = clients.run_client(
        ADAPTERS["pi"], env["SERVECTL_CLIENT_PI"], ClientEndpoint("http://h:1", "m", 8192), api_key="s3cret-value",
        timeout_s=20, environ=env,
    )  # fmt: skip
    tail = str(detail["output_tail"])
    assert not ok and "key=***" in tail and "s3cret-value" not in tail
    config = json.loads(tail.split("\n", 1)[1])
    provider = config["providers"]["servectl"]
    assert provider["apiKey"] == KEY_ENV and provider["baseUrl"] == "http://h:1/v1"
    assert provider["models"] == [
        {"id": "m", "name": "m", "reasoning": False, "input": ["text"], "contextWindow": 8192, "maxTokens": 4096}
    ]


def test_a_suite_naming_an_unknown_client_is_one_line_with_file_and_entry(tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text("name: x\ngates:\n  clients:\n    clients: [pi, cursor]\n")
    with pytest.raises(ProfileError) as err:
        load_suite(path)
    (line,) = err.value.lines()
    assert line.startswith(f"{path}:4: gates.clients.clients.1: Input should be 'pi', 'openclaw' or 'hermes'")


def test_the_full_suite_runs_all_three_clients() -> None:
    gates = load_suite(suite_path("full")).suite.gates
    assert gates.clients is not None and gates.clients.clients == ["pi", "openclaw", "hermes"]


def test_a_client_gets_a_throwaway_home_and_tmpdir_removed_after_it(tmp_path: Path) -> None:
    body = '#!/bin/sh\necho "$HOME|$TMPDIR"\ntouch "$TMPDIR/left-behind"\n'
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path), "SERVECTL_CLIENT_PI": script(tmp_path, "pi", body)}
    _, _, detail = clients.run_client(
        ADAPTERS["pi"], env["SERVECTL_CLIENT_PI"], ClientEndpoint("http://h:1", "m"), api_key="k", timeout_s=20,
        environ=env,
    )  # fmt: skip
    home, scratch = str(detail["output_tail"]).strip().split("|")
    assert Path(scratch).parent == Path(home).parent and Path(scratch).parent.parent == tmp_path
    assert not Path(scratch).exists() and not Path(home).parent.exists()


def test_openclaw_is_configured_in_the_throwaway_home_with_the_key_as_a_reference(tmp_path: Path) -> None:
    env = ADAPTERS["openclaw"].configure(tmp_path, ClientEndpoint("http://h:1", "m", 8192))
    assert env["OPENCLAW_STATE_DIR"] == str(tmp_path / "openclaw")
    config = json.loads(Path(env["OPENCLAW_CONFIG_PATH"]).read_text())
    provider = config["models"]["providers"]["servectl"]
    assert provider["apiKey"] == f"${{{KEY_ENV}}}" and provider["baseUrl"] == "http://h:1/v1"
    assert config["agents"]["defaults"]["model"]["primary"] == "servectl/m"
