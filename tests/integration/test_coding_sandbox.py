"""The coding sandbox on the real engine: it refuses what untrusted code must not do, and runs the cases.

Each probe runs in a real throwaway container (the stand-in image, as the coding gate uses it) and prints
what it managed; the assertions read that output, the exit status and the engine's container list.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from servectl.adapters.sandbox import LABEL_SANDBOX, DockerSandbox, SandboxLimits
from servectl.bench.qualify import GateResult, QualifySettings, gate_counts, run_qualify
from servectl.bench.qualify.gates.coding import SHIPPED_CASES, check_answer, load_cases
from servectl.bench.qualify.suite import LoadedSuite, Suite
from servectl.standin.process import HostStandin
from servectl.testing.docker import TEST_SESSION_LABEL as SESSION_LABEL

DEMO_MODEL = str(Path(__file__).parents[2] / "examples" / "demo-model")
LIMITS = SandboxLimits(timeout_s=4, memory_mib=128, pids=32)


@pytest.fixture(scope="module")
def sandbox(docker_client: Any, standin_image: str, test_session_id: str) -> DockerSandbox:
    return DockerSandbox(image=standin_image, client=lambda: docker_client, labels={SESSION_LABEL: test_session_id})


def leftovers(docker_client: Any, test_session_id: str) -> list[Any]:
    filters = {"label": [LABEL_SANDBOX, f"{SESSION_LABEL}={test_session_id}"]}
    return list(docker_client.containers.list(all=True, filters=filters))


def test_the_sandbox_has_no_network(sandbox: DockerSandbox) -> None:
    program = (
        "import socket\n"
        "for host in ('1.1.1.1', '172.17.0.1'):\n"
        "    try:\n"
        "        socket.create_connection((host, 53), timeout=2)\n"
        "        print('connected', host)\n"
        "    except OSError as err:\n"
        "        print('refused', host, err.errno)\n"
        "print(sorted(n for _, n in socket.if_nameindex()))\n"
    )
    run = sandbox.run_python(program, limits=LIMITS)
    assert run.exit_code == 0, run.stderr
    assert "connected" not in run.stdout
    assert run.stdout.count("refused") == 2
    assert run.stdout.strip().splitlines()[-1] == "['lo']"  # no interface but loopback


def test_the_sandbox_writes_only_to_its_tmpfs_as_nobody(sandbox: DockerSandbox) -> None:
    program = (
        "import os\n"
        "print('uid', os.getuid())\n"
        "open('/work/ok.txt', 'w').write('kept')\n"
        "print('work', open('/work/ok.txt').read())\n"
        "for path in ('/tmp/x', '/etc/passwd', '/x', '/usr/local/bin/python3'):\n"
        "    try:\n"
        "        open(path, 'a').write('x')\n"
        "        print('wrote', path)\n"
        "    except OSError as err:\n"
        "        print('denied', path, err.strerror)\n"
    )
    run = sandbox.run_python(program, limits=LIMITS)
    assert run.exit_code == 0, run.stderr
    assert "uid 65534" in run.stdout and "work kept" in run.stdout
    assert "wrote" not in run.stdout
    denied = [line for line in run.stdout.splitlines() if line.startswith("denied ")]
    assert len(denied) == 4 and "denied /tmp/x Read-only file system" in denied


def test_a_fork_bomb_stops_at_the_process_limit_and_the_container_is_removed(
    sandbox: DockerSandbox, docker_client: Any, test_session_id: str
) -> None:
    program = (
        "import os, time\n"
        "children = 0\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30)\n"
        "            os._exit(0)\n"
        "        children += 1\n"
        "except OSError as err:\n"
        "    print('stopped after', children, err.strerror, flush=True)\n"
        "    os._exit(0)\n"
    )
    run = sandbox.run_python(program, limits=LIMITS)
    assert "stopped after" in run.stdout, (run.stdout, run.stderr)
    assert int(run.stdout.split()[2]) < LIMITS.pids
    assert leftovers(docker_client, test_session_id) == []


def test_sleeping_forever_is_killed_at_the_time_limit_and_removed(
    sandbox: DockerSandbox, docker_client: Any, test_session_id: str
) -> None:
    started = time.perf_counter()
    run = sandbox.run_python("import time\nprint('asleep', flush=True)\ntime.sleep(10**6)\n", limits=LIMITS)
    assert run.timed_out and run.exit_code is None
    assert "asleep" in run.stdout
    assert time.perf_counter() - started < LIMITS.timeout_s + 10
    assert leftovers(docker_client, test_session_id) == []


def test_memory_beyond_the_limit_is_killed(sandbox: DockerSandbox) -> None:
    run = sandbox.run_python("block = bytearray(1 << 30)\nprint('allocated')\n", limits=LIMITS)
    assert "allocated" not in run.stdout
    assert run.oom_killed or (run.exit_code != 0 and "MemoryError" in run.stderr)


@pytest.mark.parametrize(
    ("answer", "reason", "message"),
    [
        ("```python\ndef fizzbuzz(n):\n    return [str(i) for i in range(1, n + 1)]\n```", "test failed", "test 2"),
        ("```python\ndef fizzbuzz(n):\n    while True:\n        pass\n```", "timeout", "killed"),
        ("```python\nimport time\ndef fizzbuzz(n):\n    time.sleep(60)\n```", "timeout", "still running"),
        ("```python\nimport os\ndef fizzbuzz(n):\n    os._exit(3)\n```", "killed", "exit code 3"),
        ("```python\ndef fizzbuzz(n)\n    return []\n```", "syntax error", "line 1"),
        ("I cannot write that function.", "no code found", "no code block defining fizzbuzz"),
    ],
)
def test_a_wrong_answer_fails_with_its_reason(sandbox: DockerSandbox, answer: str, reason: str, message: str) -> None:
    case = next(c for c in load_cases(SHIPPED_CASES).cases if c.id == "fizzbuzz")
    got_reason, got_message = check_answer(answer, case, sandbox, SandboxLimits(timeout_s=3))
    assert (got_reason, message in got_message) == (reason, True), got_message


def qualify_coding(sandbox: DockerSandbox, tmp_path: Path, gate: dict[str, Any], **env: str) -> GateResult:
    """The coding gate against a host stand-in that answers per ``STANDIN_CODE_ANSWER``."""
    solutions = tmp_path / "solutions.json"
    solutions.write_text(json.dumps({c.function: c.solution for c in load_cases(SHIPPED_CASES).cases}))
    suite = Suite.model_validate({"name": "t", "gates": {"coding": gate}})
    loaded = LoadedSuite(suite, source="test", sha256="0" * 64)
    settings = {"STANDIN_TOKEN_RATE": "20000", "STANDIN_CHUNK_TOKENS": "8", "STANDIN_STARTUP_DELAY_S": "0"}
    with HostStandin(
        ["--model-path", DEMO_MODEL], env={**settings, "STANDIN_CODE_SOLUTIONS": str(solutions), **env}
    ) as e:
        e.wait_ready()
        report = run_qualify(
            settings=QualifySettings(url=e.base_url, suite=loaded), sandbox=sandbox, environ=os.environ
        )
    (result,) = report.gates
    return result


def test_the_coding_gate_passes_every_case_on_a_stand_in_that_answers_right(
    sandbox: DockerSandbox, tmp_path: Path
) -> None:
    # the stand-in answers each case's reference solution: every shipped case is solvable as written
    gate = qualify_coding(sandbox, tmp_path, {})
    assert gate.verdict == "pass", [c.message for c in gate.failures]
    assert gate.count == "16/16" and gate_counts([gate]) == "coding 16/16"


@pytest.mark.parametrize(
    ("mode", "reason"),
    [("wrong", "test failed"), ("slow", "timeout"), ("loop", "timeout"), ("none", "no code found")],
)
def test_the_coding_gate_fails_with_the_reason_on_a_wrong_slow_or_endless_answer(
    sandbox: DockerSandbox, tmp_path: Path, mode: str, reason: str
) -> None:
    gate = qualify_coding(sandbox, tmp_path, {"limit": 2, "timeout_s": 2}, STANDIN_CODE_ANSWER=mode)
    assert gate.verdict == "fail" and gate.count == "0/2"
    assert [c.detail["reason"] for c in gate.cases] == [reason, reason]
    assert gate.cases[0].message.startswith(f"coding fizzbuzz: {reason}: ")


def test_a_sandbox_whose_image_is_missing_fails_the_gate_in_one_line_without_asking_the_model(
    docker_client: Any, test_session_id: str, tmp_path: Path
) -> None:
    missing = DockerSandbox(
        image="servectl-no-such-image:missing", client=lambda: docker_client, labels={SESSION_LABEL: test_session_id}
    )
    gate = qualify_coding(missing, tmp_path, {})
    assert gate.verdict == "fail" and gate.cases == ()
    assert gate.note.startswith(
        "the coding sandbox is at fault, no case was run: sandbox: the Docker engine refused the container: "
    )
    assert "servectl-no-such-image" in gate.note and "\n" not in gate.note
    assert gate_counts([gate]) == "coding 0/0 (fail)"


def test_a_time_limit_no_program_can_meet_is_blamed_on_the_sandbox_not_on_every_case(
    sandbox: DockerSandbox, tmp_path: Path, docker_client: Any, test_session_id: str
) -> None:
    gate = qualify_coding(sandbox, tmp_path, {"timeout_s": 0.001})
    assert gate.verdict == "fail" and gate.cases == ()
    assert "no case was run: a trivial program (" in gate.note
    assert "timeout: still running after 0.001 s; killed; raise the suite's coding.timeout_s" in gate.note
    assert leftovers(docker_client, test_session_id) == []
