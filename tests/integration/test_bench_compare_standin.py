"""`servectl bench compare` on real runs: two stand-in services with different tapers and a typed reference.

Profiles extend the shipped ``demo`` (stand-in engine) with ``STANDIN_TAPER`` in ``engine.env``: ``old``
falls with prompt length, ``new`` rises then falls. Both are started with `servectl up` and measured with
`servectl bench` (three short prompt lengths, 64 output tokens, two rounds); then ``new`` once more at C2 with
other settings, and a third service whose completions come up short (flagged requests).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import StandinCli, remove_labelled

from servectl.standin.settings import StandinSettings
from servectl.testing.docker import TEST_SESSION_LABEL

pytestmark = pytest.mark.integration

OLD_TAPER = "256:400,4096:250"  # falls
NEW_TAPER = "256:300,1024:500,4096:200"  # rises, then falls
LENGTHS = (256, 1024, 4096)


@pytest.fixture
def cli(docker_client: Any, standin_image: str, test_session_id: str, tmp_path: Path) -> Iterator[Any]:
    """(profile, run) of a :class:`StandinCli`; the session's containers are removed after the test."""
    world = StandinCli(
        tmp_path, image=standin_image, session=test_session_id, startup_delay_s=0.5, timeout_s=240, columns=80
    )
    yield world.profile, world.run
    remove_labelled(docker_client, TEST_SESSION_LABEL, test_session_id)


def decode_p50(run_dir: Path, target: int, concurrency: int = 1) -> float:
    files = list(run_dir.glob(f"c{concurrency}-p{target}-r*.json"))
    assert len(files) == 1, files
    return float(json.loads(files[0].read_text())["point"]["decode_tok_s"]["p50"])


def test_compare_two_tapered_standin_runs_and_a_typed_reference(cli: Any, tmp_path: Path) -> None:
    profile, run = cli
    old, new = profile("old", STANDIN_TAPER=OLD_TAPER), profile("new", STANDIN_TAPER=NEW_TAPER)
    short = profile("short", STANDIN_TAPER=NEW_TAPER, STANDIN_COMPLETION_SHORTFALL="2")
    for name in (old, new, short):
        up = run("up", name)
        assert up.returncode == 0, up.stderr
    runs = tmp_path / "runs"
    common = ("--prompt-tokens", ",".join(map(str, LENGTHS)), "--max-tokens", "64", "--repeats", "2")
    for name, folder in ((old, "old"), (new, "new")):
        bench = run("bench", name, *common, "--out", str(runs / folder))
        assert bench.returncode == 0, bench.stdout + bench.stderr
    other = run("bench", new, "--prompt-tokens", "1024", "--concurrency", "2", "--max-tokens", "24", "--repeats",
                "1", "--out", str(runs / "new-c2"))  # fmt: skip
    assert other.returncode == 0, other.stdout + other.stderr
    flagged = run("bench", short, "--prompt-tokens", "1024", "--max-tokens", "64", "--repeats", "1", "--out",
                  str(runs / "short"))  # fmt: skip
    assert flagged.returncode == 1 and "flagged" in flagged.stderr  # artifacts written all the same

    # the stand-in tapers as its profile says, at the actual prompt lengths (10 %: a decode window of 0.1-0.3 s
    # on a busy CI machine; the pacing itself is held to 0.5 % in tests/unit/test_standin_pacing.py)
    for folder, taper in (("old", OLD_TAPER), ("new", NEW_TAPER)):
        settings = StandinSettings.from_environ({"STANDIN_TAPER": taper})
        for target in LENGTHS:
            doc = json.loads(next((runs / folder).glob(f"c1-p{target}-r2.json")).read_text())["point"]
            expected = settings.decode_rate_for(round(doc["prompt_tokens_actual"]["p50"]))
            assert doc["decode_tok_s"]["p50"] == pytest.approx(expected, rel=0.10), (folder, target)

    reference = tmp_path / "ds4.csv"
    reference.write_text(
        "# name: DS4-0731\n# statistic: p50 of 2\nprompt_tokens,decode_tok_s,concurrency\n256,160,1\n1024,253,1\n"
        "4096,160,1\n"
    )
    png = tmp_path / "compare.png"
    folders = [str(runs / f) for f in ("old", "new", "new-c2", "short")]
    compare = run("bench", "compare", *folders, "--reference", str(reference), "--plot", str(png), "--json")
    assert compare.returncode == 0, compare.stderr
    doc = json.loads(compare.stdout)
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert doc["baseline"] == old and [s["label"] for s in doc["series"]] == [old, "new", "new-c2", short, "DS4-0731"]
    assert doc["differences"]["profile"] == [old, new, new, short]
    rows = {(r["series"], r["prompt_tokens_target"] or round(r["prompt_tokens"])): r for r in doc["rows"]}

    # the table's ratios are the artifacts' ratios; the two tapers make them move with prompt length
    ratios = {t: rows[("new", t)]["decode_ratio"] for t in LENGTHS}
    for target in LENGTHS:
        assert ratios[target] == pytest.approx(decode_p50(runs / "new", target) / decode_p50(runs / "old", target))
        assert rows[("new", target)]["comparable"] and rows[("new", target)]["notes"] == []
        assert rows[("DS4-0731", target)]["decode_ratio"] == pytest.approx(
            (160.0 if target != 1024 else 253.0) / decode_p50(runs / "old", target)
        )
    assert ratios[256] < 1 < ratios[1024] and ratios[4096] < 1

    # not comparable, and why, per row
    c2 = rows[("new-c2", 1024)]
    assert c2["notes"] == ["C2 vs C1", "24 vs 64 output tokens", "1 round vs p50 of 2"] and not c2["comparable"]
    assert c2["decode_ratio"] == pytest.approx(decode_p50(runs / "new-c2", 1024, 2) / decode_p50(runs / "old", 1024))
    shortfall = rows[(short, 1024)]
    assert shortfall["notes"] == ["1 round vs p50 of 2", "1 flagged (short_completion)"]
    assert shortfall["decode_tok_s"] is None and not shortfall["comparable"]

    table = run("bench", "compare", *folders[:2], "--reference", str(reference))
    assert table.returncode == 0, table.stderr
    assert all(len(line) <= 80 for line in table.stdout.splitlines()), table.stdout
    assert f"{ratios[1024]:.2f}x" in table.stdout and "DS4-0731" in table.stdout
