"""Keep secrets out of everything servectl prints from an engine's log.

SGLang logs its ``server_args`` at start, ``api_key`` included, clients send ``Authorization: Bearer``, and an
engine may print a token it was given (``HF_TOKEN``); log lines that servectl shows (``servectl logs``, the last
lines of a failed start or swap, the gateway dashboard's log tail) pass through :func:`redact` first. It takes
out the secret values it is given (those the profile references: the API key from its variable or file,
variables named like secrets), ``api_key=``/``--api-key``/``Bearer`` values, and key and token shapes
(``sk-``, ``hf_``, ``ghp_``/``gho_``/..., ``github_pat_``, AWS ``AKIA``, Slack ``xox?-``).

A finding folder (`servectl report`) is published: :func:`redact_publication` also takes out key and token
shapes, the machine's hostnames, user names and home folders, and the host of any non-local URL.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

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


#: Key and token shapes of common services (OpenAI-style ``sk-``, Hugging Face, GitHub, AWS, Slack).
_TOKEN = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,})\b"
)
#: A variable whose name says it holds a secret (its value is redacted wherever it appears).
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.I)


#: Shorter values are not taken out of log lines (a 1-character "secret" would blank every line).
MIN_SECRET_LEN = 6


def secret_env_values(environment: Iterable[str]) -> tuple[str, ...]:
    """The values of the ``NAME=VALUE`` entries whose name reads like a secret, long enough to redact."""
    values = (e.partition("=")[2] for e in environment if SECRET_NAME.search(e.partition("=")[0]))
    return tuple(v for v in dict.fromkeys(values) if len(v) >= MIN_SECRET_LEN)


def redact(line: str, secrets: Iterable[str] = ()) -> str:
    """``line`` with every secret shown as ``***``: known secret values, the usual key spellings, token shapes."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        line = line.replace(secret, REDACTED)
    for pattern in _PATTERNS:
        line = pattern.sub(lambda m: f"{m.group('pre')}{m.group('q')}{REDACTED}{m.group('q')}", line)
    return _TOKEN.sub(REDACTED, line)


# -- publication: what a finding folder must never carry ----------------------------------------------------

#: A home folder of any user: /home/NAME, /Users/NAME (the rest of the path is kept after ``~``).
_HOME_PATH = re.compile(r"(?:/home|/Users)/[^/\s\"'`]+")
#: The host part of a URL that is not the local machine's loopback.
_URL_HOST = re.compile(r"(?P<scheme>https?://)(?:[^@/\s\"']*@)?(?P<host>[^/:\s\"'`]+)")
_LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "0.0.0.0", "::1", "[::1]"})
REDACTED_HOST = "redacted-host"
REDACTED_USER = "redacted-user"


@dataclass(frozen=True)
class Publication:
    """What to take out of a text before it is published, besides the key and token shapes.

    Attributes:
        secrets: Secret values (API keys read from the environment).
        hostnames: This machine's names.
        users: User names.
        homes: Home folders (``/home/alice``), written ``~`` instead.
    """

    secrets: tuple[str, ...] = ()
    hostnames: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    homes: tuple[str, ...] = ()

    @classmethod
    def of_this_host(cls, environ: Mapping[str, str]) -> Publication:
        """This machine's hostname, user, home, and the value of every variable named like a secret."""
        import getpass
        import socket
        from pathlib import Path

        names = {socket.gethostname(), socket.getfqdn(), environ.get("HOSTNAME", "")}
        users = {environ.get("USER", ""), environ.get("LOGNAME", "")}
        with contextlib.suppress(Exception):
            users.add(getpass.getuser())
        secrets = {v for k, v in environ.items() if SECRET_NAME.search(k) and len(v) >= 8 and re.search("[A-Za-z]", v)}
        return cls(
            secrets=tuple(sorted(secrets)),
            hostnames=tuple(sorted(n for n in names if len(n) >= 3 and n not in _LOCAL_HOSTS)),
            users=tuple(sorted(u for u in users if len(u) >= 3 and u != "root")),
            homes=tuple(sorted({str(Path.home()), environ.get("HOME", "")} - {"", "/"})),
        )


def redact_publication(text: str, publication: Publication = Publication()) -> tuple[str, int]:
    """``text`` without secrets, key and token shapes, foreign URL hosts, hostnames, user names and home
    folders; and how many replacements were made."""
    count = 0

    def sub(pattern: re.Pattern[str], repl: str | Callable[[re.Match[str]], str], value: str) -> str:
        nonlocal count
        value, n = pattern.subn(repl, value)
        count += n
        return value

    for secret in publication.secrets:
        count += text.count(secret)
        text = text.replace(secret, REDACTED)
    for pattern in _PATTERNS:
        text = sub(pattern, lambda m: f"{m.group('pre')}{m.group('q')}{REDACTED}{m.group('q')}", text)
    text = sub(_TOKEN, REDACTED, text)
    for home in sorted(publication.homes, key=len, reverse=True):
        text = sub(re.compile(re.escape(home) + r"(?=[/\"'\s`]|$)"), "~", text)
    text = sub(_HOME_PATH, "~", text)
    text = sub(
        _URL_HOST,
        lambda m: m.group(0) if m.group("host") in _LOCAL_HOSTS else f"{m.group('scheme')}{REDACTED_HOST}",
        text,
    )
    for name in publication.hostnames:
        text = sub(re.compile(rf"(?<![\w.-]){re.escape(name)}(?![\w-])"), REDACTED_HOST, text)
    for user in publication.users:
        text = sub(re.compile(rf"(?<![\w-]){re.escape(user)}(?![\w-])"), REDACTED_USER, text)
    return text, count


def publication_leaks(text: str, publication: Publication = Publication()) -> list[str]:
    """What of ``publication`` (and any key or token shape) is still in ``text``: a short label for each."""
    found = [f"secret {s[:4]}..." for s in publication.secrets if s in text]
    found += [f"token {m.group(0)[:6]}..." for m in _TOKEN.finditer(text)]
    found += [f"hostname {h}" for h in publication.hostnames if re.search(rf"(?<![\w.-]){re.escape(h)}(?![\w-])", text)]
    found += [f"user {u}" for u in publication.users if re.search(rf"(?<![\w-]){re.escape(u)}(?![\w-])", text)]
    found += [f"home {h}" for h in publication.homes if h in text]
    found += [f"home {m.group(0)}" for m in _HOME_PATH.finditer(text)]
    return found
