"""Coding: the model writes a function; its answer runs against hidden tests in the sandbox.

The case set (``cases/coding.yaml`` beside the suites, or the suite's ``coding.cases`` file) holds, per case,
the prompt the model sees, the name of the function (or class) it must define, hidden tests (each top-level
statement is one test) and a reference solution. The answer is the first fenced code block that defines the
function (else the whole answer, when it parses and defines it); it runs with its tests in a locked-down
throwaway container (:class:`servectl.adapters.sandbox.DockerSandbox`), never on the host. Parsing the answer
(``ast.parse``) happens here: it does not run it.

Each failed case says why: ``no code found``, ``syntax error``, ``test failed``, ``timeout`` (killed at the
wall-clock limit) or ``killed`` (memory limit, or it ended without a result).

When the sandbox itself is at fault, the gate says so in one line instead of failing every case: before the
first case a trivial program that must pass runs under the same limits (:func:`sandbox_fault`); when it cannot
(the image cannot be built, the engine refuses or cannot start the container, the program is killed at the
limit on a loaded machine), the gate fails with that reason and asks the model nothing. The same check runs
again when every case was killed at the limit, and a sandbox that breaks halfway stops the gate there.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from servectl.adapters.sandbox import CodeSandbox, SandboxLimits, SandboxRun
from servectl.bench.qualify.gates.common import GateRun, clip, merged
from servectl.bench.qualify.model import CaseResult, GateResult
from servectl.bench.qualify.suite import CodingGate
from servectl.errors import Problem, ProfileError, ServectlError
from servectl.files import read_bounded
from servectl.profile.yaml_locations import MAX_PROFILE_BYTES

GATE = "coding"
#: The case set servectl ships.
SHIPPED_CASES = Path(__file__).resolve().parents[1] / "cases" / "coding.yaml"

Reason = Literal["no code found", "syntax error", "test failed", "timeout", "killed"]

ASK = (
    "\n\nAnswer with the complete Python code (standard library only) in one ```python fenced code block. "
    "Define `{function}` at the top level; do not call it or print anything."
)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


@dataclass(frozen=True)
class CodingCase:
    """One case: what the model is asked, what it must define, and the tests (one source per statement)."""

    id: str
    function: str
    prompt: str
    tests: tuple[str, ...]
    solution: str


@dataclass(frozen=True)
class CaseSet:
    """The cases of one file, with its path and the hash of its text (recorded in the evidence)."""

    name: str
    source: str
    sha256: str
    cases: tuple[CodingCase, ...]


def cases_path(spec: CodingGate, suite_source: str) -> Path:
    """The case file a suite's coding gate names (``shipped``, or a path relative to the suite file)."""
    if spec.cases == "shipped":
        return SHIPPED_CASES
    path = Path(spec.cases).expanduser()
    return path if path.is_absolute() else Path(suite_source).parent / path


def load_cases(path: Path) -> CaseSet:
    """Read and check a case file: every case has an id, a function, a prompt, and tests that parse.

    Raises:
        ProfileError: one line per problem, naming the file, the line and the case.
    """
    from servectl.profile.loader import read_yaml

    data, locations = read_yaml(path)
    problems: list[Problem] = []

    def problem(where: tuple[Any, ...], message: str) -> None:
        line = next((locations[where[:cut]][1] for cut in range(len(where), 0, -1) if where[:cut] in locations), None)
        problems.append(Problem(str(path), line, ".".join(str(p) for p in where), message))

    raw = data.get("cases")
    if not isinstance(raw, list) or not raw:
        problem(("cases",), "give a list of cases (id, function, prompt, tests, solution)")
        raise ProfileError(problems)
    cases: list[CodingCase] = []
    seen: set[str] = set()
    for index, entry in enumerate(raw):
        case = _case(entry, index, lambda field, message, i=index: problem(("cases", i, field), message))
        if case is not None and case.id in seen:
            problem(("cases", index, "id"), f"{case.id!r} is used by an earlier case")
        elif case is not None:
            seen.add(case.id)
            cases.append(case)
    if problems:
        raise ProfileError(problems)
    digest = hashlib.sha256(read_bounded(path, limit_bytes=MAX_PROFILE_BYTES, what="suite")).hexdigest()
    return CaseSet(name=str(data.get("name") or path.stem), source=str(path), sha256=digest, cases=tuple(cases))


def _case(entry: Any, index: int, problem: Any) -> CodingCase | None:
    if not isinstance(entry, dict):
        problem("", "a case is a mapping with id, function, prompt, tests and solution")
        return None
    fields = {}
    for key in ("id", "function", "prompt", "tests", "solution"):
        value = entry.get(key)
        if not isinstance(value, str) or not value.strip():
            problem(key, "missing or empty; give text")
            return None
        fields[key] = value
    unknown = sorted(set(entry) - set(fields))
    if unknown:
        problem(unknown[0], "unknown key; allowed keys: function, id, prompt, solution, tests")
        return None
    if not fields["function"].isidentifier():
        problem("function", f"{fields['function']!r} is not a Python name")
        return None
    try:
        tests = split_statements(fields["tests"])
        ast.parse(fields["solution"])
    except SyntaxError as err:
        which = "tests" if err.filename == "tests" else "solution"
        problem(which, f"does not parse: line {err.lineno}: {err.msg}")
        return None
    if not tests:
        problem("tests", "has no statement; give at least one assert")
        return None
    return CodingCase(fields["id"], fields["function"], fields["prompt"], tests, fields["solution"])


def split_statements(source: str) -> tuple[str, ...]:
    """The top-level statements of ``source``, each as its own source text.

    Raises:
        SyntaxError: ``source`` does not parse (``filename`` is ``tests``).
    """
    tree = ast.parse(source, filename="tests")
    return tuple(s for s in (ast.get_source_segment(source, node) for node in tree.body) if s)


def extract_code(answer: str, function: str) -> str | None:
    """The code of an answer: the first fenced block that defines ``function``, else the first Python block,
    else the whole answer when it parses and defines ``function``; None when there is none."""
    blocks: list[tuple[str, str]] = [(str(lang).lower(), str(body)) for lang, body in _FENCE.findall(answer)]
    defining = re.compile(rf"^\s*(?:async\s+def|def|class)\s+{re.escape(function)}\b", re.MULTILINE)
    for _, body in blocks:
        if defining.search(body):
            return body
    for lang, body in blocks:
        if lang in ("python", "py", "python3") and body.strip():
            return body
    if defining.search(answer):
        try:
            ast.parse(answer)
        except SyntaxError:
            return None
        return answer
    return None


_DRIVER = """
import json as _json, os as _os


def _servectl_run(answer, tests):
    try:
        code = compile(answer, "answer.py", "exec")
    except SyntaxError as err:
        return "syntax error", f"line {err.lineno}: {err.msg}"
    scope = {"__name__": "answer"}
    try:
        exec(code, scope)
    except BaseException as err:
        return "test failed", f"the answer raised {type(err).__name__} when defined: {err}"
    for number, test in enumerate(tests, 1):
        try:
            exec(compile(test, f"test_{number}", "exec"), scope)
        except AssertionError as err:
            return "test failed", f"test {number} failed: {test}" + (f" ({err})" if str(err) else "")
        except BaseException as err:
            return "test failed", f"test {number} raised {type(err).__name__}: {err}: {test}"
    return "passed", f"{len(tests)} tests passed"


_outcome, _message = _servectl_run(ANSWER, TESTS)
_os.write(1, (MARKER + _json.dumps({"outcome": _outcome, "message": _message[:500]}) + "\\n").encode())
"""


def sandbox_program(answer: str, tests: tuple[str, ...], marker: str) -> str:
    """The program the sandbox runs: the answer and its tests as data, and the driver that runs them."""
    return f"ANSWER = {answer!r}\nTESTS = {list(tests)!r}\nMARKER = {marker!r}\n{_DRIVER}"


def judge(run: SandboxRun, marker: str, *, limits: SandboxLimits) -> tuple[Reason | None, str]:
    """``(None, message)`` when the tests passed, else ``(reason, message)``."""
    if run.timed_out:
        return "timeout", f"still running after {limits.timeout_s:g} s; killed"
    if run.oom_killed:
        return "killed", f"killed at the {limits.memory_mib} MiB memory limit"
    line = next((ln for ln in reversed(run.stdout.splitlines()) if ln.startswith(marker)), None)
    if line is None:
        tail = clip(run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "", 120)
        return "killed", f"ended with exit code {run.exit_code} and no result" + (f": {tail}" if tail else "")
    result = json.loads(line[len(marker) :])
    outcome, message = str(result.get("outcome")), str(result.get("message"))
    if outcome == "passed":
        return None, message
    return ("syntax error" if outcome == "syntax error" else "test failed"), message


def check_answer(
    answer: str, case: CodingCase, sandbox: CodeSandbox, limits: SandboxLimits
) -> tuple[Reason | None, str]:
    """Extract the code of ``answer`` and run it with ``case``'s tests in ``sandbox``."""
    code = extract_code(answer, case.function)
    if code is None:
        return "no code found", f"no code block defining {case.function}: {clip(answer, 60)!r}"
    try:
        ast.parse(code)
    except SyntaxError as err:
        return "syntax error", f"line {err.lineno}: {err.msg}"
    marker = f"servectl-result-{secrets.token_hex(8)} "
    return judge(sandbox.run_python(sandbox_program(code, case.tests, marker), limits=limits), marker, limits=limits)


_PROBE_ANSWER = "def servectl_probe():\n    return 42\n"
_PROBE_TESTS = ("assert servectl_probe() == 42",)
_PROBE_FIX: dict[str, str] = {
    "timeout": "raise the suite's coding.timeout_s, or run on a less loaded machine",
    "killed": "check the sandbox image runs python3 as nobody, or raise coding.memory_mib / coding.pids",
}


def sandbox_fault(sandbox: CodeSandbox, limits: SandboxLimits) -> str | None:
    """Why the sandbox itself cannot judge an answer, in one line; None when a trivial program passes in it.

    The program is the gate's own driver with a one-line answer and test, under the gate's limits, so that
    what fails here (image, engine, container start, limits) would fail every case the same way.
    """
    marker = f"servectl-result-{secrets.token_hex(8)} "
    try:
        ran = sandbox.run_python(sandbox_program(_PROBE_ANSWER, _PROBE_TESTS, marker), limits=limits)
    except ServectlError as err:  # image build, engine unreachable, container refused or not started
        return clip(err.message, 300)
    reason, message = judge(ran, marker, limits=limits)
    if reason is None:
        return None
    fix = _PROBE_FIX.get(reason, "the sandbox image cannot run the gate's driver")
    return f"a trivial program ({ran.wall_s:.1f} s) {reason}: {clip(message, 160)}; {fix}"


def _fault_result(cases: CaseSet, results: list[CaseResult], note: str) -> GateResult:
    detail = {"case_set": cases.name, "source": cases.source, "sha256": cases.sha256, "sandbox_fault": note}
    return GateResult(gate=GATE, verdict="fail", cases=tuple(results), note=note, detail=detail)


def run(run: GateRun, spec: CodingGate, cases: CaseSet) -> GateResult:
    """Every case (or the first ``spec.limit``): ask, extract, run the tests in the sandbox.

    A sandbox at fault (see :func:`sandbox_fault`) fails the gate with one line saying why.
    """
    limits = SandboxLimits(timeout_s=spec.timeout_s, memory_mib=spec.memory_mib, cpus=spec.cpus, pids=spec.pids)
    chosen = cases.cases[: spec.limit] if spec.limit else cases.cases
    fault = sandbox_fault(run.sandbox(), limits)
    if fault is not None:
        return _fault_result(cases, [], f"the coding sandbox is at fault, no case was run: {fault}")
    results: list[CaseResult] = []
    for index, case in enumerate(chosen):
        try:
            result = _case_result(run, spec, case, limits)
        except ServectlError as err:  # the engine went away or refused a container halfway
            note = f"the coding sandbox failed at case {case.id} ({index} of {len(chosen)} judged): {err.message}"
            return _fault_result(cases, results, clip(note, 400))
        results.append(result)
        run.report(GATE, index + 1, len(chosen), result)
    if len(results) > 1 and all(c.detail.get("reason") in ("timeout", "killed") for c in results):
        fault = sandbox_fault(run.sandbox(), limits)
        if fault is not None:
            return _fault_result(cases, results, f"every case was killed and the coding sandbox is at fault: {fault}")
    gate = GateResult.of(GATE, results)
    return GateResult(
        gate=GATE,
        verdict=gate.verdict,
        cases=gate.cases,
        detail={"case_set": cases.name, "source": cases.source, "sha256": cases.sha256},
    )


def _case_result(run: GateRun, spec: CodingGate, case: CodingCase, limits: SandboxLimits) -> CaseResult:
    """Ask for one case, extract the code and judge it in the sandbox."""
    body = merged(spec.extra_body)
    name = f"coding {case.id}"
    messages = [{"role": "user", "content": case.prompt.strip() + ASK.format(function=case.function)}]
    exchange = run.client.chat(messages, max_tokens=spec.max_tokens, extra_body=body)
    if not exchange.ok:
        return CaseResult(name, False, f"{name}: {exchange.error}", exchange.latency_s)
    reason, message = check_answer(exchange.content, case, run.sandbox(), limits)
    if reason is not None and exchange.finish_reason == "length":
        message += f" (the answer was cut at max_tokens {spec.max_tokens})"
    detail = {"reason": reason or "passed", "finish_reason": exchange.finish_reason}
    text = f"{name}: {reason}: {message}" if reason else f"{name}: {message}"
    return CaseResult(name, reason is None, text, exchange.latency_s, detail)
