"""One qualification run's shared state (:class:`GateRun`) for the gate tests: a client and the facts the test
is about, the rest as a run without a host would have it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from servectl.bench.qualify.gates.common import GateRun
from servectl.bench.qualify.model import ServiceFacts


def gate_run(
    client: Any,
    *,
    facts: ServiceFacts | None = None,
    max_model_len: int | None = None,
    environ: Mapping[str, str] | None = None,
    code_sandbox: Any = None,
    http: httpx.Client | None = None,
) -> GateRun:
    """A run of id ``r``, seed 0, no progress; ``http`` a plain client unless the test scripts one."""
    return GateRun(
        client=client,
        facts=ServiceFacts() if facts is None else facts,
        run_id="r",
        max_model_len=max_model_len,
        seed=0,
        environ={} if environ is None else environ,
        code_sandbox=code_sandbox,
        http=httpx.Client() if http is None else http,
    )
