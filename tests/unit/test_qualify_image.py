"""The image/OCR gate's pure parts: the pinned corpus, normalized containment, and the text-only skip."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tests.unit.gate_runs import gate_run

from servectl.bench.qualify.gates import image
from servectl.bench.qualify.gates.image import SHIPPED_CORPUS, load_corpus, missing, normalize
from servectl.bench.qualify.model import ServiceFacts
from servectl.bench.qualify.suite import ImageGate
from servectl.errors import ProfileError


def test_the_shipped_corpus_has_12_or_more_pinned_png_and_jpeg_images_of_each_kind() -> None:
    corpus = load_corpus(SHIPPED_CORPUS)
    assert len(corpus.images) >= 12
    assert {i.mime for i in corpus.images} == {"image/png", "image/jpeg"}
    assert {i.kind for i in corpus.images} == {"text", "table", "digits", "receipt"}
    png = next(i for i in corpus.images if i.mime == "image/png")
    assert png.data.startswith(b"\x89PNG") and png.data_url.startswith("data:image/png;base64,iVBOR")


def copy_corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "ocr"
    shutil.copytree(SHIPPED_CORPUS.parent, folder)
    return folder / "manifest.json"


def test_a_changed_image_fails_the_load_naming_manifest_and_entry(tmp_path: Path) -> None:
    manifest = copy_corpus(tmp_path)
    target = manifest.parent / "receipt-cafe.png"
    target.write_bytes(target.read_bytes() + b"\0")
    with pytest.raises(ProfileError) as err:
        load_corpus(manifest)
    assert err.value.exit_code == 2
    (line,) = err.value.lines()
    assert line.startswith(f"{manifest}: items.11 (receipt-cafe.png).sha256: {target} has SHA-256 ")
    assert "the file changed" in line


def test_a_missing_image_and_a_bad_entry_are_one_line_each(tmp_path: Path) -> None:
    manifest = copy_corpus(tmp_path)
    (manifest.parent / "text-sign.jpg").unlink()
    data = json.loads(manifest.read_text())
    data["items"][0]["expect"] = []
    manifest.write_text(json.dumps(data))
    with pytest.raises(ProfileError) as err:
        load_corpus(manifest)
    lines = err.value.lines()
    assert len(lines) == 2
    assert "items.0 (text-pangram.png).expect: give a list" in lines[0]
    assert "items.1 (text-sign.jpg).file: cannot read" in lines[1]


@pytest.mark.parametrize(
    ("answer", "expect", "absent"),
    [
        ("| Bread | 1 | $2.50 |", ("bread", "2.50"), []),
        ("TOTAL: 10,40 EUR", ("10.40",), []),
        ("The sign says EXIT 14 B", ("exit 14b",), ["exit 14b"]),
        ("Ｃａｆé LUMEN", ("café lumen",), []),  # NFKC folds the full-width letters
        ("412", ("12",), ["12"]),  # whole tokens: 12 is not read inside 412
    ],
)
def test_expected_strings_are_matched_normalized(answer: str, expect: tuple[str, ...], absent: list[str]) -> None:
    assert missing(answer, expect) == absent


def test_normalize_folds_case_and_punctuation() -> None:
    assert normalize("  SN 4815-1623-42! ") == "sn 4815 1623 42"


def test_a_text_only_profile_skips_the_gate_and_says_so() -> None:
    run = gate_run(None, facts=ServiceFacts(known=True))
    result = image.run(run, ImageGate(), load_corpus(SHIPPED_CORPUS))
    assert result.verdict == "skipped" and result.count == "skipped"
    assert "text-only" in result.note and "model.multimodal" in result.note
