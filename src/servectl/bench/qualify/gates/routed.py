"""Routed identity: the model answering through the endpoint is exactly the one asked for, and keys matter.

Cases (a routed run: ``--via-gateway``, or ``--url`` with a key):

* ``models``: ``/v1/models`` (with the key) lists the name asked for.
* ``answer``: a chat answers, and its ``model`` is exactly the expected name (the alias, or the served name
  when the gateway passes it through; ``--model`` on a bare URL): no other model answered.
* ``engine`` (through the gateway): the gateway's own status says the alias's first profile serves it (not a
  fallback profile), and that profile's service lists exactly its served name with ``max_model_len`` equal
  to the declared context length.
* ``record`` (through the gateway): the gateway's request counter for the alias grew by the requests sent.
* ``wrong key`` / ``missing key``: a chat with a random key, and one with none, are refused with 401 or 403.

Without a key the endpoint is not authenticated: the gate fails and says so. A run that is neither routed
nor keyed skips the gate.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from servectl.bench.qualify.gates.common import GateRun, clip
from servectl.bench.qualify.model import CaseResult, GateResult
from servectl.bench.qualify.routed import RouteTarget
from servectl.bench.qualify.suite import RoutedGate

if TYPE_CHECKING:
    import httpx

GATE = "routed"
REFUSED = (401, 403)


def _post_status(http: httpx.Client, url: str, model: str, key: str | None) -> tuple[int | None, str]:
    import httpx

    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    body = {"model": model, "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 4}
    try:
        response = http.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=30)
    except httpx.HTTPError as err:
        return None, f"{type(err).__name__}: {err}"
    return response.status_code, clip(response.text, 80)


def _key_cases(run: GateRun) -> list[CaseResult]:
    cases = []
    for case, key in (("routed wrong key", f"servectl-wrong-{secrets.token_hex(8)}"), ("routed missing key", None)):
        status, text = _post_status(run.http, run.client.url, run.client.model, key)
        ok = status in REFUSED
        what = "refused" if ok else "NOT refused"
        cases.append(CaseResult(case, ok, f"{case}: {what} (HTTP {status}: {text})", None, {"status": status}))
    return cases


def _engine_case(http: httpx.Client, target: RouteTarget) -> CaseResult:
    case = "routed engine"
    status = target.status() if target.status is not None else None
    if status is None:
        return CaseResult(case, False, f"{case}: the gateway's status cannot be read (is it running on this host?)")
    serving = ((status.get("aliases") or {}).get(target.alias) or {}).get("profile")
    if target.profile is not None and serving != target.profile:
        message = f"{case}: alias {target.alias!r} is served by {serving!r}, not its first profile {target.profile!r}"
        return CaseResult(case, False, message + " (a fallback answered)", None, {"profile": serving})
    detail: dict[str, Any] = {"profile": serving}
    if target.engine_url is not None and target.served_name is not None:
        problem = _engine_models_problem(http, target, detail)
        if problem:
            return CaseResult(case, False, f"{case}: {problem}", None, detail)
    return CaseResult(case, True, f"{case}: {serving} serves {target.alias!r} as {target.served_name}", None, detail)


def _engine_models_problem(http: httpx.Client, target: RouteTarget, detail: dict[str, Any]) -> str | None:
    import httpx

    headers = {"Authorization": f"Bearer {target.engine_key}"} if target.engine_key else {}
    try:
        data = http.get(f"{target.engine_url}/v1/models", headers=headers, timeout=10).json().get("data") or []
    except (httpx.HTTPError, ValueError) as err:
        return f"cannot list the engine's models at {target.engine_url}: {err}"
    names = [str(m.get("id")) for m in data]
    detail["engine_models"] = names
    if names != [target.served_name]:
        return f"the engine at {target.engine_url} serves {names}, not exactly [{target.served_name!r}]"
    length = data[0].get("max_model_len")
    detail["max_model_len"] = length
    if target.context_length is not None and length != target.context_length:
        return f"the engine's max_model_len is {length}, not the declared context length {target.context_length}"
    return None


def run(run: GateRun, spec: RoutedGate, target: RouteTarget | None) -> GateResult:
    """The routed cases, or a skip when the run is neither routed nor keyed."""
    keyed = run.client.api_key is not None
    if target is None and not keyed:
        note = "not routed: run with --via-gateway, or --url of the gateway with --api-key-env"
        return GateResult(gate=GATE, verdict="skipped", note=note)
    before = target.requests_seen(run.http) if target is not None and target.metrics_url else 0
    expected = target.answer_model if target is not None else run.client.model
    names = [name for name, _ in run.client.list_models()]
    cases = [
        CaseResult(
            "routed models",
            expected in names or (target is not None and target.alias in names),
            f"routed models: /v1/models lists {names}",
        )
    ]
    exchange = run.client.chat([{"role": "user", "content": "Say OK."}], max_tokens=spec.max_tokens)
    sent = 1
    if not exchange.ok:
        cases.append(CaseResult("routed answer", False, f"routed answer: {exchange.error}", exchange.latency_s))
    else:
        ok = exchange.model == expected
        message = f"routed answer: model {exchange.model!r}" + ("" if ok else f", expected exactly {expected!r}")
        cases.append(CaseResult("routed answer", ok, message, exchange.latency_s, {"model": exchange.model}))
    if target is not None and target.status is not None:
        cases.append(_engine_case(run.http, target))
    if target is not None and target.metrics_url:
        seen = target.requests_seen(run.http) - before
        ok = seen >= sent
        message = f"routed record: the gateway counted {seen} request(s) on alias {target.alias!r}, sent {sent}+"
        cases.append(CaseResult("routed record", ok, message, None, {"counted": seen}))
    if keyed:
        cases += _key_cases(run)
    else:
        cases.append(CaseResult("routed key", False, "routed key: no key was given: the endpoint is not authenticated"))
    for index, case in enumerate(cases):
        run.report(GATE, index + 1, len(cases), case)
    return GateResult.of(GATE, cases)
