"""Real clients: each client program reads a random nonce from a file through its own shell tool and reports it.

For each client the suite lists (:mod:`servectl.bench.qualify.clients` has the adapters), the gate writes a
fresh nonce into a file in a throwaway folder, configures the client in a throwaway home (base URL, model,
the key's variable; ``HOME`` and ``TMPDIR`` point into that folder, removed afterwards), and runs it once,
non-interactively, asking it to ``cat`` the file with its shell tool and answer with what it printed. A case
passes when the nonce comes back in the client's output and, when the run goes through the gateway, the
gateway counted the client's requests on the alias. A client that is not installed is not run: its case says
``skipped`` with the install command and never counts as passed. A client still running at ``timeout_s`` is
killed (its whole process group) and fails; the end of its output is kept in the evidence either way.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from servectl.bench.qualify.client import NO_KEY
from servectl.bench.qualify.clients import ADAPTERS, KEY_ENV, ClientAdapter, ClientEndpoint
from servectl.bench.qualify.gates.common import GateRun, clip
from servectl.bench.qualify.model import CaseResult, GateResult
from servectl.bench.qualify.suite import ClientsGate
from servectl.files import write_atomic

GATE = "clients"
#: Characters of a client's output kept in the evidence (the end of it).
OUTPUT_TAIL_CHARS = 4000
_PASSED_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS")

PROMPT = (
    "Use your shell tool to run `cat {path}` and reply with exactly what it prints (a nonce), nothing else. "
    "Do not guess: the nonce is random."
)


def run_client(
    adapter: ClientAdapter,
    executable: str,
    endpoint: ClientEndpoint,
    *,
    api_key: str,
    timeout_s: float,
    environ: Mapping[str, str],
) -> tuple[bool, str, dict[str, object]]:
    """Run one client against ``endpoint``: ``(nonce came back, message, detail)``."""
    # under the caller's TMPDIR (the throwaway folder becomes the client's own TMPDIR)
    with tempfile.TemporaryDirectory(prefix=f"servectl-client-{adapter.name}-", dir=environ.get("TMPDIR")) as tmp:
        home, work, scratch = Path(tmp) / "home", Path(tmp) / "work", Path(tmp) / "tmp"
        work.mkdir()
        scratch.mkdir()
        nonce = f"nonce-{secrets.token_hex(8)}"
        nonce_file = work / "nonce.txt"
        write_atomic(nonce_file, (nonce + "\n").encode("utf-8"))
        env = {k: environ[k] for k in _PASSED_ENV if k in environ}
        # HOME and TMPDIR in the throwaway folder: what a client leaves behind goes with it
        env |= {"HOME": str(home), "TMPDIR": str(scratch), "TERM": "dumb", "NO_COLOR": "1", "CI": "1", KEY_ENV: api_key}
        env |= adapter.configure(home, endpoint)
        argv = adapter.argv(executable, PROMPT.format(path=nonce_file), endpoint, home)
        started = time.perf_counter()
        output, exit_code, hung = _run(argv, cwd=work, env=env, timeout_s=timeout_s)
        seconds = time.perf_counter() - started
    if api_key and api_key != NO_KEY:
        output = output.replace(api_key, "***")
    tail = output[-OUTPUT_TAIL_CHARS:]
    detail: dict[str, object] = {"exit_code": exit_code, "seconds": round(seconds, 2), "output_tail": tail}
    if hung:
        return False, f"still running after {timeout_s:g} s; killed: {clip(tail, 100)!r}", detail
    if nonce in output:
        return True, f"read the nonce through its shell tool in {seconds:.1f} s", detail
    return False, f"the nonce did not come back (exit code {exit_code}): {clip(tail, 100)!r}", detail


def _run(argv: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float) -> tuple[str, int | None, bool]:
    """Run ``argv`` in its own process group; kill the whole group at ``timeout_s``."""
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as err:
        return f"cannot start {argv[0]}: {err.strerror or err}", None, False
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        return out.decode("utf-8", "replace"), proc.returncode, False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return out.decode("utf-8", "replace"), None, True


def run(run: GateRun, spec: ClientsGate) -> GateResult:
    """Each client of ``spec.clients``, one after the other."""
    env = run.environ
    context = run.max_model_len or run.facts.context_length  # a gateway's /v1/models may not report it
    endpoint = ClientEndpoint(url=run.client.url, model=run.client.model, context_length=context)
    key = run.client.api_key.reveal() if run.client.api_key is not None else NO_KEY
    cases, missing = [], []
    for index, name in enumerate(spec.clients):
        adapter = ADAPTERS[name]
        case = f"clients {name}"
        executable = adapter.find(env)
        if executable is None:
            missing.append(name)
            message = f"{case}: skipped: {adapter.executable} is not installed; install it: {adapter.install}"
            result = CaseResult(case, False, message, None, {"skipped": True, "install": adapter.install})
        else:
            seen_before = run.route.requests_seen(run.http) if run.route is not None else 0
            ok, message, detail = run_client(adapter, executable, endpoint, api_key=key, timeout_s=spec.timeout_s,
                                             environ=env)  # fmt: skip
            if ok and run.route is not None:
                seen = run.route.requests_seen(run.http) - seen_before
                detail["gateway_requests"] = seen
                if seen < 1:
                    ok, message = False, f"the nonce came back, but the gateway counted no request on {run.route}"
            detail["executable"] = executable
            result = CaseResult(case, ok, f"{case}: {message}", detail.get("seconds"), detail)  # type: ignore[arg-type]
        cases.append(result)
        run.report(GATE, index + 1, len(spec.clients), result)
    note = f"not installed (skipped, never passed): {', '.join(missing)}" if missing else ""
    if missing and all(c.ok for c in cases if not c.detail.get("skipped")):
        return GateResult(gate=GATE, verdict="skipped", cases=tuple(cases), note=note)
    return GateResult.of(GATE, cases, note=note)
