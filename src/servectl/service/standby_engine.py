"""A warm standby's engine over HTTP: SGLang's memory-saver routes, its own load, its chat answers.

Each call is sent once (:meth:`EngineClient.call`): an answer that does not come is :class:`EngineGone`, never a
reason to send it again (a second release, or a resume of what was not released, kills SGLang's server). Paths,
body and the load's keys come from SGLang's source through :mod:`servectl.profile.memory_saver`. The requests go
through the context's HTTP adapter and the waits through its clocks (:meth:`EngineClient.of`), so a fake engine's
transport and a fake clock drive it in tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from servectl.errors import ServectlError
from servectl.profile.memory_saver import load_memory_saver
from servectl.service.fingerprint import PROMPTS, Fingerprint, request_body, sample_of

if TYPE_CHECKING:
    import httpx

    from servectl.adapters.http import HttpAdapter
    from servectl.plan.compile import LaunchPlan
    from servectl.service.transaction.context import TxContext

#: What a swap away releases (SGLang's tags; CUDA graphs stay: small, and capturing them again costs).
RELEASE_TAGS = ("weights", "kv_cache")
#: How long a release waits for the engine's own load (``GET /v1/loads``) to show no request before it gives up:
#: SGLang's scheduler asserts it is idle and dies otherwise, whoever sent the requests (the gateway's drain
#: covers only its own clients, not those on the engine's port).
IDLE_WAIT_S = 30.0
IDLE_POLL_S = 0.2
ANSWER_DEADLINE_S = 60.0
ANSWER_POLL_S = 0.2


@dataclass(frozen=True)
class EngineClient:
    """One engine's HTTP side: its URL and key, the context's HTTP adapter (a client per call) and the pause
    between polls (the context's clocks)."""

    url: str
    headers: Mapping[str, str]
    http: HttpAdapter
    sleep: Callable[[float], None]
    admin_key: str | None = None

    @classmethod
    def of(cls, plan: LaunchPlan, tx: TxContext) -> EngineClient:
        """The engine of ``plan``, reached through ``ctx``'s HTTP adapter and clocks, with its API key."""
        from servectl.service.host_files import read_admin_key, read_api_key

        key = read_api_key(plan, tx.ctx.environ)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return cls(plan.url, headers, tx.ctx.http, tx.ctx.clocks.sleep, read_admin_key(plan, tx.ctx.environ))

    def _headers_for(self, which: str) -> Mapping[str, str]:
        """The memory saver's route ``which``: SGLang marks it ``ADMIN_OPTIONAL`` (the catalog's ``auth``), so with
        ``--admin-api-key`` only that key opens it, the API key does not (sglang/srt/utils/auth.py
        decide_request_auth)."""
        auth = load_memory_saver()["endpoints"][which].get("auth") or {}
        if self.admin_key and auth.get("level") == "admin_optional":
            return {"Authorization": f"Bearer {self.admin_key}"}
        return self.headers

    def _send(
        self,
        method: str,
        path: str,
        *,
        timeout_s: float,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        kwargs: dict[str, Any] = {"headers": dict(self.headers if headers is None else headers), "timeout": timeout_s}
        if json is not None:
            kwargs["json"] = json
        if params is not None:
            kwargs["params"] = dict(params)
        with self.http.client(self.url) as client:
            return client.request(method, self.url + path, **kwargs)

    def call(self, which: str, profile: str, timeout_s: float) -> None:
        """``POST`` the memory saver's ``release``/``resume`` route once; a refusal is one line naming it.

        Sent once, never again: an answer that does not come means the server may have acted (or died, as
        SGLang's scheduler does on a release it cannot take), and a second release or a resume of what was
        not released kills it. The caller's undo decides from the journal and the container what is left.

        Raises:
            EngineGone: no answer (the connection failed or closed): the server may be dead.
            ServectlError: an answer other than 200.
        """
        import httpx

        path = str(load_memory_saver()["endpoints"][which]["path"])
        try:
            response = self._send(
                "POST", path, json={"tags": list(RELEASE_TAGS)}, timeout_s=timeout_s, headers=self._headers_for(which)
            )
        except httpx.HTTPError as err:
            raise EngineGone(f"{profile}: POST {path} got no answer ({err}); not sent again") from err
        if response.status_code != 200:
            raise ServectlError(f"{profile}: POST {path} answered {response.status_code}: {_message(response)}")

    def running(self, profile: str) -> int:
        """The requests the engine is running or holds waiting, by its own load (``GET /v1/loads``).

        Raises:
            ServectlError: the load cannot be read (then whether a release would kill it is unknown).
        """
        import httpx

        load = load_memory_saver()["load"]
        path = str(load["path"])
        try:
            response = self._send("GET", path, params=dict(load["query"]), timeout_s=10.0)
            ranks = response.json()[str(load["list"])] if response.status_code == 200 else None
            if ranks is None:
                raise ServectlError(
                    f"{profile}: GET {path} answered {response.status_code}: {_message(response)}; cannot tell "
                    "whether it is idle, and SGLang kills a server released while busy"
                )
            return sum(int(r[str(load["running"])]) + int(r[str(load["waiting"])]) for r in ranks)
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as err:
            raise ServectlError(f"{profile}: GET {path} failed: {err}; cannot tell whether it is idle") from err

    def wait_idle(self, profile: str, tx: TxContext) -> None:
        """Wait (:data:`IDLE_WAIT_S` at most) until the engine runs and holds no request.

        Raises:
            ServectlError: still busy at the deadline (nothing was released).
        """
        until = tx.ctx.clocks.monotonic() + IDLE_WAIT_S
        while True:
            busy = self.running(profile)
            if busy == 0:
                return
            if tx.ctx.clocks.monotonic() >= until:
                rule = load_memory_saver()["release_requires_idle"]
                raise ServectlError(
                    f"{profile} still serves {busy} request(s) on {self.url} after {IDLE_WAIT_S:g} s (GET "
                    f"{load_memory_saver()['load']['path']}); a release now would kill it (SGLang asserts an idle "
                    f"server, {rule['source']}): let them finish or stop the clients that call its port, then "
                    "swap again"
                )
            self.sleep(IDLE_POLL_S)

    def ask(self, body: Mapping[str, Any], profile: str, deadline_s: float, clock: Callable[[], float]) -> Any:
        """The engine's chat completion of ``body`` as JSON (503 while it warms up is waited out)."""
        import httpx

        until = clock() + deadline_s
        while True:
            try:
                response = self._send("POST", "/v1/chat/completions", json=dict(body), timeout_s=60.0)
                if response.status_code == 200:
                    return response.json()
                problem = f"answered {response.status_code}: {_message(response)}"
            except (httpx.HTTPError, ValueError) as err:
                problem = f"failed: {err}"
            if clock() >= until or "answered 4" in problem:
                raise ServectlError(f"{profile}: the gate's chat completion {problem}")
            self.sleep(ANSWER_POLL_S)

    def fingerprint(self, profile: str, clock: Callable[[], float]) -> Fingerprint:
        """The engine's answers to the fingerprint's prompts (:mod:`servectl.service.fingerprint`)."""
        samples = []
        for prompt in PROMPTS:
            answer = self.ask(request_body(prompt), profile, ANSWER_DEADLINE_S, clock)
            try:
                samples.append(sample_of(prompt, answer))
            except (KeyError, IndexError, TypeError, ValueError) as err:
                raise ServectlError(f"{profile}: the fingerprint's chat completion is not one: {err}") from err
        return Fingerprint(tuple(samples))


class EngineGone(ServectlError):
    """A release or resume got no answer: the engine may have died on it (SGLang's scheduler does)."""


def _message(response: Any) -> str:
    try:
        body = response.json()
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:200]
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])[:200]
    except ValueError:
        pass
    return str(response.text)[:200]


__all__ = ["ANSWER_DEADLINE_S", "IDLE_WAIT_S", "RELEASE_TAGS", "EngineClient", "EngineGone"]
