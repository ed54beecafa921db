"""The coding gate's pure parts: the case file check, code extraction, judging, and the sandbox's settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.unit.gate_runs import gate_run

from servectl.adapters.sandbox import SandboxLimits, SandboxRun, container_kwargs
from servectl.bench.qualify import QualifySettings, run_qualify
from servectl.bench.qualify.gates.coding import SHIPPED_CASES, extract_code, judge, load_cases, sandbox_program
from servectl.bench.qualify.suite import LoadedSuite, Suite
from servectl.errors import ProfileError, UsageError

CASE = """\
name: mine
cases:
  - id: double
    function: double
    prompt: Write double(x).
    tests: |
      assert double(2) == 4
    solution: |
      def double(x):
          return 2 * x
"""


def test_the_shipped_case_set_has_at_least_15_distinct_cases_with_tests() -> None:
    cases = load_cases(SHIPPED_CASES)
    assert len(cases.cases) >= 15
    assert len({c.id for c in cases.cases}) == len(cases.cases)
    assert all(any(t.startswith(("assert", "try", "for")) for t in c.tests) for c in cases.cases)
    assert len(cases.sha256) == 64


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("assert double(2) == 4", "assert double(2) ==="), "mine.yaml:6: cases.0.tests: does not parse: line 1"),
        (("function: double", "function: two words"), "cases.0.function: 'two words' is not a Python name"),
        (("    prompt: Write double(x).\n", ""), "cases.0.prompt: missing or empty"),
        (("  - id: double", "  - id: double\n    timeout: 3"), "cases.0.timeout: unknown key"),
    ],
)
def test_a_case_file_with_a_bad_case_is_one_line_naming_file_and_case(
    tmp_path: Path, edit: tuple[str, str], expected: str
) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(CASE.replace(*edit), encoding="utf-8")
    with pytest.raises(ProfileError) as err:
        load_cases(path)
    assert err.value.exit_code == 2
    assert len(err.value.lines()) == 1 and expected in err.value.lines()[0]
    assert err.value.lines()[0].startswith(str(path))


def test_a_bad_case_file_stops_the_run_before_any_request(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text(CASE.replace("== 4", "== = 4"), encoding="utf-8")
    suite_file = tmp_path / "suite.yaml"
    suite = Suite.model_validate({"name": "t", "gates": {"smoke": {}, "coding": {"cases": "mine.yaml"}}})
    loaded = LoadedSuite(suite, source=str(suite_file), sha256="0" * 64)
    # nothing listens on port 9: a request would fail with BenchFailed, not a ProfileError on the case file
    with pytest.raises(ProfileError, match=r"mine\.yaml:6: cases\.0\.tests"):
        run_qualify(settings=QualifySettings(url="http://127.0.0.1:9", suite=loaded), environ=os.environ)


def test_a_coding_gate_without_a_sandbox_is_refused_before_any_request(tmp_path: Path) -> None:
    """The runner makes no sandbox of its own (it built a Docker SDK client from the environment): the host's
    context hands one in, and a library caller without one is told so before anything is sent."""
    (tmp_path / "mine.yaml").write_text(CASE, encoding="utf-8")
    suite = Suite.model_validate({"name": "t", "gates": {"smoke": {}, "coding": {"cases": "mine.yaml"}}})
    loaded = LoadedSuite(suite, source=str(tmp_path / "suite.yaml"), sha256="0" * 64)
    with pytest.raises(UsageError, match=r"suite t has a coding gate and this run has no code sandbox .* sandbox="):
        run_qualify(settings=QualifySettings(url="http://127.0.0.1:9", suite=loaded), environ=os.environ)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("Sure.\n```python\ndef f(x):\n    return x\n```\nDone.", "def f(x):\n    return x\n"),
        ("```\nimport os\n```\n```py\ndef f(x): return 1\n```", "def f(x): return 1\n"),
        ("```python\nprint(1)\n```", "print(1)\n"),
        ("def f(x):\n    return 3", "def f(x):\n    return 3"),
        ("```python\ndef f(x):\n    return 4", "def f(x):\n    return 4"),  # cut at max_tokens: the rest
        ("The answer is def f which returns x.", None),
        ("No code here.", None),
    ],
)
def test_the_code_is_the_block_that_defines_the_function(answer: str, expected: str | None) -> None:
    assert extract_code(answer, "f") == expected


def test_the_judge_reads_only_the_line_with_the_run_marker() -> None:
    limits = SandboxLimits(timeout_s=3, memory_mib=64)

    def ran(stdout: str = "", **kw: object) -> SandboxRun:
        fields: dict[str, object] = {"exit_code": 0, "stdout": stdout, "stderr": "", "timed_out": False}
        return SandboxRun(**{**fields, "oom_killed": False, "wall_s": 0.1, **kw})  # type: ignore[arg-type]

    ok = 'M {"outcome": "passed", "message": "3 tests passed"}'
    assert judge(ran(ok), "M ", limits=limits) == (None, "3 tests passed")
    assert judge(ran('X {"outcome": "passed", "message": "fake"}'), "M ", limits=limits)[0] == "killed"
    failed = 'M {"outcome": "test failed", "message": "test 2 failed"}'
    assert judge(ran(failed), "M ", limits=limits) == ("test failed", "test 2 failed")
    assert judge(ran(timed_out=True, exit_code=None), "M ", limits=limits)[0] == "timeout"
    assert judge(ran(oom_killed=True, exit_code=137), "M ", limits=limits) == (
        "killed",
        "killed at the 64 MiB memory limit",
    )


def test_the_program_carries_the_answer_and_tests_as_data() -> None:
    program = sandbox_program("def f(): pass  # '''\n", ("assert f() is None",), "MARK ")
    namespace: dict[str, object] = {}
    exec(program.split("\n\nimport json")[0], namespace)  # only the data assignments; the driver is not run
    assert namespace["ANSWER"] == "def f(): pass  # '''\n" and namespace["TESTS"] == ["assert f() is None"]


def test_the_sandbox_container_is_locked_down() -> None:
    kwargs = container_kwargs("img", "print(1)", limits=SandboxLimits(timeout_s=5, memory_mib=200, cpus=0.5, pids=40))
    assert kwargs["command"] == ["python3", "-I", "-c", "print(1)"]
    assert kwargs["network_mode"] == "none" and kwargs["read_only"] is True
    assert kwargs["cap_drop"] == ["ALL"] and kwargs["security_opt"] == ["no-new-privileges"]
    assert kwargs["user"] == "65534:65534"
    assert kwargs["mem_limit"] == kwargs["memswap_limit"] == "200m"
    assert kwargs["nano_cpus"] == 500_000_000 and kwargs["pids_limit"] == 40
    assert list(kwargs["tmpfs"]) == ["/work"] and "size=16m" in kwargs["tmpfs"]["/work"]
    assert "volumes" not in kwargs and "privileged" not in kwargs


# -- a sandbox at fault: one line, no case failed for it ------------------------------------------------------


class _FakeSandbox:
    """Answers like the real sandbox would: the probe (or every program) passes, times out, or raises."""

    def __init__(self, *, probe: str = "pass", cases: str = "pass", fail_at: int | None = None) -> None:
        self.probe, self.cases, self.fail_at, self.runs = probe, cases, fail_at, 0

    def run_python(self, program: str, *, limits: SandboxLimits) -> SandboxRun:
        import re

        from servectl.errors import ServectlError

        self.runs += 1
        how = self.probe if "servectl_probe" in program else self.cases
        if self.fail_at is not None and self.runs == self.fail_at:
            how = "raise"
        if how == "raise":
            raise ServectlError("cannot build the stand-in image: 'ldd' is not installed (install libc-bin)")
        if how == "timeout":
            return SandboxRun(None, "", "", timed_out=True, oom_killed=False, wall_s=limits.timeout_s)
        if how == "crash":
            return SandboxRun(127, "", "python3: not found", timed_out=False, oom_killed=False, wall_s=0.2)
        match = re.search(r"^MARKER = '([^']*)'$", program, re.MULTILINE)
        assert match is not None
        line = match.group(1) + '{"outcome": "passed", "message": "1 tests passed"}'
        return SandboxRun(0, line + "\n", "", timed_out=False, oom_killed=False, wall_s=0.3)


class _RightAnswers:
    """A qualify client that answers every coding prompt with a fenced block defining the asked function."""

    def __init__(self) -> None:
        self.requests = 0

    def chat(self, messages: list[dict[str, str]], **kwargs: object) -> object:
        import re

        from servectl.bench.qualify.client import Exchange

        self.requests += 1
        match = re.search(r"Define `(\w+)`", messages[-1]["content"])
        assert match is not None
        return Exchange(None, 0.1, content=f"```python\ndef {match.group(1)}(*a):\n    return 1\n```")


def _coding(sandbox: _FakeSandbox, **gate: object) -> tuple[object, _RightAnswers]:
    from servectl.bench.qualify.gates import coding
    from servectl.bench.qualify.suite import CodingGate

    client = _RightAnswers()
    run = gate_run(client, code_sandbox=sandbox)
    spec = CodingGate.model_validate({"limit": 3, **gate})
    return coding.run(run, spec, load_cases(SHIPPED_CASES)), client


def test_a_sandbox_that_cannot_be_built_fails_the_gate_in_one_line_and_asks_nothing() -> None:
    gate, client = _coding(_FakeSandbox(probe="raise"))
    assert gate.verdict == "fail" and gate.cases == () and client.requests == 0  # type: ignore[attr-defined]
    assert gate.note == (  # type: ignore[attr-defined]
        "the coding sandbox is at fault, no case was run: "
        "cannot build the stand-in image: 'ldd' is not installed (install libc-bin)"
    )
    assert gate.detail["sandbox_fault"] == gate.note  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("probe", "says"),
    [
        ("timeout", "a trivial program (7.0 s) timeout: still running after 7 s; killed; raise the suite's coding."),
        ("crash", "killed: ended with exit code 127 and no result: python3: not found; check the sandbox image"),
    ],
)
def test_a_sandbox_that_kills_a_trivial_program_fails_the_gate_with_why(probe: str, says: str) -> None:
    gate, client = _coding(_FakeSandbox(probe=probe), timeout_s=7)
    assert gate.verdict == "fail" and gate.cases == () and client.requests == 0  # type: ignore[attr-defined]
    assert says in gate.note and "\n" not in gate.note  # type: ignore[attr-defined]


def test_a_sandbox_that_breaks_halfway_stops_the_gate_there_and_keeps_the_judged_cases() -> None:
    gate, _ = _coding(_FakeSandbox(fail_at=3))  # the probe, case 1, then case 2 raises
    assert gate.verdict == "fail" and [c.ok for c in gate.cases] == [True]  # type: ignore[attr-defined]
    assert gate.note.startswith("the coding sandbox failed at case is_palindrome (1 of 3 judged): cannot build")  # type: ignore[attr-defined]


def test_every_case_killed_is_blamed_on_the_sandbox_only_when_a_trivial_program_is_killed_too() -> None:
    slow_answers, _ = _coding(_FakeSandbox(cases="timeout"))
    assert slow_answers.verdict == "fail" and slow_answers.note == ""  # type: ignore[attr-defined]
    assert [c.detail["reason"] for c in slow_answers.cases] == ["timeout"] * 3  # type: ignore[attr-defined]
    sandbox = _FakeSandbox(cases="timeout")
    sandbox.fail_at = 5  # the probe passes, three cases time out, then the second probe fails
    broken, _ = _coding(sandbox)
    assert broken.note.startswith("every case was killed and the coding sandbox is at fault: cannot build")  # type: ignore[attr-defined]
    assert len(broken.cases) == 3  # type: ignore[attr-defined]


def test_a_passing_sandbox_judges_every_case_after_one_probe() -> None:
    sandbox = _FakeSandbox()
    gate, client = _coding(sandbox)
    assert gate.verdict == "pass" and gate.count == "3/3" and client.requests == 3  # type: ignore[attr-defined]
    assert sandbox.runs == 4


def test_the_stand_in_answers_the_shipped_cases_with_their_reference_solutions_by_default() -> None:
    import json

    from servectl.standin.answers import SHIPPED_SOLUTIONS, code_answer

    cases = load_cases(SHIPPED_CASES)
    shipped = json.loads(SHIPPED_SOLUTIONS.read_text())
    # regenerate with `python scripts/gen_standin_solutions.py` when this fails
    assert shipped["_sha256"] == cases.sha256
    assert {k: v for k, v in shipped.items() if not k.startswith("_")} == {c.function: c.solution for c in cases.cases}
    first = cases.cases[0]
    assert first.solution.rstrip() in code_answer(first.function, mode="right", solutions_file=None)
    assert "return None" in code_answer(first.function, mode="wrong", solutions_file=None)
