"""Keep secrets out of everything servectl prints from an engine's log.

SGLang logs its ``server_args`` at start, ``api_key`` included, and clients send ``Authorization: Bearer``;
log lines that servectl shows (``servectl logs``, the last lines of a failed start or swap) pass through
:func:`redact` first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "***"

_PATTERNS: tuple[re.Pattern[str], ...] = (
    # server_args=ServerArgs(..., api_key='sk-...', ...) and api-key: value / "api_key": "value"
    re.compile(
        r"""(?P<pre>["']?api[_-]key["']?\s*[=:]\s*)(?P<q>["']?)(?P<secret>(?!None\b|null\b)[^"',\s)}]+)(?P=q)""", re.I
    ),
    # --api-key VALUE / --api-key=VALUE on a command line
    re.compile(r"(?P<pre>--api-key[=\s]+)(?P<q>)(?P<secret>[^\s'\"]+)"),
    # Authorization: Bearer VALUE
    re.compile(r"(?P<pre>Bearer\s+)(?P<q>)(?P<secret>[A-Za-z0-9._~+/=-]{4,})", re.I),
)


def redact(line: str, secrets: Iterable[str] = ()) -> str:
    """``line`` with every API key shown as ``***``: known secret values, and the usual key spellings."""
    for secret in secrets:
        if secret:
            line = line.replace(secret, REDACTED)
    for pattern in _PATTERNS:
        line = pattern.sub(lambda m: f"{m.group('pre')}{m.group('q')}{REDACTED}{m.group('q')}", line)
    return line
