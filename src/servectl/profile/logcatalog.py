"""Log catalogs: every line an engine build can print, read off its source, to check log patterns against.

A catalog is a text file ``catalogs/logs/<name>.txt`` made by ``scripts/extract_sglang_catalogs.py`` from the
logger calls of the wheel (:mod:`servectl.profile.engine_dump`), one template per printed line::

    info<TAB>sglang/srt/entrypoints/http_server.py:2600<TAB>The server is fired up and ready to roll!

``{}`` in a template is a value formatted in at run time; ``{{`` and ``}}`` are literal braces. A few lines come
from libraries SGLang runs (uvicorn's startup lines, tqdm progress bars that SGLang labels); the file says so.

A pattern (a regex, searched in each line as the health gate does) *can match* a template when it matches some
line the template prints with at least half of the matched text literal text of the template (values are tried
as neutral ones and as pieces of the pattern): a pattern that matches mostly inside a formatted value (a model
name, a backend name) relies on a value, not on a line the engine prints.

Standard-library only, like :mod:`servectl.profile.catalog`.
"""

from __future__ import annotations

import bisect
import difflib
import re
import re._constants as sre_constants  # type: ignore[import-not-found]  # the regex parser (stdlib, no stubs)
import re._parser as sre_parse  # type: ignore[import-not-found]
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

from servectl.files import read_text_bounded
from servectl.profile.catalog import SUGGESTIONS

#: A log catalog is a few hundred KiB; a larger file is not one.
MAX_CATALOG_BYTES = 64 * 2**20

LOG_CATALOG_DIR = Path(__file__).resolve().parent / "catalogs" / "logs"
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{\}")
#: Values tried in the formatted slots of a template, besides pieces of the pattern itself.
_FILLERS = ("0", "1.00", "x", "")


@dataclass(frozen=True)
class LogTemplate:
    """One line the engine can print."""

    level: str
    where: str  # file:line in the engine source
    template: str  # {} = a formatted value

    @property
    def parts(self) -> tuple[str, ...]:
        """The literal text between formatted values (one more part than values)."""
        return _parts(self.template)

    def format(self, *values: object) -> str:
        """The line with ``values`` formatted in, in order.

        Raises:
            ValueError: the number of values differs from the number of slots.
        """
        parts = self.parts
        if len(values) != len(parts) - 1:
            raise ValueError(f"{self.template!r} has {len(parts) - 1} values, got {len(values)}")
        return "".join(part + str(value) for part, value in zip(parts, (*values, ""), strict=True))

    def shown(self) -> str:
        """The template for people: ``…`` where a value goes."""
        return "…".join(self.parts)


@lru_cache(maxsize=8192)
def _parts(template: str) -> tuple[str, ...]:
    parts, current = [], []
    pos = 0
    for match in _PLACEHOLDER.finditer(template):
        current.append(template[pos : match.start()])
        if match.group() == "{}":
            parts.append("".join(current))
            current = []
        else:
            current.append(match.group()[0])
        pos = match.end()
    current.append(template[pos:])
    parts.append("".join(current))
    return tuple(parts)


def escape_template(text: str, placeholder: str) -> str:
    """A raw template (``placeholder`` marks values) in catalog notation."""
    return text.replace("{", "{{").replace("}", "}}").replace(placeholder, "{}")


class LogCatalog:
    """The lines one engine build can print, with pattern checks."""

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self._raw = text  # the file; rows and objects are made only when a question needs them
        self._memo: dict[str, bool] = {}

    @cached_property
    def _rows(self) -> list[tuple[str, str, str]]:
        rows = []
        for line in self._raw.splitlines():
            if line and not line.startswith("#"):
                level, where, template = line.split("\t", 2)
                rows.append((level, where, template))
        return rows

    @cached_property
    def templates(self) -> tuple[LogTemplate, ...]:
        return tuple(LogTemplate(*row) for row in self._rows)

    def _in_literal_text(self, literal: str) -> bool:
        """Whether ``literal`` (no braces, no newline) occurs in a template column of the file as written.

        Found there, it is inside one template's literal text: a value shows as ``{}``. Reads the file text
        itself, so the common case costs no parsing.
        """
        raw = self._raw
        pos = raw.find(literal)
        while pos >= 0:
            start = raw.rfind("\n", 0, pos) + 1
            if not raw.startswith("#", start):
                first = raw.find("\t", start)
                second = raw.find("\t", first + 1)
                if 0 <= first < second < pos:
                    return True
            pos = raw.find(literal, pos + 1)
        return False

    @cached_property
    def _text(self) -> str:
        """All literal text, one template per line (values as NUL), for finding candidate templates."""
        return "\n".join("\x00".join(t.parts) for t in self.templates)

    @cached_property
    def _starts(self) -> list[int]:
        starts = [0]
        for t in self.templates[:-1]:
            starts.append(starts[-1] + len("\x00".join(t.parts)) + 1)
        return starts

    # -- loading ----------------------------------------------------------------------------------------
    @staticmethod
    def available() -> list[str]:
        return sorted(p.stem for p in LOG_CATALOG_DIR.glob("*.txt"))

    @classmethod
    def load(cls, name: str) -> LogCatalog:
        """Load a shipped log catalog (same name as the flag catalog, e.g. ``sglang-0.5.23``).

        Raises:
            KeyError: no log catalog of that name is shipped.
        """
        path = LOG_CATALOG_DIR / f"{name}.txt"
        if not re.fullmatch(r"[A-Za-z0-9._+-]+", name) or not path.is_file():
            raise KeyError(f"no log catalog {name!r}; shipped: {', '.join(cls.available())}")
        return _load(path)

    @classmethod
    def parse(cls, text: str, *, name: str) -> LogCatalog:
        return cls(name, text)

    # -- questions --------------------------------------------------------------------------------------
    def template(self, template: str) -> LogTemplate:
        """The catalog entry with exactly this template text.

        Raises:
            KeyError: the engine prints no such line.
        """
        for t in self.templates:
            if t.template == template:
                return t
        raise KeyError(f"{template!r} is not a line of log catalog {self.name}")

    def line_of(self, line: str) -> LogTemplate | None:
        """The template that prints exactly ``line`` (the message, without the log prefix), if any."""
        for t in self.templates:
            if _template_regex(t.template).fullmatch(line):
                return t
        return None

    def can_match(self, pattern: str) -> bool:
        """Whether ``pattern`` (a regex) matches literal text of some line the engine prints."""
        known = self._memo.get(pattern)
        literal = _literal_text(pattern) if known is None else None
        if literal is not None and not {"{", "}", "\n", "\t"} & set(literal) and self._in_literal_text(literal):
            known = self._memo[pattern] = True  # printed as it is, inside one template's literal text
        if known is None:
            known = self._memo[pattern] = any(True for _ in self.matching(pattern, limit=1))
        return known

    def matching(self, pattern: str, *, limit: int = 3) -> list[LogTemplate]:
        """Up to ``limit`` templates whose lines ``pattern`` can match (see the module docstring)."""
        regex = re.compile(pattern)
        runs = _literal_runs(pattern)
        fillers = _fillers(runs)
        longest = max(runs, key=len, default="")
        candidates: Iterable[int] = self._candidates(longest) if len(longest) >= 8 else range(len(self.templates))
        found: list[LogTemplate] = []
        for index in candidates:
            if _mostly_literal_match(regex, self.templates[index].parts, fillers):
                found.append(self.templates[index])
                if len(found) >= limit:
                    break
        return found

    def nearest(self, pattern: str, n: int = SUGGESTIONS) -> list[LogTemplate]:
        """Templates that look most like ``pattern``, for "did you mean" hints."""
        probe = (_literal_text(pattern) or " ".join(_literal_runs(pattern))).lower()
        words = {w for w in re.split(r"[^a-z0-9]+", probe) if len(w) > 2}
        scored = []
        for t in self.templates:
            if t.level == "debug":
                continue
            text = t.shown().lower()
            shared = sum(1 for w in words if w in text)
            if shared:
                scored.append((shared, difflib.SequenceMatcher(None, probe, text[:200]).quick_ratio(), t))
        scored.sort(key=lambda s: (-s[0], -s[1]))
        return [t for _, _, t in scored[:n]]

    def _candidates(self, fragment: str) -> list[int]:
        """Indexes of templates whose literal text holds a 4-character piece of ``fragment``.

        A match is at least half literal text, so a fragment of 8 or more characters leaves a piece there.
        """
        hits: set[int] = set()
        for probe in {fragment[i : i + 4] for i in range(len(fragment) - 3)}:
            pos = self._text.find(probe)
            while pos >= 0:
                hits.add(bisect.bisect_right(self._starts, pos) - 1)
                pos = self._text.find(probe, pos + 1)
        return sorted(hits)


def _fillers(runs: list[str]) -> tuple[str, ...]:
    """Values to try in a template's slots: neutral ones, and each run of words of the pattern's literal text."""
    out = list(_FILLERS)
    for run in runs:
        words = [w for w in re.split(r"(?<=[\s=:,(\[])|(?=[\s=:,)\]])", run) if w]
        for i in range(len(words)):
            for j in range(i + 1, min(len(words), i + 8) + 1):
                piece = "".join(words[i:j]).strip()
                if piece and piece not in out:
                    out.append(piece)
    return tuple(out[:64])


def _mostly_literal_match(regex: re.Pattern[str], parts: tuple[str, ...], fillers: tuple[str, ...]) -> bool:
    """Whether ``regex`` matches a sample line of the template with at least half of the match literal text."""
    for filler in fillers:
        line, literal_at = "", []
        for i, part in enumerate(parts):
            literal_at.append((len(line), len(line) + len(part)))
            line += part + (filler if i + 1 < len(parts) else "")
        for match in regex.finditer(line):
            start, end = match.span()
            literal = sum(max(0, min(end, b) - max(start, a)) for a, b in literal_at)
            if end > start and 2 * literal >= end - start:
                return True
    return False


def _literal_text(pattern: str) -> str | None:
    """The text a pattern matches when it is a plain literal (``Load weight end``, ``a\\.b``), else None."""
    try:
        parsed = sre_parse.parse(pattern)
    except re.error:
        return None
    chars = []
    for op, arg in parsed:
        if op is not sre_constants.LITERAL:
            return None
        chars.append(chr(arg))
    return "".join(chars) or None


def _literal_runs(pattern: str) -> list[str]:
    """The runs of literal characters at the top level of a regex."""
    try:
        parsed = sre_parse.parse(pattern)
    except re.error:
        return []
    runs, current = [], ""
    for op, arg in parsed:
        if op is sre_constants.LITERAL:
            current += chr(arg)
        else:
            runs.append(current)
            current = ""
    runs.append(current)
    return [r for r in runs if r]


@lru_cache(maxsize=4096)
def _template_regex(template: str) -> re.Pattern[str]:
    return re.compile("(?s:.*?)".join(re.escape(p) for p in _parts(template)))


_CACHE: dict[Path, LogCatalog] = {}


def _load(path: Path) -> LogCatalog:
    cached = _CACHE.get(path)
    if cached is None:
        text = read_text_bounded(path, limit_bytes=MAX_CATALOG_BYTES, what="log catalog")
        cached = _CACHE[path] = LogCatalog.parse(text, name=path.stem)
    return cached
