"""The gateway's counters, as Prometheus text (``GET /metrics``): per alias requests, errors by class,
in flight, time to first byte, tokens out (from ``usage``), held requests; swap holds and their length;
per key (labelled by the key's NAME, never the key) requests by status, tokens out, and the budget used in
its current period against its limit; requests by API family."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable

#: Seconds; time to first byte spans a cached answer (ms) to a long prefill (minutes).
TTFB_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
HOLD_BUCKETS = (0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
ERROR_CLASSES = (
    "auth",  # 401: no key, unknown key, expired key
    "forbidden",  # 403: the key does not grant the alias
    "rate",  # 429: over the key's rate limit
    "budget",  # 429: the key used its budget for the period
    "unknown_alias",  # 404
    "bad_request",  # 400: not JSON, no model
    "too_large",  # 413
    "timeout",  # 408: the body did not arrive in time
    "unavailable",  # 503: nothing runs the alias, or held past hold_s
    "upstream",  # 502: the engine failed or went away
    "cut",  # a drain timed out and cut the request
    "client_gone",  # the client left before the answer ended
)


class _Histogram:
    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value

    def lines(self, name: str, labels: str) -> list[str]:
        out, running = [], 0
        sep = "," if labels else ""
        for bound, count in zip((*self.buckets, float("inf")), self.counts, strict=True):
            running += count
            le = "+Inf" if bound == float("inf") else f"{bound:g}"
            out.append(f'{name}_bucket{{{labels}{sep}le="{le}"}} {running}')
        out.append(f"{name}_sum{{{labels}}} {self.total:.6f}")
        out.append(f"{name}_count{{{labels}}} {running}")
        return out


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Counters kept by the proxy; :meth:`render` writes them out."""

    def __init__(self) -> None:
        self.requests: defaultdict[tuple[str, int], int] = defaultdict(int)
        self.errors: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.tokens_out: defaultdict[str, int] = defaultdict(int)
        self.ttfb: dict[str, _Histogram] = {}
        self.held: dict[str, _Histogram] = {}
        self.swap_events: defaultdict[str, int] = defaultdict(int)
        self.hold_length = _Histogram(HOLD_BUCKETS)
        self.key_requests: defaultdict[tuple[str, int], int] = defaultdict(int)
        self.key_tokens: defaultdict[str, int] = defaultdict(int)
        self.family_requests: defaultdict[tuple[str, int], int] = defaultdict(int)

    def key_request(self, name: str, status: int) -> None:
        self.key_requests[(name, status)] += 1

    def family_request(self, family: str, status: int) -> None:
        self.family_requests[(family, status)] += 1

    def request(self, alias: str, status: int) -> None:
        self.requests[(alias, status)] += 1

    def error(self, alias: str, kind: str) -> None:
        self.errors[(alias, kind)] += 1

    def first_byte(self, alias: str, seconds: float) -> None:
        self.ttfb.setdefault(alias, _Histogram(TTFB_BUCKETS)).observe(seconds)

    def waited(self, alias: str, seconds: float) -> None:
        self.held.setdefault(alias, _Histogram(HOLD_BUCKETS)).observe(seconds)

    def swap_event(self, kind: str, seconds: float | None = None) -> None:
        self.swap_events[kind] += 1
        if seconds is not None:
            self.hold_length.observe(seconds)

    def render(
        self, in_flight: Callable[[], dict[str, int]], budgets: Callable[[], list[tuple[str, int, int]]] = list
    ) -> str:
        """The Prometheus text; ``budgets`` gives ``(key name, used this period, limit)`` per key with a budget."""
        out = self._alias_lines(in_flight)
        out += [
            "# HELP servectl_gateway_family_requests_total Requests answered, by API family (openai, anthropic, "
            "ollama) and HTTP status.",
            "# TYPE servectl_gateway_family_requests_total counter",
        ]
        out += [
            f'servectl_gateway_family_requests_total{{family="{f}",code="{c}"}} {n}'
            for (f, c), n in sorted(self.family_requests.items())
        ]
        out += [
            "# HELP servectl_gateway_key_requests_total Requests made with each key, by key name and HTTP status.",
            "# TYPE servectl_gateway_key_requests_total counter",
        ]
        out += [
            f'servectl_gateway_key_requests_total{{key="{_label(k)}",code="{c}"}} {n}'
            for (k, c), n in sorted(self.key_requests.items())
        ]
        out += [
            "# HELP servectl_gateway_key_tokens_out_total Completion tokens answered to each key, by key name.",
            "# TYPE servectl_gateway_key_tokens_out_total counter",
        ]
        out += [
            f'servectl_gateway_key_tokens_out_total{{key="{_label(k)}"}} {n}'
            for k, n in sorted(self.key_tokens.items())
        ]
        rows = budgets()
        out += [
            "# HELP servectl_gateway_key_budget_used Requests counted against each key's budget this period.",
            "# TYPE servectl_gateway_key_budget_used gauge",
        ]
        out += [f'servectl_gateway_key_budget_used{{key="{_label(k)}"}} {used}' for k, used, _ in rows]
        out += [
            "# HELP servectl_gateway_key_budget_limit Each key's budget of requests per period.",
            "# TYPE servectl_gateway_key_budget_limit gauge",
        ]
        out += [f'servectl_gateway_key_budget_limit{{key="{_label(k)}"}} {limit}' for k, _, limit in rows]
        return "\n".join(out) + "\n"

    def _alias_lines(self, in_flight: Callable[[], dict[str, int]]) -> list[str]:
        out = [
            "# HELP servectl_gateway_requests_total Requests answered, by alias and HTTP status.",
            "# TYPE servectl_gateway_requests_total counter",
        ]
        out += [
            f'servectl_gateway_requests_total{{alias="{_label(a)}",code="{c}"}} {n}'
            for (a, c), n in sorted(self.requests.items())
        ]
        out += [
            "# HELP servectl_gateway_errors_total Failed requests, by alias and class.",
            "# TYPE servectl_gateway_errors_total counter",
        ]
        out += [
            f'servectl_gateway_errors_total{{alias="{_label(a)}",class="{k}"}} {n}'
            for (a, k), n in sorted(self.errors.items())
        ]
        out += [
            "# HELP servectl_gateway_in_flight Requests being proxied now, by alias.",
            "# TYPE servectl_gateway_in_flight gauge",
        ]
        out += [f'servectl_gateway_in_flight{{alias="{_label(a)}"}} {n}' for a, n in sorted(in_flight().items())]
        out += [
            "# HELP servectl_gateway_tokens_out_total Completion tokens the engines reported in usage, by alias.",
            "# TYPE servectl_gateway_tokens_out_total counter",
        ]
        out += [
            f'servectl_gateway_tokens_out_total{{alias="{_label(a)}"}} {n}' for a, n in sorted(self.tokens_out.items())
        ]
        out += [
            "# HELP servectl_gateway_ttfb_seconds Time from the request to the engine's first byte, by alias.",
            "# TYPE servectl_gateway_ttfb_seconds histogram",
        ]
        for alias, hist in sorted(self.ttfb.items()):
            out += hist.lines("servectl_gateway_ttfb_seconds", f'alias="{_label(alias)}"')
        out += [
            "# HELP servectl_gateway_held_seconds Time requests waited for a swap, by alias.",
            "# TYPE servectl_gateway_held_seconds histogram",
        ]
        for alias, hist in sorted(self.held.items()):
            out += hist.lines("servectl_gateway_held_seconds", f'alias="{_label(alias)}"')
        out += [
            "# HELP servectl_gateway_swap_events_total Holds started and ended by servectl swap/up/down/rollback.",
            "# TYPE servectl_gateway_swap_events_total counter",
        ]
        out += [f'servectl_gateway_swap_events_total{{event="{k}"}} {n}' for k, n in sorted(self.swap_events.items())]
        out += [
            "# HELP servectl_gateway_hold_seconds How long each hold (one swap, up, down) lasted.",
            "# TYPE servectl_gateway_hold_seconds histogram",
        ]
        out += self.hold_length.lines("servectl_gateway_hold_seconds", "")
        return out
