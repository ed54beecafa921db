"""Staging a swap's target before the stop: image pin, argv in the image, weights read ahead (no Docker)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from servectl.adapters.docker import ImageInfo
from servectl.adapters.host import HostMemory, WeightFile, weight_files
from servectl.adapters.readahead import PROGRESS_EVERY_BYTES, read_ahead
from servectl.errors import PreflightFailed, ServectlError
from servectl.plan.resolve import Resolved, resolve
from servectl.service.health import Progress
from servectl.service.stage import MIN_HEADROOM_BYTES, headroom_bytes, stage_target
from servectl.testing.docker import FakeDockerEngine, probe_answer
from servectl.testing.fakes import FakeHostProbe

GIB = 2**30
MIB = 2**20
PINNED = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64


def write_weights(folder: Path, sizes: dict[str, int]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}', encoding="utf-8")
    for name, size in sizes.items():
        with open(folder / name, "wb") as handle:
            handle.truncate(size)  # sparse: reading it costs no disk


@pytest.fixture
def profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "profiles"
    folder.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SERVECTL_PROFILES", str(folder))
    monkeypatch.setenv("SERVECTL_HOME", str(tmp_path / "home"))
    write_weights(
        tmp_path / "model", {"model-00001-of-00002.safetensors": 3 * MIB, "model-00002-of-00002.safetensors": 2 * MIB}
    )
    return folder


def profile(folder: Path, name: str, image: str, *, digest: str | None = None, build: str | None = None) -> Resolved:
    lines = [
        f"name: {name}",
        "extends: demo",
        "image:",
        f"  ref: {image}",
        f"  build: {build or 'null'}",
        f"  digest: {digest or 'null'}",
        "model:",
        f"  path: {folder.parent / 'model'}",
        "container:",
        f"  name: stagetest-{name}",
    ]
    (folder / f"{name}.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return resolve(name, environ=os.environ)


def host(available: int = 64 * GIB, total: int = 128 * GIB) -> FakeHostProbe:
    return FakeHostProbe(host_memory=HostMemory(total_bytes=total, available_bytes=available))


# -- weight files and read-ahead -----------------------------------------------------------------------------
def test_weight_files_lists_the_weights_in_shard_order_and_leaves_out_hidden_and_other_files(tmp_path: Path) -> None:
    write_weights(tmp_path, {"b.safetensors": 10, "a.safetensors": 20, "tokenizer.json": 5, ".x.safetensors": 1})
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.bin").write_bytes(b"123")
    os.mkfifo(tmp_path / "pipe.safetensors")  # opening it would block: not a weight file
    found = weight_files(str(tmp_path))
    assert [(Path(f.path).relative_to(tmp_path).as_posix(), f.size_bytes) for f in found] == [
        ("a.safetensors", 20),
        ("b.safetensors", 10),
        ("sub/c.bin", 3),
    ]


def test_read_ahead_reads_every_byte_and_tells_progress_up_to_the_total(tmp_path: Path) -> None:
    write_weights(tmp_path, {"a.safetensors": PROGRESS_EVERY_BYTES + 5 * MIB, "b.safetensors": 3 * MIB})
    told: list[tuple[int, int]] = []
    ticks = iter([10.0, 12.5])
    done = read_ahead(
        weight_files(str(tmp_path)),
        budget_bytes=10 * GIB,
        on_progress=lambda d, t: told.append((d, t)),
        clock=lambda: next(ticks),
    )
    total = PROGRESS_EVERY_BYTES + 8 * MIB
    assert (done.files_read, done.files_total, done.bytes_read, done.bytes_total) == (2, 2, total, total)
    assert not done.bounded and done.seconds == 2.5
    assert told[-1] == (total, total)
    assert told[0][0] >= PROGRESS_EVERY_BYTES and [d for d, _ in told] == sorted(d for d, _ in told)


def test_read_ahead_stops_at_the_budget_inside_a_file(tmp_path: Path) -> None:
    write_weights(tmp_path, {"a.safetensors": 4 * MIB, "b.safetensors": 4 * MIB, "c.safetensors": 4 * MIB})
    done = read_ahead(weight_files(str(tmp_path)), budget_bytes=6 * MIB, clock=time.monotonic)
    assert (done.bytes_read, done.files_read, done.bytes_total) == (6 * MIB, 2, 12 * MIB)
    assert done.bounded


def test_read_ahead_of_a_file_that_vanished_names_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "gone.safetensors")
    with pytest.raises(ServectlError, match=r"reading .*gone\.safetensors ahead: .*--no-stage"):
        read_ahead([WeightFile(missing, 10)], budget_bytes=GIB, clock=time.monotonic)


def test_headroom_is_a_tenth_of_ram_and_at_least_two_gib() -> None:
    assert headroom_bytes(8 * GIB) == MIN_HEADROOM_BYTES == 2 * GIB
    assert headroom_bytes(256 * GIB) == int(25.6 * GIB)


# -- the staging step ----------------------------------------------------------------------------------------
def test_staging_a_standin_target_checks_its_image_and_reads_all_its_weights(profiles: Path) -> None:
    resolved = profile(profiles, "alpha", "servectl-standin:latest", build="standin")
    events: list[Progress] = []
    report = stage_target(
        resolved,
        docker=FakeDockerEngine(images={"servectl-standin:latest"}),
        host=host(),
        on_progress=events.append,
        clock=time.monotonic,
    )
    assert report.read_ahead is not None and report.read_ahead.bytes_read == 5 * MIB
    assert "stand-in image parses" in report.parse_note and report.parse is None
    assert "read 5.0 MiB of weights ahead" in report.weights_note and "bounds" not in report.weights_note
    assert [e.phase for e in events][:2] == ["image", "weights"]
    assert events[-1].percent == 100
    assert "not pinned" in report.summary()


def test_staging_reads_no_more_than_free_ram_less_the_headroom(profiles: Path) -> None:
    resolved = profile(profiles, "alpha", "servectl-standin:latest", build="standin")
    probe = host(available=MIN_HEADROOM_BYTES + 1 * MIB, total=4 * GIB)
    report = stage_target(
        resolved, docker=FakeDockerEngine(images={"servectl-standin:latest"}), host=probe, clock=time.monotonic
    )
    assert report.read_ahead is not None and report.read_ahead.bytes_read == 1 * MIB
    assert "free host RAM bounds it" in report.weights_note


def test_staging_skips_the_weights_when_asked(profiles: Path) -> None:
    resolved = profile(profiles, "alpha", "servectl-standin:latest", build="standin")
    report = stage_target(
        resolved,
        docker=FakeDockerEngine(images={"servectl-standin:latest"}),
        host=host(),
        read_weights=False,
        clock=time.monotonic,
    )
    assert report.read_ahead is None and report.weights_note == "weights not read"


def test_a_missing_image_fails_staging_in_one_line_naming_the_field(profiles: Path) -> None:
    resolved = profile(profiles, "beta", "lmsysorg/sglang:v0.5.23")
    with pytest.raises(PreflightFailed) as caught:
        stage_target(resolved, docker=FakeDockerEngine(), host=host(), clock=time.monotonic)
    line = caught.value.message
    assert "\n" not in line
    assert line.startswith(f"{resolved.plan.source}: image.ref: staging beta: image lmsysorg/sglang:v0.5.23")
    assert "not on this host" in line and "nothing was stopped" in line


def test_an_image_that_is_not_the_pinned_one_fails_staging(profiles: Path) -> None:
    resolved = profile(profiles, "beta", "lmsysorg/sglang:v0.5.23", digest=PINNED)
    wrong = ImageInfo(id=OTHER, repo_digests=(f"lmsysorg/sglang@{OTHER}",), tags=("lmsysorg/sglang:v0.5.23",))
    docker = FakeDockerEngine(images=[wrong])
    with pytest.raises(
        PreflightFailed,
        match=r"image\.digest: staging beta: the pinned image sha256:aaaaaaaaaaaa is not on this host and "
        r"lmsysorg/sglang:v0\.5\.23 is sha256:bbbbbbbbbbbb",
    ):
        stage_target(resolved, docker=docker, host=host(), clock=time.monotonic)


def test_the_pinned_image_found_by_repo_digest_passes_and_its_argv_is_parsed_in_it(profiles: Path) -> None:
    resolved = profile(profiles, "beta", "lmsysorg/sglang:v0.5.23", digest=PINNED)
    pinned = ImageInfo(id=OTHER, repo_digests=(f"lmsysorg/sglang@{PINNED}",), tags=())
    asked: list[tuple[str, list[str]]] = []

    def oneshot(image: str, command: list[str]) -> Any:
        asked.append((image, command))
        return probe_answer({"sglang_version": "0.5.23", "parsed": True, "resolved": False, "resolve_error": "no GPU"})

    report = stage_target(
        resolved, docker=FakeDockerEngine(images=[pinned], oneshot=oneshot), host=host(), clock=time.monotonic
    )
    assert report.image_id == OTHER and report.parse is not None and report.parse.parsed
    assert "argv parsed by SGLang 0.5.23 in the image" in report.parse_note
    [(image, command)] = asked
    assert image == f"lmsysorg/sglang@{PINNED}" and command[-len(resolved.plan.engine_argv) :] == list(
        resolved.plan.engine_argv
    )


def test_an_argv_the_image_rejects_fails_staging_with_sglangs_message(profiles: Path) -> None:
    resolved = profile(profiles, "beta", "lmsysorg/sglang:v0.5.23")
    rejected = {"sglang_version": "0.5.23", "parsed": False, "parse_error": "error: unrecognized arguments: --x"}
    docker = FakeDockerEngine(images={"lmsysorg/sglang:v0.5.23"}, oneshot=lambda i, c: probe_answer(rejected))
    with pytest.raises(PreflightFailed) as caught:
        stage_target(resolved, docker=docker, host=host(), clock=time.monotonic)
    assert "engine.args: staging beta: SGLang 0.5.23 in the image rejects the argv: error: unrecognized" in str(
        caught.value
    )
    forced = stage_target(resolved, docker=docker, host=host(), skip=frozenset({"engine.parse"}), clock=time.monotonic)
    assert "--force engine.parse" in forced.parse_note


def test_a_weight_file_that_cannot_be_read_fails_staging_naming_the_model_path(
    profiles: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolved = profile(profiles, "alpha", "servectl-standin:latest", build="standin")
    gone = WeightFile(str(profiles.parent / "model" / "gone.safetensors"), 10)
    monkeypatch.setattr("servectl.adapters.host.weight_files", lambda folder: (gone,))
    with pytest.raises(PreflightFailed, match=r"model\.path: staging alpha: reading .*gone\.safetensors ahead"):
        stage_target(
            resolved, docker=FakeDockerEngine(images={"servectl-standin:latest"}), host=host(), clock=time.monotonic
        )


def test_preflight_and_staging_of_one_swap_ask_the_image_to_parse_the_argv_once(profiles: Path) -> None:
    """Preflight's ``engine.parse`` and the staging ask the same question of the same image: one parse a swap."""
    from servectl.adapters.engine_image import ParseMemo
    from servectl.preflight.model import StartContext
    from servectl.preflight.request import measure_start
    from servectl.testing.fakes import FakeGpuInventory

    resolved = profile(profiles, "beta", "lmsysorg/sglang:v0.5.23")
    pinned = ImageInfo(id=OTHER, repo_digests=(), tags=("lmsysorg/sglang:v0.5.23",))
    asked: list[str] = []

    def oneshot(image: str, command: list[str]) -> Any:
        asked.append(image)
        return probe_answer({"sglang_version": "0.5.23", "parsed": True, "resolved": True})

    docker = FakeDockerEngine(images=[pinned], oneshot=oneshot)
    memo = ParseMemo()
    context = StartContext(parses=memo)
    report = measure_start(
        resolved, docker=docker, gpus=FakeGpuInventory(error="no driver"), host=host(), context=context
    )
    parse_check = next(c for c in report.checks if c.id == "engine.parse")
    assert "parsed" in parse_check.message and len(asked) == 1, parse_check
    staged = stage_target(resolved, docker=docker, host=host(), parses=memo, clock=time.monotonic)
    assert staged.parse is not None and staged.parse.parsed
    assert len(asked) == 1 and memo.asked == 1
    stage_target(
        resolved, docker=docker, host=host(), clock=time.monotonic
    )  # without the swap's memo the image is asked again
    assert len(asked) == 2
