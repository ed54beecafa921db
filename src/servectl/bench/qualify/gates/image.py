"""Image/OCR: images of text, tables, digits and receipts go in as content parts; the answer must name what
they show.

The corpus is a folder with ``manifest.json`` (servectl ships ``corpus/ocr``, made by
``scripts/make_ocr_corpus.py``): per image its file, SHA-256, prompt and the strings an answer must contain.
Every file is checked against its hash before anything is sent (a changed or missing file stops the run). Each
image is sent as an OpenAI ``image_url`` content part holding a ``data:`` URL, after the prompt's text part.
A case passes when every expected string is contained in the answer, both normalized (NFKC, case-folded, every
run of characters other than letters and digits made one space: ``$2.50`` and ``2,50`` both read ``2 50``),
and the answer was not cut at ``max_tokens``. A profile that is not multimodal (``model.multimodal: false``)
skips the gate and says so.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servectl.bench.qualify.gates.common import GateRun, clip, merged
from servectl.bench.qualify.model import CaseResult, GateResult
from servectl.bench.qualify.suite import ImageGate
from servectl.errors import Problem, ProfileError
from servectl.files import FileRefused, read_bounded

GATE = "image"
#: The corpus servectl ships (its manifest).
SHIPPED_CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "ocr" / "manifest.json"
MAX_IMAGE_BYTES = 8 * 2**20
_MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp"}
_NOT_WORD = re.compile(r"[^0-9a-z]+")


@dataclass(frozen=True)
class CorpusImage:
    """One image of the corpus, read and checked against its pinned hash."""

    file: str
    kind: str
    prompt: str
    expect: tuple[str, ...]
    mime: str
    data: bytes = b""

    @property
    def data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode()}"


@dataclass(frozen=True)
class Corpus:
    """The images of one manifest, with its path and hash."""

    name: str
    source: str
    sha256: str
    images: tuple[CorpusImage, ...]


def normalize(text: str) -> str:
    """NFKC, case-folded, every run of other than letters and digits one space (``$2.50`` -> ``2 50``)."""
    return _NOT_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def missing(answer: str, expect: tuple[str, ...]) -> list[str]:
    """The expected strings the answer does not contain (normalized on both sides)."""
    said = f" {normalize(answer)} "
    return [e for e in expect if f" {normalize(e)} " not in said]


def corpus_path(spec: ImageGate, suite_source: str) -> Path:
    """The manifest a suite's image gate names (``shipped``, or a path relative to the suite file)."""
    if spec.corpus == "shipped":
        return SHIPPED_CORPUS
    path = Path(spec.corpus).expanduser()
    path = path if path.is_absolute() else Path(suite_source).parent / path
    return path / "manifest.json" if path.is_dir() else path


def load_corpus(manifest: Path) -> Corpus:
    """Read a corpus manifest and every image it lists, each checked against its SHA-256.

    Raises:
        ProfileError: an unreadable manifest, a bad entry, or a missing or changed image (one line each,
            naming the manifest and the entry).
    """
    try:
        raw = read_bounded(manifest, limit_bytes=MAX_IMAGE_BYTES, what="corpus manifest")
        data = json.loads(raw)
    except FileRefused as err:
        raise ProfileError([Problem(str(manifest), None, "", f"unreadable corpus manifest: {err.reason}")]) from None
    except (OSError, ValueError) as err:
        raise ProfileError([Problem(str(manifest), None, "", f"unreadable corpus manifest: {err}")]) from None
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise ProfileError([Problem(str(manifest), None, "items", "give a list of images (file, sha256, expect)")])
    problems: list[Problem] = []
    images = []
    for index, entry in enumerate(items):
        image = _image(manifest, index, entry, problems)
        if image is not None:
            images.append(image)
    if problems:
        raise ProfileError(problems)
    name = str(data.get("name") or manifest.parent.name)
    return Corpus(name=name, source=str(manifest), sha256=hashlib.sha256(raw).hexdigest(), images=tuple(images))


def _image(manifest: Path, index: int, entry: Any, problems: list[Problem]) -> CorpusImage | None:
    def fail(field: str, message: str) -> None:
        label = entry.get("file") if isinstance(entry, dict) else None
        where = f"items.{index}" + (f" ({label})" if label else "") + (f".{field}" if field else "")
        problems.append(Problem(str(manifest), None, where, message))

    if not isinstance(entry, dict):
        fail("", "an item is a mapping with file, sha256, prompt and expect")
        return None
    file, pinned, expect = entry.get("file"), entry.get("sha256"), entry.get("expect")
    if not isinstance(file, str) or Path(file).name != file or Path(file).suffix.lower() not in _MIME:
        fail("file", f"{file!r} is not a .png, .jpg or .webp file name in the manifest's folder")
        return None
    if not isinstance(pinned, str) or not re.fullmatch(r"[0-9a-f]{64}", pinned):
        fail("sha256", "give the file's SHA-256 (64 hex digits)")
        return None
    if not isinstance(expect, list) or not expect or not all(isinstance(e, str) and normalize(e) for e in expect):
        fail("expect", "give a list of the strings an answer must contain")
        return None
    path = manifest.parent / file
    try:
        content = read_bounded(path, limit_bytes=MAX_IMAGE_BYTES, what="image")
    except FileRefused as err:
        fail("file", f"{path}: {err.reason}")
        return None
    except OSError as err:
        fail("file", f"cannot read {path}: {err.strerror or err}")
        return None
    actual = hashlib.sha256(content).hexdigest()
    if len(content) > MAX_IMAGE_BYTES or actual != pinned:
        fail("sha256", f"{path} has SHA-256 {actual[:16]}..., not the pinned {pinned[:16]}...: the file changed; "
             "restore it, or regenerate the corpus and its manifest (scripts/make_ocr_corpus.py)")  # fmt: skip
        return None
    prompt = entry.get("prompt") or "Transcribe all the text in this image."
    mime = _MIME[Path(file).suffix.lower()]
    return CorpusImage(file, str(entry.get("kind") or ""), str(prompt), tuple(expect), mime, content)


def run(run: GateRun, spec: ImageGate, corpus: Corpus) -> GateResult:
    """Every image (or the first ``spec.limit``), unless the profile is text-only."""
    detail = {"corpus": corpus.name, "source": corpus.source, "sha256": corpus.sha256}
    if run.facts.known and not run.facts.multimodal:
        note = "the profile is text-only (model.multimodal is false): image/OCR skipped"
        return GateResult(gate=GATE, verdict="skipped", note=note, detail=detail)
    chosen = corpus.images[: spec.limit] if spec.limit else corpus.images
    body = merged(spec.extra_body)
    results = []
    for index, image in enumerate(chosen):
        name = f"image {image.file}"
        parts = [{"type": "text", "text": image.prompt}, {"type": "image_url", "image_url": {"url": image.data_url}}]
        exchange = run.client.chat([{"role": "user", "content": parts}], max_tokens=spec.max_tokens, extra_body=body)
        if not exchange.ok:
            result = CaseResult(name, False, f"{name}: {exchange.error}", exchange.latency_s)
        elif exchange.finish_reason == "length":
            message = f"{name}: the answer was cut at max_tokens {spec.max_tokens} (finish_reason length)"
            result = CaseResult(name, False, message, exchange.latency_s)
        else:
            absent = missing(exchange.content, image.expect)
            message = (
                f"{name}: the answer lacks {', '.join(repr(a) for a in absent)}: {clip(exchange.content, 60)!r}"
                if absent
                else f"{name}: {clip(exchange.content, 60)}"
            )
            result = CaseResult(name, not absent, message, exchange.latency_s, {"answer": clip(exchange.content, 300)})
        results.append(result)
        run.report(GATE, index + 1, len(chosen), result)
    gate = GateResult.of(GATE, results)
    return GateResult(gate=GATE, verdict=gate.verdict, cases=gate.cases, detail=detail)
