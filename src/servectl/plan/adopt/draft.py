"""What adoption produces (:class:`Adoption`), how it refuses (:class:`AdoptError`), and the draft it fills."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from servectl.errors import UsageError

#: The variable an adopted ``--api-key`` is read from (the key itself is never written).
API_KEY_ENV = "SERVECTL_API_KEY"
#: The variable an adopted ``--admin-api-key`` is read from (the key itself is never written either).
ADMIN_KEY_ENV = "SERVECTL_ADMIN_API_KEY"
#: SGLang's defaults for what the argv may leave out.
SGLANG_DEFAULT_HOST = "127.0.0.1"
SGLANG_DEFAULT_PORT = 30000


class AdoptError(UsageError):
    """The container cannot be adopted (not SGLang, already servectl's, model not on the host, ...)."""


@dataclass(frozen=True)
class Adoption:
    """A profile that reproduces a container, with where each value came from and what needs the user.

    Attributes:
        name: the profile name.
        data: the profile, as it is written (keys in the order of the shipped profiles).
        sources: (profile field, where its value came from), for the file's comment header.
        notes: what could not be carried over exactly, or needs doing (one line each).
        exports: environment variables the user must export before servectl starts the profile.
        unknown_flags: engine flags the catalog does not know (kept in ``args`` and ``catalog_extend``).
        origin: how the source is named (``container NAME``, ``registry recipe ID (FILE)``).
        problems: what is wrong in the source itself (a registry recipe): file, JSON pointer, what, the fix -
            one line each.
    """

    name: str
    data: dict[str, Any]
    sources: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]
    exports: tuple[str, ...]
    unknown_flags: tuple[str, ...]
    container_name: str
    container_id: str
    origin: str = ""
    problems: tuple[str, ...] = ()


@dataclass
class Draft:
    """The profile being built, and what is said about it."""

    sources: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    exports: list[str] = field(default_factory=list)

    def source(self, path: str, where: str) -> None:
        self.sources.append((path, where))


def profile_name_for(container_name: str) -> str:
    """A valid profile name from a container name (lower case, other characters as ``-``)."""
    name = re.sub(r"[^a-z0-9._-]+", "-", container_name.lower()).lstrip("._-")[:63].rstrip("._-")
    return name or "adopted"


__all__ = [
    "API_KEY_ENV",
    "SGLANG_DEFAULT_HOST",
    "SGLANG_DEFAULT_PORT",
    "AdoptError",
    "Adoption",
    "Draft",
    "profile_name_for",
]
