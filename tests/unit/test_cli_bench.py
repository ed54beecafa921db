"""``servectl bench`` CLI: options, rendering, artifacts and exit codes (server scripted in-process)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import cli_run
import pytest
from bench_fakes import FakeOpenAIServer, route_run_bench


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> FakeOpenAIServer:
    """``run_bench`` routed to a scripted server (see :func:`bench_fakes.route_run_bench`)."""
    return route_run_bench(monkeypatch)


def run_cli(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    *paths: str,
    columns: int = 200,
) -> tuple[int, str, str]:
    """``servectl COMMAND PATHS`` in this process: ``command`` split as a shell splits it, ``paths`` as they are."""
    return cli_run.run_cli(monkeypatch, capsys, *shlex.split(command), *paths, columns=columns)


def test_bench_url_prints_the_table_and_writes_artifacts_and_plot(
    server: FakeOpenAIServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    out_dir, png = tmp_path / "ev", tmp_path / "taper.png"
    code, out, _ = run_cli(
        monkeypatch,
        capsys,
        "bench --url http://fake:8180 --prompt-tokens 4096,16384 --repeats 3 --max-tokens 40 --out",
        str(out_dir),
        "--plot",
        str(png),
    )
    assert code == 0
    assert "4,096 / 4,09" in out and "16,384 / 16,38" in out  # target / actual
    assert "100.00" in out  # decode tok/s p50 of the scripted 100 tok/s
    assert "3/3" in out
    assert f"artifacts: {out_dir}" in out
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "artifact-manifest.json",
        "c1-p16384-r3.json",
        "c1-p4096-r3.json",
        "summary.json",
    ]
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_flagged_requests_give_exit_1_with_one_error_line_after_writing_artifacts(
    server: FakeOpenAIServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    server.shortfall = 5
    code, out, err = run_cli(
        monkeypatch, capsys, "bench --url http://fake:8180 --prompt-tokens 4096 --max-tokens 40 --out", str(tmp_path)
    )
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        "error: bench: 3 of 3 measured requests were flagged (short_completion) and left out of the results; "
        f"see {tmp_path / 'summary.json'}"
    )
    assert "short completion: 35 of 40 tokens" in out
    assert json.loads((tmp_path / "summary.json").read_text())["requests_flagged"] == 3


def test_api_key_env_sends_the_key_and_an_unset_variable_is_a_usage_error(
    server: FakeOpenAIServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    server.required_key = "sk-123"
    monkeypatch.setenv("BENCH_TEST_KEY", "sk-123")
    code, out, _ = run_cli(
        monkeypatch,
        capsys,
        "bench --url http://fake:8180 --prompt-tokens 4096 --max-tokens 10 --repeats 1"
        " --api-key-env BENCH_TEST_KEY --out",
        str(tmp_path),
    )
    assert code == 0 and "sk-123" not in out
    assert "sk-123" not in (tmp_path / "summary.json").read_text()
    monkeypatch.delenv("BENCH_TEST_KEY")
    code, _, err = run_cli(monkeypatch, capsys, "bench --url http://fake:8180 --api-key-env BENCH_TEST_KEY")
    assert code == 2
    assert err.strip() == "error: --api-key-env BENCH_TEST_KEY: $BENCH_TEST_KEY is not set; export BENCH_TEST_KEY=<key>"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        ("bench", "error: bench: give a profile NAME or --url http://HOST:PORT"),
        (
            "bench --url http://h:1 --prompt-tokens 4k",
            "error: --prompt-tokens: '4k' is not a comma-separated list of integers, e.g. 4096,65536",
        ),
        ("bench --url http://h:1 --repeats 0", "error: bench repeats: 0 is below 1; use 3 for a p50 of three"),
    ],
)
def test_usage_errors_are_one_line_with_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: str, line: str
) -> None:
    code, _, err = run_cli(monkeypatch, capsys, args)
    assert code == 2
    assert err.strip() == line


def test_unreachable_server_is_one_error_line_with_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(monkeypatch, capsys, "bench --url http://127.0.0.1:9 --prompt-tokens 100")
    assert code == 1
    assert err.startswith("error: http://127.0.0.1:9/v1/models: cannot reach the server (ConnectError")
    assert len(err.strip().splitlines()) == 1


def test_help_does_not_import_httpx_or_matplotlib() -> None:
    code = (
        "import sys\n"
        "sys.argv = ['servectl', 'bench', '--help']\n"
        "from servectl.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('httpx', 'matplotlib', 'servectl.bench.runner') if m in sys.modules))\n"
    )
    src = Path(__file__).resolve().parents[2] / "src"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONPATH": str(src)}
    )
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_bench_name_takes_url_model_key_and_provenance_from_the_profile_lookup(
    server: FakeOpenAIServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    import servectl.bench.target
    from servectl.bench import BenchContext, CardFreeMemory
    from servectl.bench.target import BenchTarget

    server.required_key = "sk-prof"
    monkeypatch.setenv("PROFILE_KEY", "sk-prof")
    monkeypatch.setattr(
        servectl.bench.target,
        "bench_target",
        lambda ctx, *, name: BenchTarget(
            url="http://fake:8180",
            model="fake-model",
            api_key_env="PROFILE_KEY",
            context=BenchContext(
                profile_name=name,
                plan_hash="ph-9",
                free_vram_after=lambda: [CardFreeMemory(0, 2101 * 2**20), CardFreeMemory(1, None)],
            ),
        ),
    )
    code, out, _ = run_cli(
        monkeypatch, capsys, "bench glm53-393k --prompt-tokens 4096 --max-tokens 10 --repeats 1 --out", str(tmp_path)
    )
    assert code == 0
    assert "free VRAM after the run: GPU0 2,101 MiB, GPU1 unknown" in out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["provenance"]["profile"] == "glm53-393k" and summary["provenance"]["plan_hash"] == "ph-9"
    assert summary["request_settings"]["api_key_env"] == "PROFILE_KEY"


def test_results_table_fits_80_columns_keeping_prompt_and_decode_whole(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args = "bench --url http://fake:8180 --prompt-tokens 4096,131072 --repeats 2 --max-tokens 40 --out"
    code, out, _ = run_cli(monkeypatch, capsys, args, str(tmp_path / "ev"), columns=80)
    assert code == 0
    table = [line for line in out.splitlines() if not line.startswith(("artifacts:", "warning"))]
    assert all(len(line) <= 80 for line in table), out
    assert "131,072 / 131,0" in out and "100.00" in out


def test_plot_without_matplotlib_refuses_before_any_request(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real_find_spec(name, *a)
    )
    code, out, err = run_cli(monkeypatch, capsys, "bench --url http://fake:8180 --plot", str(tmp_path / "t.png"))
    assert code == 2
    assert err == "error: --plot needs matplotlib, which is not installed; run: pip install 'servectl[bench]'\n"
    assert out == "" and server.bodies == [] and server.headers == []
