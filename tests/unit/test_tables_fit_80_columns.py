"""Every table fits an 80-column terminal (or a pipe) without wrapping a name, like ``docker ps``."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from rich.table import Table
from service_samples import sample_service

from servectl.cli.views.columns import Col, plain_table
from servectl.cli.views.preflight import report_table
from servectl.cli.views.profiles import profiles_table
from servectl.cli.views.runtime import STATUS_COLUMNS, STATUS_PRIORITIES, status_rows, status_text
from servectl.cli.views.table import fit_table
from servectl.plan.inventory import ProfileRow
from servectl.preflight.model import CheckResult, PreflightReport

LONG_NAMES = ("glm53-524k-bringup", "glm53-exl3-q4-tp4", "demo-rollback")


def _render(table: Table, width: int) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, highlight=False).print(table)
    return out.getvalue().splitlines()


def _rows() -> list[ProfileRow]:
    return [
        ProfileRow(
            name=name,
            source=f"/home/someone/servectl/profiles/{name}.yaml",
            origin="shipped",
            status="candidate",
            served_name="glm53-flash-ormandj-sglang-sm120-tp2-393k-c1-adaptive-mtp",
            tp=2,
            context=524288,
            port=8180,
            role="bench",
            headline="112.07 decode tok/s at 2,969 prompt tokens, 99.79 at 304,491",
        )
        for name in LONG_NAMES
    ] + [ProfileRow(name="glm53-exl3-524k", source="/x/glm53-exl3-524k.yaml", origin="shipped", error="3 problems")]


def _assert_fits_with_whole_names(lines: list[str], width: int, names: tuple[str, ...]) -> None:
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    for name in names:
        assert any(re.search(rf"(^|[\s│]){re.escape(name)}([\s│]|$)", line) for line in lines), (name, lines)


@pytest.mark.parametrize("width", [80, 60])
def test_profiles_table_keeps_every_name_whole_at_narrow_widths(width: int) -> None:
    lines = _render(profiles_table(_rows(), width=width), width)
    _assert_fits_with_whole_names(lines, width, (*LONG_NAMES, "glm53-exl3-524k", "candidate", "invalid"))
    assert any("status" in line for line in lines) and not any("statu " in line for line in lines)


def test_profiles_table_drops_the_long_served_name_first_and_shows_it_when_there_is_room() -> None:
    narrow = "\n".join(_render(profiles_table(_rows(), width=80), 80))
    wide = "\n".join(_render(profiles_table(_rows(), width=250), 250))
    assert "adaptive-mtp" not in narrow and "port" in narrow
    assert "glm53-flash-ormandj-sglang-sm120-tp2-393k-c1-adaptive-mtp" in wide
    assert "profiles/glm53-524k-bringup.yaml" in wide


def test_status_table_fits_80_columns_with_three_services() -> None:
    lines = status_text(_three_services(), width=80, bold_header=False).splitlines()  # type: ignore[arg-type]
    _assert_fits_with_whole_names(
        lines, 80, ("glm53-524k-bringup", "demo-rollback", "starting", "(code 137, OOM-killed)")
    )
    assert lines[0].split()[:3] == ["PROFILE", "STATE", "PORT"]


def _three_services() -> list[object]:
    return [
        sample_service("glm53-524k-bringup"),
        sample_service("demo-rollback", state="starting"),
        sample_service("glm53-exl3-q4-tp4", state="exited", exit_code=137, oom_killed=True, gpus=(0, 1, 2, 3)),
    ]


@pytest.mark.parametrize("width", [200, 120, 100, 80, 70, 60])
def test_status_text_shows_what_the_rich_table_shows_at_every_width(width: int) -> None:
    """``status`` prints plain text (no rich table to import); the same columns as a borderless rich table
    (``fit_table``, the other user of the drop rule) keep the same columns and cells, padding set aside."""
    found = _three_services()
    plain = status_text(found, width=width, bold_header=False).splitlines()  # type: ignore[arg-type]
    columns = [Col(h, priority=p) for h, p in zip(STATUS_COLUMNS, STATUS_PRIORITIES, strict=True)]
    table = fit_table(columns, status_rows(found), width=width, box=None, pad_edge=False, show_edge=False)  # type: ignore[arg-type]
    rich = _render(table, width)
    assert [line.split() for line in plain[:4]] == [line.split() for line in rich[:4]]
    # the columns it hid are named below the table in both, wrapped to the width
    assert " ".join(plain[4:]).split() == " ".join(rich[4:]).split()
    assert (width <= 100) == bool(plain[4:]) and all(len(line) <= width for line in plain)


def test_status_text_narrower_than_its_always_shown_columns_cuts_no_cell() -> None:
    """At 40 columns PROFILE and STATE alone are wider: rich cuts the state ('OO'), the plain table keeps it whole
    (as ``docker ps`` does) and lets the terminal wrap the line."""
    plain = status_text(_three_services(), width=40, bold_header=False).splitlines()  # type: ignore[arg-type]
    assert plain[0].split() == ["PROFILE", "STATE"] and plain[3].endswith("exited (code 137, OOM-killed)")


def test_plain_table_aligns_columns_two_spaces_apart_and_drops_by_priority() -> None:
    columns = [Col("NAME"), Col("N", justify="right"), Col("NOTE", priority=1), Col("WIDE", priority=2)]
    rows = [("a", "7", "ok", "x" * 20), ("longer-name", "123", "fine", "y")]
    assert plain_table(columns, rows, width=200, bold_header=False).splitlines() == [
        "NAME           N  NOTE  WIDE",
        "a              7  ok    xxxxxxxxxxxxxxxxxxxx",
        "longer-name  123  fine  y",
    ]
    assert plain_table(columns, rows, width=30, bold_header=False).splitlines()[0] == "NAME           N  NOTE"
    assert plain_table(columns, rows, width=5, bold_header=False).splitlines()[1] == "a              7"  # never less
    assert plain_table(columns, [("日本語", "1", "", "")], width=80, bold_header=True).splitlines() == [
        "\x1b[1mNAME    N  NOTE  WIDE\x1b[0m",
        "日本語  1",
    ]


def test_preflight_table_wraps_only_prose_never_check_ids_or_results() -> None:
    checks = tuple(
        CheckResult(
            id=check_id,
            title=check_id,
            result=result,  # type: ignore[arg-type]
            message="card 0: 95,000 MiB free of 97,887 MiB; the engine takes about 93,000 MiB at 0.95",
            fix="stop the process holding card 0 (pid 4242, container ds4-daily) or waive the reserve",
        )
        for check_id, result in (("gpu.vram_reserve", "fail"), ("docker.gpu_runtime", "unknown"), ("host.shm", "pass"))
    )
    report = PreflightReport(profile_name="glm53-524k-bringup", checks=checks)
    lines = _render(report_table(report, width=80), 80)
    _assert_fits_with_whole_names(lines, 80, ("gpu.vram_reserve", "docker.gpu_runtime", "unknown", "fail"))
    assert any("(pid" in line for line in lines), "the fix column was dropped"
