"""status --watch and logs -f: the startup phase read from the log, each card's use, the rendered view."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator

from rich.console import Console

from servectl.cli.views.runtime import watch_renderable
from servectl.service.services import ServiceInfo
from servectl.service.watch import phase_text, phases_with_lines, watch_view
from servectl.testing.fakes import FakeGpuInventory, make_device

LOADING = [
    "[2026-12-01 10:00:00] server_args=ServerArgs(...)",
    "[2026-12-01 10:00:05 TP0] Load weight begin. avail mem=94.10 GB",
    "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:30<00:30]",
]
GRAPHS = ["[2026-12-01 10:01:00 TP0] KV Cache is allocated. #tokens: 393216", "Capture cuda graph begin."]


def _service(profile: str, state: str, container_id: str) -> ServiceInfo:
    return ServiceInfo(  # type: ignore[call-arg]
        container_id=container_id,
        container_name=f"servectl-{profile}",
        profile=profile,
        plan_hash="0123456789abcdef",
        state=state,
        exit_code=None,
        oom_killed=False,
        host="127.0.0.1",
        port=8180,
        gpus=(0, 1),
        started_at=1.0,
        uptime_s=42.0,
        stop_grace_s=5,
        drift=False,
    )


class _Lines:
    def __init__(self, lines: list[str]) -> None:
        self._it: Iterator[str] = iter(lines)
        self.closed = False

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        return next(self._it)

    def close(self) -> None:
        self.closed = True


class _Docker:
    def __init__(self, logs: dict[str, list[str]]) -> None:
        self.logs_by_id = logs
        self.asked: list[tuple[str, int | None]] = []

    def logs(self, container_id: str, *, follow: bool, tail: int | None = None, since: float | None = None) -> _Lines:
        assert not follow
        self.asked.append((container_id, tail))
        return _Lines(self.logs_by_id[container_id])


def test_phase_text_follows_the_log_as_the_health_gate_reads_it() -> None:
    assert phase_text([]) == "starting"
    assert phase_text(LOADING) == "loading weights 50%"
    assert phase_text(LOADING + GRAPHS) == "capturing CUDA graphs"


def test_logs_follow_announces_each_phase_change_once() -> None:
    changes = [phase for _, phase in phases_with_lines(LOADING + GRAPHS) if phase]
    assert changes == ["loading weights", "loading weights 50%", "KV cache allocated", "capturing CUDA graphs"]


def test_watch_view_reads_the_log_of_starting_services_only_and_the_cards() -> None:
    docker = _Docker({"c-start": LOADING})
    found = [_service("glm53-393k", "starting", "c-start"), _service("demo", "ready", "c-ready")]
    card = make_device(0)
    gpus = FakeGpuInventory.of(card)
    view = watch_view(docker=docker, gpus=gpus, list_services=lambda: found, clock=lambda: 0.0)  # type: ignore[arg-type]
    assert view.phases == {"c-start": "loading weights 50%"}
    assert [asked for asked, _ in docker.asked] == ["c-start"]
    assert [c.index for c in view.cards] == [0] and view.cards_problem is None
    no_driver = watch_view(
        docker=docker,  # type: ignore[arg-type]
        gpus=FakeGpuInventory.scenario("no_driver"),
        list_services=lambda: [],
        clock=time.time,
    )
    assert no_driver.cards == [] and no_driver.cards_problem


def test_watch_renders_phase_and_card_use_within_80_columns() -> None:
    docker = _Docker({"c-start": LOADING})
    found = [_service("glm53-524k-bringup", "starting", "c-start")]
    view = watch_view(
        docker=docker,  # type: ignore[arg-type]
        gpus=FakeGpuInventory.of(make_device(0), make_device(1)),
        list_services=lambda: found,
        clock=lambda: 0.0,
    )
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(watch_renderable(view, width=80))
    text = out.getvalue()
    assert "starting: loading weights 50%" in text and "glm53-524k-bringup" in text
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "GiB" in text and "UTIL" in text
