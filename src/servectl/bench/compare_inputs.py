"""What ``bench compare`` reads: ``bench --out`` folders and reference CSVs, into :class:`Series`.

A run is read from its ``summary.json`` (schema ``servectl.bench/v1`` or ``v2``; the failure kinds of flagged requests
from the point files). A reference is a small CSV typed from a published figure or an older log::

    # name: DS4-0731
    # source: data/tapers/retaper-ds4-0731-realistic.log
    # statistic: p50 of 3
    # max_tokens: 512
    prompt_tokens,decode_tok_s,concurrency,ttft_s
    4096,160,1,
    65536,253,1,
    200000,160,1,

``prompt_tokens`` and ``decode_tok_s`` are required columns, ``concurrency`` and ``ttft_s`` optional (a cell
may be empty); ``#`` lines are comments, of which ``name``, ``source``, ``statistic`` and ``max_tokens`` are
read. Every problem is a :class:`~servectl.errors.UsageError` of one line naming the file (and line).
"""

from __future__ import annotations

import csv
import difflib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from servectl.bench.artifacts import READABLE_ARTIFACT_SCHEMAS, SUMMARY_FILE
from servectl.bench.compare import DEFAULT_TOLERANCE, Comparison, Series, SeriesPoint, compare_series
from servectl.bench.model import Stat
from servectl.errors import UsageError
from servectl.files import FileRefused, read_bounded

#: Larger files are refused unread: a summary is a few KiB, a point file with every request a few hundred.
MAX_ARTIFACT_BYTES = 32 * 2**20
MAX_REFERENCE_BYTES = 2**20
REFERENCE_COLUMNS = ("prompt_tokens", "decode_tok_s", "concurrency", "ttft_s")
REFERENCE_KEYS = ("name", "source", "statistic", "max_tokens")
_RUN_FIX = "give a folder written by `servectl bench --out`"


def _read_bytes(path: Path, limit: int, what: str) -> bytes:
    try:
        return read_bounded(path, limit_bytes=limit, what=what)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file; check the path") from None
    except FileRefused as err:
        raise UsageError(f"{path}: {err.reason}") from None


def _read_json(path: Path) -> dict[str, Any]:
    raw = _read_bytes(path, MAX_ARTIFACT_BYTES, "bench artifact")
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UsageError(f"{path}: not JSON ({err}); {_RUN_FIX}") from err
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: not a bench artifact (a JSON object); {_RUN_FIX}")
    return doc


class _Fields:
    """Typed reads of a JSON artifact that fail with ``FILE: dotted.path: what is wrong``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, what: str) -> UsageError:
        return UsageError(f"{self.path}: {where}: {what}; the artifact is damaged or not written by servectl bench")

    def obj(self, doc: Mapping[str, Any], key: str, where: str = "") -> Mapping[str, Any]:
        value = doc.get(key)
        if not isinstance(value, dict):
            raise self.fail(f"{where}{key}", "missing or not an object")
        return value

    def int_(self, doc: Mapping[str, Any], key: str, where: str = "", *, optional: bool = False) -> int | None:
        value = doc.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(f"{where}{key}", f"{value!r} is not a whole number")
        return value

    def str_(self, doc: Mapping[str, Any], key: str, where: str = "") -> str | None:
        value = doc.get(key)
        if value is not None and not isinstance(value, str):
            raise self.fail(f"{where}{key}", f"{value!r} is not text")
        return value

    def stat(self, doc: Mapping[str, Any], key: str, where: str) -> Stat | None:
        value = doc.get(key)
        if value is None:
            return None
        numbers = value if isinstance(value, dict) else {}
        parts = [numbers.get(k) for k in ("p50", "min", "max", "n")]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in parts):
            raise self.fail(f"{where}{key}", "not a statistic with p50, min, max and n")
        p50, lo, hi, n = parts
        return Stat(p50=float(p50), min=float(lo), max=float(hi), n=int(n))  # type: ignore[arg-type]


def _flag_kinds(folder: Path, point: Mapping[str, Any]) -> tuple[str, ...]:
    """Failure kinds of a point's flagged requests, from its point file (empty when it cannot be read)."""
    name = point.get("file")
    if not isinstance(name, str) or "/" in name or "\\" in name:
        return ()
    try:
        doc = _read_json(folder / name)
    except UsageError:
        return ()  # the count in the summary still flags the point
    requests = doc.get("requests")
    kinds = {r.get("failure") for r in requests if isinstance(r, dict)} if isinstance(requests, list) else set()
    return tuple(sorted(k for k in kinds if isinstance(k, str)))


def _run_point(fields: _Fields, folder: Path, index: int, point: Any) -> SeriesPoint:
    where = f"points[{index}]."
    if not isinstance(point, dict):
        raise fields.fail(f"points[{index}]", "not an object")
    target = fields.int_(point, "prompt_tokens_target", where)
    actual = fields.stat(point, "prompt_tokens_actual", where)
    flagged = fields.int_(point, "requests_flagged", where, optional=True) or 0
    return SeriesPoint(
        prompt_tokens=actual.p50 if actual is not None else float(target or 0),
        decode_tok_s=fields.stat(point, "decode_tok_s", where),
        ttft_s=fields.stat(point, "ttft_s", where),
        concurrency=fields.int_(point, "concurrency", where),
        prompt_tokens_target=target,
        flagged_requests=flagged,
        flagged_kinds=_flag_kinds(folder, point) if flagged else (),
        skipped=fields.str_(point, "skipped", where),
        source=str(point.get("file") or f"points[{index}]"),
    )


def statistic_of(repeats: int | None) -> str | None:
    """How a run's point values are made: ``p50 of 3`` (rounds per point), or ``1 round``."""
    if repeats is None:
        return None
    return "1 round" if repeats == 1 else f"p50 of {repeats}"


def read_run(folder: Path, *, label: str | None = None) -> Series:
    """Read the run a ``servectl bench --out`` folder holds.

    Raises:
        UsageError: no ``summary.json`` there, another schema version, or a damaged field (one line, the file).
    """
    if folder.name == SUMMARY_FILE and folder.is_file():  # the summary itself names its folder
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such folder; {_RUN_FIX}")
    summary = folder / SUMMARY_FILE
    if not summary.is_file():
        inside = sorted(p.parent.name for p in folder.glob(f"*/{SUMMARY_FILE}"))
        if inside:  # e.g. STATE/bench, which holds one folder per run
            runs = f"{len(inside)} bench run" + ("s" if len(inside) > 1 else "")
            raise UsageError(f"{folder}: holds {runs} in sub-folders; give one of them, e.g. {folder / inside[-1]}")
        raise UsageError(f"{folder}: no bench artifacts ({SUMMARY_FILE} is missing); {_RUN_FIX}")
    doc = _read_json(summary)
    schema = doc.get("schema")
    if schema not in READABLE_ARTIFACT_SCHEMAS:
        readable = " or ".join(repr(s) for s in READABLE_ARTIFACT_SCHEMAS)
        raise UsageError(
            f"{summary}: artifact schema {schema!r} is not {readable}, the ones this servectl reads; "
            "compare it with the servectl version that wrote it"
        )
    fields = _Fields(summary)
    if doc.get("kind") != "summary":
        raise fields.fail("kind", f"{doc.get('kind')!r} is not 'summary'")
    provenance = fields.obj(doc, "provenance")
    settings = fields.obj(doc, "request_settings")
    plan = fields.obj(doc, "plan")
    server = fields.obj(doc, "server")
    points = doc.get("points")
    if not isinstance(points, list):
        raise fields.fail("points", "missing or not a list")
    return Series(
        label=label or str(provenance.get("profile") or folder.name),
        kind="run",
        path=folder,
        points=tuple(_run_point(fields, folder, i, p) for i, p in enumerate(points)),
        profile=fields.str_(provenance, "profile", "provenance."),
        plan_hash=fields.str_(provenance, "plan_hash", "provenance."),
        image_digest=fields.str_(provenance, "image_digest", "provenance."),
        model=fields.str_(server, "model", "server."),
        max_tokens=fields.int_(settings, "max_tokens", "request_settings."),
        statistic=statistic_of(fields.int_(plan, "repeats", "plan.")),
        run_id=fields.str_(doc, "run_id"),
        started_at=fields.str_(doc, "started_at"),
    )


class _ReferenceReader:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.meta: dict[str, str] = {}

    def fail(self, line: int, what: str) -> UsageError:
        return UsageError(f"{self.path}:{line}: {what}")

    def comment(self, line: int, text: str) -> None:
        key, sep, value = text.lstrip("#").partition(":")
        key = key.strip().lower()
        if sep and key in REFERENCE_KEYS:
            if key in self.meta:
                raise self.fail(line, f"'# {key}:' given twice; keep one")
            self.meta[key] = value.strip()

    def header(self, line: int, cells: list[str]) -> list[str]:
        names = [c.strip().lower() for c in cells]
        for name in names:
            if name not in REFERENCE_COLUMNS:
                close = difflib.get_close_matches(name, REFERENCE_COLUMNS, n=1)
                hint = f"did you mean {close[0]}?" if close else f"columns: {', '.join(REFERENCE_COLUMNS)}"
                raise self.fail(line, f"unknown column {name!r}; {hint}")
        missing = [c for c in REFERENCE_COLUMNS[:2] if c not in names]
        if missing or len(set(names)) != len(names):
            example = ",".join(REFERENCE_COLUMNS)
            raise self.fail(line, f"the header needs prompt_tokens and decode_tok_s once each, e.g. {example}")
        return names

    def number(self, line: int, column: str, text: str, *, whole: bool, minimum: float) -> float | None:
        text = text.strip().replace("_", "")
        if not text:
            if column in REFERENCE_COLUMNS[:2]:
                raise self.fail(line, f"{column} is empty; every row needs prompt_tokens and decode_tok_s")
            return None
        try:
            value = float(int(text)) if whole else float(text)
        except ValueError:
            kind = "a whole number" if whole else "a number"
            raise self.fail(line, f"{column} {text!r} is not {kind}, e.g. {_EXAMPLES[column]}") from None
        if not math.isfinite(value) or value < minimum:
            raise self.fail(line, f"{column} {text!r} must be {'at least' if minimum else '>='} {minimum:g}")
        return value

    def point(self, line: int, names: list[str], cells: list[str]) -> SeriesPoint:
        if len(cells) != len(names):
            raise self.fail(line, f"{len(cells)} cells for {len(names)} columns ({','.join(names)})")
        row = dict(zip(names, cells, strict=True))
        tokens = self.number(line, "prompt_tokens", row["prompt_tokens"], whole=True, minimum=1)
        decode = self.number(line, "decode_tok_s", row["decode_tok_s"], whole=False, minimum=1e-9)
        ttft = self.number(line, "ttft_s", row.get("ttft_s", ""), whole=False, minimum=0)
        concurrency = self.number(line, "concurrency", row.get("concurrency", ""), whole=True, minimum=1)
        return SeriesPoint(
            prompt_tokens=float(tokens or 0),
            decode_tok_s=None if decode is None else Stat(p50=decode, min=decode, max=decode, n=1),
            ttft_s=None if ttft is None else Stat(p50=ttft, min=ttft, max=ttft, n=1),
            concurrency=None if concurrency is None else int(concurrency),
            source=f"{self.path.name}:{line}",
        )


_EXAMPLES = {"prompt_tokens": "65536", "decode_tok_s": "253.4", "ttft_s": "1.25", "concurrency": "1"}


def read_reference(path: Path) -> Series:
    """Read a reference CSV (``prompt_tokens,decode_tok_s[,concurrency][,ttft_s]``, ``# name:`` line).

    Raises:
        UsageError: the file cannot be read, or a line is wrong (one line naming the file and line number).
    """
    raw = _read_bytes(path, MAX_REFERENCE_BYTES, "reference CSV")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); save it as UTF-8") from err
    reader = _ReferenceReader(path)
    names: list[str] | None = None
    points: list[SeriesPoint] = []
    seen: dict[tuple[float, int | None], int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("#"):
            reader.comment(number, line.strip())
            continue
        if not line.strip():
            continue
        cells = next(csv.reader([line]))
        if names is None:
            names = reader.header(number, cells)
            continue
        point = reader.point(number, names, cells)
        key = (point.prompt_tokens, point.concurrency)
        if key in seen:
            raise reader.fail(number, f"prompt_tokens {point.prompt_tokens:.0f} is already on line {seen[key]}")
        seen[key] = number
        points.append(point)
    if not points:
        raise UsageError(f"{path}: no data rows; give a header line and one row per prompt length")
    max_tokens = reader.meta.get("max_tokens")
    if max_tokens is not None and not max_tokens.isdigit():
        raise UsageError(f"{path}: '# max_tokens: {max_tokens}' is not a whole number of output tokens")
    return Series(
        label=reader.meta.get("name") or path.stem,
        kind="reference",
        path=path,
        points=tuple(points),
        max_tokens=int(max_tokens) if max_tokens else None,
        statistic=reader.meta.get("statistic") or None,
        note=reader.meta.get("source") or None,
    )


def _unique_labels(series: list[Series]) -> list[Series]:
    """Runs of one profile are told apart by their folder names (then by their paths)."""
    from dataclasses import replace

    for attr in ("name", "path"):
        labels = [s.label for s in series]
        series = [
            replace(s, label=(s.path.name if attr == "name" else str(s.path)))
            if s.kind == "run" and labels.count(s.label) > 1
            else s
            for s in series
        ]
    return series


def compare_bench(
    *,
    runs: Sequence[Path],
    references: Sequence[Path] = (),
    baseline: str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> Comparison:
    """Read ``bench --out`` folders and reference CSVs and compare them (see :func:`compare_series`).

    Raises:
        UsageError: a folder without bench artifacts, another artifact schema, a bad reference line, an
            unknown baseline (each one line naming the file).
    """
    series = [read_run(Path(p)) for p in runs] + [read_reference(Path(p)) for p in references]
    return compare_series(_unique_labels(series), baseline=baseline, tolerance=tolerance)
