"""The anti-thrash rule of swap on request (servectl.gateway.turns), on a fake clock."""

from __future__ import annotations

import pytest

from servectl.gateway.turns import SwapDecision, SwapTurns
from servectl.testing.swap import FakeClock


def _turns(min_loaded_s: float = 60.0, when_busy: str = "wait") -> tuple[SwapTurns, FakeClock]:
    clock = FakeClock()
    turns = SwapTurns(min_loaded_s=min_loaded_s, when_busy=when_busy, clock=clock)  # type: ignore[arg-type]
    turns.seen([])  # the gateway's first look: nothing runs
    return turns, clock


def test_a_service_stays_loaded_min_loaded_s_from_when_it_was_seen_ready() -> None:
    turns, clock = _turns(60)
    turns.seen(["a"])
    assert turns.decide("b", in_flight={}) == SwapDecision("wait", wait_s=60)
    clock.advance(59.5)
    turns.seen(["a"])  # seen again: still loaded since the first time
    assert turns.decide("b", in_flight={}) == SwapDecision("wait", wait_s=pytest.approx(0.5))
    clock.advance(0.5)
    assert turns.decide("b", in_flight={}) == SwapDecision("swap")


def test_nothing_running_or_a_service_found_running_at_the_first_look_is_no_reason_to_wait() -> None:
    turns, _ = _turns(60)
    assert turns.decide("a", in_flight={}) == SwapDecision("swap")  # nothing runs
    found = SwapTurns(min_loaded_s=60, clock=FakeClock())
    found.seen(["a"])  # the gateway started with a running: it cannot tell for how long it ran
    assert found.loaded_since("a") == float("-inf")
    assert found.decide("b", in_flight={}) == SwapDecision("swap")


def test_the_target_itself_and_min_loaded_zero_never_wait() -> None:
    turns, _ = _turns(60)
    turns.seen(["b"])  # b just became ready (e.g. a swap to it is being retried)
    assert turns.wait_s("b") == 0.0
    zero, _ = _turns(0)
    zero.seen(["a"])
    assert zero.decide("b", in_flight={"a": 3}) == SwapDecision("swap")


def test_once_the_time_is_up_the_swap_starts_while_the_loaded_alias_is_still_busy() -> None:
    turns, clock = _turns(10)
    turns.seen(["a"])
    for _ in range(9):  # the loaded alias keeps getting requests: they do not move its turn
        clock.advance(1)
        assert turns.decide("b", in_flight={"a": 4}).action == "wait"
    clock.advance(1)
    assert turns.decide("b", in_flight={"a": 4}) == SwapDecision("swap")  # the swap's hold drains a's 4


def test_when_busy_refuse_waits_out_min_loaded_then_refuses_while_a_request_is_in_flight() -> None:
    turns, clock = _turns(10, when_busy="refuse")
    turns.seen(["a", "c"])
    assert turns.decide("b", in_flight={"a": 2}).action == "wait"  # min_loaded first, then the busy rule
    clock.advance(10)
    assert turns.decide("b", in_flight={"a": 2, "c": 0, "b": 1}) == SwapDecision("refuse", busy=(("a", 2),))
    assert turns.decide("b", in_flight={"a": 0}) == SwapDecision("swap")  # drained: now


def test_a_failed_swap_counts_as_a_load_of_what_runs_after_it() -> None:
    turns, clock = _turns(30)
    turns.seen(["a"])
    clock.advance(31)
    assert turns.decide("broken", in_flight={}).action == "swap"
    clock.advance(5)  # the swap fails; a is rolled back (the gateway did not see it gone)
    turns.swap_failed("broken")
    assert turns.decide("broken", in_flight={}) == SwapDecision("wait", wait_s=30)  # not once per request
    clock.advance(30)
    assert turns.decide("broken", in_flight={}).action == "swap"


def test_a_service_seen_gone_and_back_starts_its_time_again() -> None:
    turns, clock = _turns(20)
    turns.seen(["a"])
    clock.advance(25)
    turns.seen([])  # stopped (a swap, servectl down)
    clock.advance(1)
    turns.seen(["a"])
    assert turns.wait_s("b") == 20


def _hammer(min_loaded_s: float, *, duration_s: float, load_s: float) -> tuple[int, dict[str, int], float]:
    """Two aliases (profiles a and b, one card) asked for every 0.1 s each, as the proxy handles them: the
    loaded alias is served, the other waits; one swap at a time, taking ``load_s``. Returns the swaps, the
    requests served by alias and the longest wait of a request."""
    turns, clock = _turns(min_loaded_s)
    t0 = clock.now
    loaded = "a"
    turns.seen([loaded])
    served = {"a": 0, "b": 0}
    waiting: list[tuple[str, float]] = []  # (profile, arrived) of the requests held for a swap
    swaps, longest = 0, 0.0
    while clock.now - t0 < duration_s:
        for profile in ("a", "b"):
            waiting.append((profile, clock.now))
        for profile, arrived in list(waiting):
            if profile == loaded:
                served[profile] += 1
                longest = max(longest, clock.now - arrived)
                waiting.remove((profile, arrived))
        pending = next((p for p, _ in waiting if p != loaded), None)  # the first asked goes first
        if pending is not None and turns.decide(pending, in_flight={loaded: 2}).action == "swap":
            swaps += 1
            turns.seen([])
            clock.advance(load_s)
            loaded = pending
            turns.seen([loaded])
            continue
        clock.advance(0.1)
    return swaps, served, longest


def test_two_aliases_hammered_at_once_swap_once_per_min_loaded_not_once_per_request() -> None:
    swaps, served, longest = _hammer(5.0, duration_s=60, load_s=2.0)
    assert 2 <= swaps <= 60 / 5 + 1
    assert served["a"] > 100 and served["b"] > 100  # both aliases served, neither starves
    assert longest <= 5.0 + 2.0 + 0.1 + 1e-9  # a held request waits at most one turn and one load


def test_without_the_rule_the_same_load_swaps_at_every_step() -> None:
    swaps, _, longest = _hammer(0.0, duration_s=60, load_s=2.0)
    assert swaps >= 60 / 2 - 1  # back and forth each time a load ends: the thrash the rule prevents
    assert longest <= 2.0 + 1e-9


def test_only_the_services_the_swap_replaces_count_for_its_turn() -> None:
    """Issue 39 (13): a service no alias names, started meanwhile on other cards, does not restart the clock."""
    turns, clock = _turns(10)
    turns.seen(["a"])
    clock.advance(9)
    turns.seen(["a", "unrelated"])  # started on other cards, 1 s before a's time is up
    assert turns.decide("b", in_flight={}, replaces={"a"}) == SwapDecision("wait", wait_s=pytest.approx(1))
    assert turns.decide("b", in_flight={}) == SwapDecision("wait", wait_s=pytest.approx(10))  # not known: all count
    clock.advance(1)
    assert turns.decide("b", in_flight={}, replaces={"a"}) == SwapDecision("swap")
    assert turns.decide("b", in_flight={}, replaces=set()) == SwapDecision("swap")


def test_when_busy_refuse_looks_only_at_the_services_the_swap_stops() -> None:
    turns, _ = _turns(0, when_busy="refuse")
    turns.seen(["a", "c"])
    assert turns.decide("b", in_flight={"c": 3}, replaces={"a"}) == SwapDecision("swap")
    assert turns.decide("b", in_flight={"a": 1, "c": 3}, replaces={"a"}) == SwapDecision("refuse", busy=(("a", 1),))
