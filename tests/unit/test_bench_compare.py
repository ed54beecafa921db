"""bench compare: matching on actual prompt tokens, ratios, not-comparable rows, and what it reads (runs, CSVs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_fakes import FakeOpenAIServer, ScriptedClock
from cli_run import run_cli

from servectl.bench.artifacts import write_artifacts
from servectl.bench.compare import (
    CompareRow,
    Comparison,
    Series,
    SeriesPoint,
    compare_series,
    describe_differences,
)
from servectl.bench.compare_inputs import compare_bench, read_reference, read_run
from servectl.bench.model import BenchContext, Stat
from servectl.bench.runner import run_bench
from servectl.bench.settings import BenchSettings
from servectl.errors import UsageError


def stat(value: float) -> Stat:
    return Stat(p50=value, min=value, max=value, n=3)


def series(label: str, points: dict[float, float], **fields: object) -> Series:
    concurrency = fields.pop("concurrency", 1)
    made = tuple(
        SeriesPoint(prompt_tokens=t, decode_tok_s=stat(v), concurrency=concurrency)  # type: ignore[arg-type]
        for t, v in points.items()
    )
    return Series(label=label, kind="run", path=Path(label), points=made, max_tokens=512, **fields)  # type: ignore[arg-type]


def rows_of(comparison: Comparison, label: str) -> dict[float, CompareRow]:
    return {r.anchor_tokens: r for r in comparison.rows if r.series == label}


# -- matching ----------------------------------------------------------------------------------------------
def test_points_match_on_actual_tokens_within_the_tolerance_and_are_never_interpolated() -> None:
    base = series("old", {4096: 160.0, 65536: 253.0, 200000: 160.0})
    new = series("new", {4150: 120.0, 30000: 999.0, 66000: 200.0})  # 30,000 lies between two old points
    comparison = compare_series([base, new])
    new_rows = rows_of(comparison, "new")
    assert new_rows[4096].decode_ratio == pytest.approx(120 / 160) and new_rows[4096].comparable
    assert new_rows[65536].decode_ratio == pytest.approx(200 / 253)
    assert new_rows[30000].decode_ratio is None and new_rows[30000].notes == ("no baseline point",)
    assert not new_rows[30000].comparable and not new_rows[30000].unfair  # no ratio, but nothing unfair
    assert 200000 not in new_rows  # nothing is made up where the new run has no point
    assert [r.anchor_tokens for r in comparison.rows if r.is_baseline] == [4096, 65536, 200000]


def test_the_tolerance_is_a_fraction_of_the_anchor_and_the_nearest_point_wins() -> None:
    base = series("old", {4096: 100.0})
    near = series("new", {4300: 50.0})  # 4.98 % above 4,096
    assert rows_of(compare_series([base, near]), "new")[4096].decode_ratio == pytest.approx(0.5)
    assert rows_of(compare_series([base, near], tolerance=0.04), "new")[4300].decode_ratio is None
    two = series("new", {4000: 80.0, 4090: 90.0})
    matched = rows_of(compare_series([base, two]), "new")
    assert matched[4096].point.prompt_tokens == 4090 and matched[4096].decode_ratio == pytest.approx(0.9)
    assert matched[4000].decode_ratio is None  # the other one keeps a row of its own


def test_baseline_is_the_first_run_unless_named_and_an_unknown_name_is_one_line() -> None:
    a, b = series("a", {4096: 100.0}), series("b", {4096: 50.0})
    assert compare_series([a, b]).baseline == "a"
    named = compare_series([a, b], baseline="b")
    assert named.baseline == "b" and rows_of(named, "a")[4096].decode_ratio == pytest.approx(2.0)
    with pytest.raises(UsageError, match=r"^--baseline c: no such run or reference; give one of: a, b$"):
        compare_series([a, b], baseline="c")


@pytest.mark.parametrize(
    ("change", "note"),
    [
        ({"concurrency": 4}, "C4 vs C1"),
        ({"max_tokens": 256}, "256 vs 512 output tokens"),
        ({"statistic": "1 round"}, "1 round vs p50 of 3"),
    ],
)
def test_a_different_concurrency_max_tokens_or_statistic_is_flagged_on_the_row(
    change: dict[str, object], note: str
) -> None:
    base = series("old", {4096: 100.0}, statistic="p50 of 3")
    other = series("new", {4096: 90.0}, statistic="p50 of 3")
    other = Series(
        **{**other.__dict__, **{k: v for k, v in change.items() if k != "concurrency"}},  # type: ignore[arg-type]
    )
    if "concurrency" in change:
        other = series("new", {4096: 90.0}, statistic="p50 of 3", concurrency=change["concurrency"])
    row = rows_of(compare_series([base, other]), "new")[4096]
    assert row.notes == (note,) and not row.comparable and row.unfair
    assert row.decode_ratio == pytest.approx(0.9)  # still shown, next to why it is unfair


def test_flagged_points_are_not_comparable_on_both_sides() -> None:
    flagged = SeriesPoint(
        prompt_tokens=4096,
        decode_tok_s=stat(80.0),
        concurrency=1,
        flagged_requests=2,
        flagged_kinds=("short_completion",),
    )
    base = series("old", {4096: 100.0})
    bad = Series(label="new", kind="run", path=Path("new"), points=(flagged,), max_tokens=512)
    row = rows_of(compare_series([base, bad]), "new")[4096]
    assert row.notes == ("2 flagged (short_completion)",) and not row.comparable
    reverse = compare_series([bad, base])
    assert rows_of(reverse, "old")[4096].notes == ("baseline point flagged",)
    assert rows_of(reverse, "new")[4096].is_baseline and not rows_of(reverse, "new")[4096].comparable


def test_a_run_at_another_level_sits_beside_the_baselines_and_extra_levels_keep_their_own_rows() -> None:
    base = series("old", {4096: 100.0})
    both = Series(
        label="new",
        kind="run",
        path=Path("new"),
        max_tokens=512,
        points=(
            SeriesPoint(prompt_tokens=4096, decode_tok_s=stat(90.0), concurrency=1),
            SeriesPoint(prompt_tokens=4096, decode_tok_s=stat(70.0), concurrency=2),
        ),
    )
    rows = [r for r in compare_series([base, both]).rows if r.series == "new"]
    assert [(r.point.concurrency, r.lane, r.decode_ratio) for r in rows] == [(1, 1, 0.9), (2, 2, None)]


def test_a_reference_without_concurrency_matches_without_a_note() -> None:
    ref = Series(
        label="DS4-0731",
        kind="reference",
        path=Path("ds4.csv"),
        points=(SeriesPoint(prompt_tokens=4096, decode_tok_s=stat(160.0)),),
    )
    row = rows_of(compare_series([series("old", {4096: 100.0}), ref]), "DS4-0731")[4096]
    assert row.comparable and row.notes == () and row.decode_ratio == pytest.approx(1.6)


def test_what_differs_between_runs_titles_the_comparison() -> None:
    a = series("a", {4096: 100.0}, profile="glm53-393k", plan_hash="1" * 16, image_digest="sha256:" + "2" * 64)
    b = series("b", {4096: 90.0}, profile="glm53-393k", plan_hash="3" * 16, image_digest="sha256:" + "2" * 64)
    assert describe_differences(compare_series([a, b])) == "plan 111111111111 vs 333333333333"
    assert describe_differences(compare_series([a, Series(**{**b.__dict__, "plan_hash": a.plan_hash})])) == (
        "same profile, plan, image and model"
    )
    bare = [series("x", {4096: 1.0}), series("y", {4096: 2.0})]
    assert describe_differences(compare_series(bare)) == "runs measured by URL: no profile, plan or image recorded"
    assert describe_differences(compare_series([a])) == "glm53-393k"


# -- runs on disk --------------------------------------------------------------------------------------
def bench_run(folder: Path, *, rate: float, profile: str, shortfall: int = 0, max_tokens: int = 20) -> Path:
    """A real `bench --out` folder: run_bench against the scripted server, then write_artifacts."""
    fake = FakeOpenAIServer(clock=ScriptedClock(), rate_tok_s=rate, chunk_tokens=2, shortfall=shortfall)
    fake.shortfall_every = 3 if shortfall else 0
    report = run_bench(
        settings=BenchSettings(url="http://fake:1", prompt_tokens=(1024, 8192), repeats=3, max_tokens=max_tokens),
        context=BenchContext(profile_name=profile, plan_hash=f"plan-{profile}", image_digest="sha256:" + "ab" * 32),
        transport=fake.transport(),
        clock=fake.clock,
    )
    write_artifacts(report, folder)
    return folder


def test_runs_read_from_artifacts_give_the_ratios_of_their_point_files(tmp_path: Path) -> None:
    old = bench_run(tmp_path / "old", rate=100.0, profile="glm53-393k")
    new = bench_run(tmp_path / "new", rate=80.0, profile="glm53-exl3-524k", shortfall=2)
    comparison = compare_bench(runs=[old, new])
    for row in (r for r in comparison.rows if r.series == "glm53-exl3-524k"):
        target = row.point.prompt_tokens_target
        decode = [json.loads((f / f"c1-p{target}-r3.json").read_text())["point"]["decode_tok_s"] for f in (old, new)]
        assert row.decode_ratio == pytest.approx(decode[1]["p50"] / decode[0]["p50"])
    assert comparison.differences[0] == ("profile", ("glm53-393k", "glm53-exl3-524k"))
    flagged = [r.notes for r in comparison.rows if r.point.flagged_requests]
    assert flagged and all(n == (f"{n[0].split()[0]} flagged (short_completion)",) for n in flagged)


def test_two_runs_of_one_profile_are_told_apart_by_folder(tmp_path: Path) -> None:
    a = bench_run(tmp_path / "before", rate=100.0, profile="demo")
    b = bench_run(tmp_path / "after", rate=90.0, profile="demo")
    assert [s.label for s in compare_bench(runs=[a, b]).series] == ["before", "after"]


def test_a_folder_without_bench_artifacts_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "qualify.json").write_text("{}")
    with pytest.raises(UsageError) as err:
        read_run(tmp_path)
    assert err.value.message == (
        f"{tmp_path}: no bench artifacts (summary.json is missing); give a folder written by `servectl bench --out`"
    )
    with pytest.raises(UsageError, match=r"missing: no such folder"):
        read_run(tmp_path / "missing")
    run = bench_run(tmp_path / "20261202T010000Z", rate=100.0, profile="demo")
    with pytest.raises(UsageError) as err:
        read_run(tmp_path)  # a folder of runs, like STATE/bench
    assert err.value.message == f"{tmp_path}: holds 1 bench run in sub-folders; give one of them, e.g. {run}"
    assert read_run(run / "summary.json").path == run  # the summary file names its run


def test_an_artifact_of_another_schema_version_is_one_line_naming_the_file(tmp_path: Path) -> None:
    run = bench_run(tmp_path / "run", rate=100.0, profile="demo")
    summary = run / "summary.json"
    doc = json.loads(summary.read_text())
    summary.write_text(json.dumps({**doc, "schema": "servectl.bench/v3"}))
    with pytest.raises(UsageError) as err:
        read_run(run)
    assert err.value.message == (
        f"{summary}: artifact schema 'servectl.bench/v3' is not 'servectl.bench/v1' or 'servectl.bench/v2', "
        "the ones this servectl reads; compare it with the servectl version that wrote it"
    )
    summary.write_text(json.dumps({**doc, "points": [{**doc["points"][0], "decode_tok_s": {"p50": "fast"}}]}))
    with pytest.raises(UsageError, match=r"summary.json: points\[0\]\.decode_tok_s: not a statistic"):
        read_run(run)
    summary.write_text("{not json")
    with pytest.raises(UsageError, match=r"summary.json: not JSON"):
        read_run(run)


def test_a_v1_run_without_the_v2_fields_is_still_read(tmp_path: Path) -> None:
    """A run written before output tokens per minute and peak VRAM (schema v1) compares as it did."""
    run = bench_run(tmp_path / "run", rate=100.0, profile="demo")
    summary = run / "summary.json"
    doc = json.loads(summary.read_text())
    assert doc["schema"] == "servectl.bench/v2" and "output_tok_per_min" in doc["points"][0]
    v2 = read_run(run)
    v1_points = [
        {k: v for k, v in p.items() if k not in ("output_tokens", "measured_s", "output_tok_per_min", "peak_vram")}
        for p in doc["points"]
    ]
    summary.write_text(json.dumps({**doc, "schema": "servectl.bench/v1", "points": v1_points}))
    v1 = read_run(run)
    assert [p.decode_tok_s for p in v1.points] == [p.decode_tok_s for p in v2.points]
    assert v1.points[0].decode_tok_s is not None


# -- reference CSVs ------------------------------------------------------------------------------------
def test_a_reference_csv_reads_name_metadata_optional_columns_and_comments(tmp_path: Path) -> None:
    path = tmp_path / "ds4.csv"
    path.write_text(
        "# name: DS4-0731\n# source: data/tapers/retaper-ds4-0731-realistic.log\n# statistic: p50 of 3\n"
        "# typed from the log by hand\n\nprompt_tokens,decode_tok_s,ttft_s,concurrency\n"
        "4096,160,0.4,1\n65_536,253,,1\n200000,160.5,,\n"
    )
    ref = read_reference(path)
    assert (ref.label, ref.kind, ref.statistic, ref.note) == (
        "DS4-0731",
        "reference",
        "p50 of 3",
        "data/tapers/retaper-ds4-0731-realistic.log",
    )
    assert [(p.prompt_tokens, p.decode_tok_s and p.decode_tok_s.p50, p.concurrency) for p in ref.points] == [
        (4096, 160.0, 1),
        (65536, 253.0, 1),
        (200000, 160.5, None),
    ]
    assert ref.points[0].ttft_s == Stat(p50=0.4, min=0.4, max=0.4, n=1) and ref.points[1].ttft_s is None
    assert ref.points[2].source == "ds4.csv:9"
    path.write_text("prompt_tokens,decode_tok_s\n4096,160\n")
    assert read_reference(path).label == "ds4"  # no name line: the file name


def test_an_unreadable_reference_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"^.*nope\.csv: no such file; check the path$"):
        read_reference(tmp_path / "nope.csv")
    with pytest.raises(UsageError, match=r"^.*: is a folder, not a regular file$"):
        read_reference(tmp_path)
    (tmp_path / "latin1.csv").write_bytes(b"prompt_tokens,decode_tok_s\n4096,1\xe9\n")
    with pytest.raises(UsageError, match=r"latin1\.csv: not UTF-8 text .* save it as UTF-8$"):
        read_reference(tmp_path / "latin1.csv")


def test_the_shipped_example_reference_reads() -> None:
    ref = read_reference(Path(__file__).resolve().parents[2] / "examples" / "references" / "ds4-0731.csv")
    assert ref.label == "DS4-0731" and ref.statistic is None and ref.note and "160 @4K" in ref.note
    assert [(p.prompt_tokens, p.decode_tok_s and p.decode_tok_s.p50) for p in ref.points] == [
        (4096, 160.0),
        (65536, 253.0),
        (200000, 160.0),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("prompt_tokens,decode_tok_s\n4096,fast\n", ":2: decode_tok_s 'fast' is not a number, e.g. 253.4"),
        ("prompt_tokens,decode_tok_s\n4K,160\n", ":2: prompt_tokens '4K' is not a whole number, e.g. 65536"),
        ("prompt_tokens,decode_tok_s\n4096,0\n", ":2: decode_tok_s '0' must be at least 1e-09"),
        ("prompt_tokens,decode_tok_s\n4096,\n", ":2: decode_tok_s is empty; every row needs prompt_tokens and"),
        ("prompt_tokens,decode_tok_s\n4096,160,1\n", ":2: 3 cells for 2 columns (prompt_tokens,decode_tok_s)"),
        ("prompt_tokens,decode_toks\n", ":1: unknown column 'decode_toks'; did you mean decode_tok_s?"),
        ("prompt_tokens,ttft_s\n", ":1: the header needs prompt_tokens and decode_tok_s once each"),
        ("# name: x\nprompt_tokens,decode_tok_s\n4096,1\n4096,2\n", ":4: prompt_tokens 4096 is already on line 3"),
        ("# name: x\n# name: y\n", ":2: '# name:' given twice; keep one"),
        ("# name: x\nprompt_tokens,decode_tok_s\n", ": no data rows; give a header line and one row per prompt"),
        ("# max_tokens: many\nprompt_tokens,decode_tok_s\n1,1\n", ": '# max_tokens: many' is not a whole number"),
    ],
)
def test_a_bad_reference_line_is_one_error_naming_the_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "ref.csv"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        read_reference(path)
    assert err.value.message.startswith(f"{path}{message}") and "\n" not in err.value.message


# -- the command ---------------------------------------------------------------------------------------
def test_compare_prints_an_80_column_table_and_json_and_writes_the_plot(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    old = bench_run(tmp_path / "old", rate=100.0, profile="glm53-393k")
    new = bench_run(tmp_path / "new", rate=80.0, profile="glm53-exl3-524k", max_tokens=16)
    ref = tmp_path / "ds4.csv"
    ref.write_text("# name: DS4-0731\nprompt_tokens,decode_tok_s\n1024,160\n200000,160\n")
    png = tmp_path / "cmp.png"
    code, out, err = run_cli(
        monkeypatch,
        capsys,
        "bench",
        "compare",
        str(old),
        str(new),
        "--reference",
        str(ref),
        "--plot",
        str(png),
        columns=80,
    )
    assert code == 0, err
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "0.80x" in out and "1.60x" in out and "16 vs 20 output" in out and "no baseline point" in out
    assert "runs differ in: profile glm53-393k vs glm53-exl3-524k" in out
    assert png.read_bytes()[:4] == b"\x89PNG"
    code, out, _ = run_cli(monkeypatch, capsys, "bench", "compare", str(new), str(old), "--json", columns=80)
    doc = json.loads(out)
    assert code == 0 and doc["baseline"] == "glm53-exl3-524k" and doc["plot"] is None
    ratios = [r["decode_ratio"] for r in doc["rows"] if r["series"] == "glm53-393k"]
    assert ratios == [pytest.approx(1.25), pytest.approx(1.25)]
    assert all(not r["comparable"] for r in doc["rows"] if not r["baseline"])  # 20 vs 16 output tokens


def test_compare_plot_without_matplotlib_refuses_before_reading_anything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real_find_spec(name, *a)
    )
    missing = tmp_path / "not-a-run"  # would be an error of its own, if it were read
    code, out, err = run_cli(
        monkeypatch, capsys, "bench", "compare", str(missing), "--plot", str(tmp_path / "p.png"), columns=80
    )
    assert (code, out) == (2, "")
    assert err == "error: --plot needs matplotlib, which is not installed; run: pip install 'servectl[bench]'\n"
    code, out, err = run_cli(
        monkeypatch, capsys, "bench", "compare", str(bench_run(tmp_path / "r", rate=50.0, profile="d")), columns=80
    )
    assert code == 0 and "50.0" in out  # the table needs no matplotlib


def test_the_table_imports_no_matplotlib(tmp_path: Path) -> None:
    import subprocess
    import sys

    run = bench_run(tmp_path / "r", rate=50.0, profile="d")
    script = (
        "import sys\nfrom servectl.cli.app import main\n"
        f"sys.argv = ['servectl', 'bench', 'compare', {str(run)!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('matplotlib imported:', 'matplotlib' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "50.0" in result.stdout and result.stdout.endswith("matplotlib imported: False\n")


def test_compare_bad_input_is_one_error_line_with_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run_cli(monkeypatch, capsys, "bench", "compare", str(tmp_path), columns=80)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith(f"error: {tmp_path}: no bench artifacts")
