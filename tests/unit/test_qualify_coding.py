"""The coding gate's pure parts: the case file check, code extraction, judging, and the sandbox's settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from servectl.adapters.sandbox import SandboxLimits, SandboxRun, container_kwargs
from servectl.bench.qualify import QualifySettings, run_qualify
from servectl.bench.qualify.gates.coding import SHIPPED_CASES, extract_code, judge, load_cases, sandbox_program
from servectl.bench.qualify.suite import LoadedSuite, Suite
from servectl.errors import ProfileError

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
        run_qualify(settings=QualifySettings(url="http://127.0.0.1:9", suite=loaded))


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
