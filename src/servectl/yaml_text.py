"""The one way servectl writes YAML text: comment lines escaped, the document by the YAML emitter. Pure.

A comment carries text that came from outside (a recipe's id or reason, a container's name, a profile's
source path): a line break in it would end the comment and write real keys into the file (a recipe reason
``"x\\nconflicts: [{container: victim}]"`` would make ``servectl swap`` stop an unrelated container).
:func:`comment` writes each comment as exactly one line: line breaks (YAML's: ``\\n``, ``\\r``, NEL, LS, PS)
and every character YAML may not carry are written as Python escapes (``\\n``), so the text stays readable
and nothing of it can leave the comment. The document itself is only ever written by PyYAML's emitter
(:func:`dump`), which quotes what needs quoting.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["comment", "dump", "with_header"]

#: Line breaks (PyYAML reads NEL, LS and PS as breaks too) and what its reader refuses as non-printable.
_UNSAFE = re.compile("[\n\r\x85\u2028\u2029\ufeff]|[^\x09\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def comment(text: str, *, prefix: str = "# ") -> str:
    """``text`` as one YAML comment line: ``prefix`` + the text with breaks and unprintables escaped."""
    return prefix + _UNSAFE.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


def dump(data: Mapping[str, Any], *, width: int = 110) -> str:
    """The YAML block text of ``data`` (keys in their order), written by PyYAML's safe emitter."""
    import yaml

    return yaml.safe_dump(dict(data), sort_keys=False, width=width, default_flow_style=False)


def with_header(header: Iterable[str], body: str) -> str:
    """``body`` (emitter output) under comment lines, each made by :func:`comment` (``# `` added)."""
    lines = [comment(line) for line in header]
    return "".join(line + "\n" for line in lines) + body
