"""One transaction resolves each profile once (issue 40): a swap loaded and compiled the profile it replaced up
to three times (the journal's snapshot, the gateway hold's expected downtime and the release's warm check each
asked for it again), so a profile file edited meanwhile could give one swap two plans of one profile.

The count is taken where every resolution goes through (:func:`servectl.plan.resolve.resolve`), on a
:class:`~servectl.testing.FakeHost`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import servectl.plan.resolve as plan_resolve
from servectl.standin.process import free_port
from servectl.testing import FakeHost
from servectl.testing.docker import write_test_profile


@pytest.fixture
def resolutions(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Profile name -> how many times it was resolved (loaded, validated and compiled) since the fixture."""
    counts: Counter[str] = Counter()
    real = plan_resolve.resolve

    def counting(name: str, **kwargs: Any) -> plan_resolve.Resolved:
        counts[name] += 1
        return real(name, **kwargs)

    monkeypatch.setattr(plan_resolve, "resolve", counting)
    return counts


def _host(tmp_path: Path) -> Iterator[FakeHost]:
    folder, home = tmp_path / "profiles", tmp_path / "home"
    port = free_port()  # both on one port: each replaces the other
    write_test_profile(folder, "a", port=port)
    b = write_test_profile(folder, "b", port=port)
    b.write_text(b.read_text(encoding="utf-8") + "rollback: a\n", encoding="utf-8")
    environ = {"HOME": str(tmp_path), "SERVECTL_HOME": str(home), "SERVECTL_PROFILES": str(folder)}
    with FakeHost(state_dir=home, environ=environ) as host:
        yield host


def test_a_swap_resolves_the_target_and_the_replaced_profile_once_each(
    tmp_path: Path, resolutions: Counter[str]
) -> None:
    for host in _host(tmp_path):
        host.up(name="a")
        resolutions.clear()
        result = host.swap(name="b", stage=False)
        assert (result.outcome, result.from_profile) == ("swapped", "a")
        assert dict(resolutions) == {"a": 1, "b": 1}


def test_a_rollback_resolves_the_profile_it_goes_back_to_once(tmp_path: Path, resolutions: Counter[str]) -> None:
    """``rollback``'s note on a changed profile file reads the plan the swap itself starts."""
    for host in _host(tmp_path):
        host.up(name="a")
        host.swap(name="b", stage=False)
        resolutions.clear()
        result = host.rollback(stage=False)  # the history: a ran before b
        assert (result.from_profile, result.to_profile) == ("b", "a")
        assert dict(resolutions) == {"a": 1, "b": 1}


def test_a_rollback_without_a_name_resolves_the_running_profile_once(tmp_path: Path, resolutions: Counter[str]) -> None:
    """``swap`` with no target reads the running profile's ``rollback:``: that resolution serves the whole swap."""
    for host in _host(tmp_path):
        host.up(name="b")
        resolutions.clear()
        result = host.swap(stage=False)  # b's rollback: a
        assert (result.from_profile, result.to_profile) == ("b", "a")
        assert dict(resolutions) == {"a": 1, "b": 1}


def test_up_resolves_its_profile_once(tmp_path: Path, resolutions: Counter[str]) -> None:
    for host in _host(tmp_path):
        assert host.up(name="a").action == "started"
        assert dict(resolutions) == {"a": 1}


def _warm_host(tmp_path: Path) -> Iterator[FakeHost]:
    """``a`` a warm standby (``swap.standby: warm``), ``b`` not; each on its own port, both on the fake card 0
    (its container label), so a swap between them replaces one by the other and ``a`` is released, not stopped."""
    folder, home = tmp_path / "profiles", tmp_path / "home"
    on_card_0 = {"labels": {"servectl.gpus": "0"}}
    write_test_profile(folder, "a", port=free_port(), swap={"standby": "warm"}, container=on_card_0)
    write_test_profile(folder, "b", port=free_port(), container=on_card_0)
    environ = {"HOME": str(tmp_path), "SERVECTL_HOME": str(home), "SERVECTL_PROFILES": str(folder)}
    with FakeHost(state_dir=home, environ=environ) as host:
        yield host


def test_a_warm_swap_resolves_each_profile_once_away_and_back(tmp_path: Path, resolutions: Counter[str]) -> None:
    """Away from a warm ``a``: the snapshot, the hold's expected downtime (the last release), the warm check and
    the release itself read one plan of ``a``; back to it: the resume of ``a`` on standby reads one plan too.
    The fake engine answers SGLang's memory-saver routes as the stand-in does (``servectl.testing.memory_saver``)."""
    for host in _warm_host(tmp_path):
        host.up(name="a")
        resolutions.clear()
        away = host.swap(name="b", stage=False)
        assert (away.outcome, away.from_profile, away.to_profile) == ("swapped", "a", "b"), away.message
        assert dict(resolutions) == {"a": 1, "b": 1}
        assert [e["event"] for e in host.ctx.history.events() if e["event"] == "standby"] == ["standby"]  # released
        assert {s.profile: s.state for s in host.status().services} == {"a": "standby", "b": "ready"}
        resolutions.clear()
        back = host.swap(name="a", stage=False)
        assert (back.outcome, back.from_profile, back.to_profile) == ("swapped", "b", "a"), back.message
        assert back.target_resumed  # resumed from standby, not started again
        assert dict(resolutions) == {"a": 1, "b": 1}
        assert {s.profile: s.state for s in host.status().services} == {"a": "ready"}
