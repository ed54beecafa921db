"""run_profile_bench, the library form of `servectl bench`: target, key, artifacts and the failure rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bench_fakes import FakeOpenAIServer, route_run_bench

import servectl.bench.profile_run
from servectl.bench.manifest import check_manifest, read_manifest
from servectl.bench.profile_run import run_profile_bench
from servectl.bench.settings import BenchSettings
from servectl.errors import BenchFailed, UsageError
from servectl.service.context import Context


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> FakeOpenAIServer:
    """``run_bench`` routed to a scripted server (see :func:`bench_fakes.route_run_bench`)."""
    return route_run_bench(monkeypatch)


def test_a_clean_run_writes_artifacts_under_the_state_folder_and_does_not_fail(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    environ = {"SERVECTL_HOME": str(tmp_path), "BENCH_KEY": "sk-1"}
    server.required_key = "sk-1"
    settings = BenchSettings(
        url="http://fake:8180", api_key_env="BENCH_KEY", prompt_tokens=(4096,), repeats=1, max_tokens=10
    )
    result = run_profile_bench(Context(environ=environ), settings=settings)
    assert result.out_dir.parent == tmp_path / "bench"
    names = sorted(p.name for p in result.out_dir.iterdir())
    assert names == ["artifact-manifest.json", "c1-p4096-r1.json", "summary.json"]
    manifest = read_manifest(result.out_dir)
    assert manifest is not None and [f["path"] for f in manifest["files"]] == names[1:]
    assert manifest["runs"][result.report.run_id]["host"]["source"] == "unknown"  # a bare URL: no NVML facts
    assert check_manifest(result.out_dir) == []
    assert result.failure() is None
    result.raise_if_failed()


def test_flagged_requests_fail_the_run_naming_the_summary(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.shortfall = 5
    settings = BenchSettings(url="http://fake:8180", prompt_tokens=(4096,), max_tokens=40)
    result = run_profile_bench(Context(environ={}), settings=settings, out_dir=tmp_path)
    assert (tmp_path / "summary.json").is_file()  # written before the verdict
    with pytest.raises(BenchFailed) as info:
        result.raise_if_failed()
    assert str(info.value) == (
        "bench: 3 of 3 measured requests were flagged (short_completion) and left out of the results; "
        f"see {tmp_path / 'summary.json'}"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "bench: give a profile NAME or --url http://HOST:PORT"),
        (
            {"url": "http://h:1", "api_key_env": "NOT_SET_ANYWHERE"},
            "--api-key-env NOT_SET_ANYWHERE: $NOT_SET_ANYWHERE is not set; export NOT_SET_ANYWHERE=<key>",
        ),
    ],
)
def test_usage_errors_come_before_any_request(server: FakeOpenAIServer, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as info:
        run_profile_bench(Context(environ={}), settings=BenchSettings(**kwargs))
    assert str(info.value) == message
    assert server.bodies == []


def test_a_profile_whose_key_is_in_a_file_is_benchmarked_with_it(
    server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve.api_key_file: bench reads the key file through the service's own key reader (it used to refuse)."""
    from servectl.bench.target import BenchTarget

    key_file = tmp_path / "key"
    key_file.write_text("sk-from-file\n")
    target = BenchTarget(url="http://fake:8180", model=None, api_key_file=str(key_file))
    monkeypatch.setattr(servectl.bench.profile_run, "_profile_target", lambda *a: target)
    server.required_key = "sk-from-file"
    settings = BenchSettings(prompt_tokens=(4096,), repeats=1, max_tokens=10)
    result = run_profile_bench(Context(environ={}), name="demo", settings=settings, out_dir=tmp_path / "o")
    assert result.failure() is None and "sk-from-file" not in (tmp_path / "o" / "summary.json").read_text()
    key_file.write_text("")
    with pytest.raises(UsageError, match=f"serve.api_key_file: {key_file} is empty; write the key into it"):
        run_profile_bench(Context(environ={}), name="demo", settings=settings, out_dir=tmp_path / "o2")
