"""Publication safety of a finding: every copied artifact redacted, size limits checked before writing.

The finding's ledger and README are generated from the redacted copies; :func:`check_bundle` scans every
file once more before anything is written, so that nothing of :class:`~servectl.redact.Publication`
survives into a folder meant to be published.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from servectl.errors import UsageError
from servectl.redact import Publication, publication_leaks, redact_publication

MIB = 2**20
#: Default limits: one artifact, and the whole finding folder.
MAX_FILE_BYTES = 16 * MIB
MAX_BUNDLE_BYTES = 64 * MIB


@dataclass(frozen=True)
class FindingLimits:
    """Size limits of a finding (bytes)."""

    max_file_bytes: int = MAX_FILE_BYTES
    max_bundle_bytes: int = MAX_BUNDLE_BYTES


@dataclass(frozen=True)
class Redacted:
    """One artifact's text after redaction, and how many replacements were made."""

    text: str
    replacements: int


def redact_artifact(raw: bytes, publication: Publication) -> Redacted:
    """An artifact's bytes as published text."""
    text, count = redact_publication(raw.decode("utf-8", "replace"), publication)
    return Redacted(text=text, replacements=count)


def check_bundle(
    files: Mapping[str, str], *, limits: FindingLimits, existing_bytes: int, publication: Publication
) -> None:
    """Refuse a finding whose files are too large or still carry something private.

    Args:
        files: The files to write: path inside the finding -> text.
        limits: The size limits.
        existing_bytes: Bytes already in the finding folder (earlier editions).
        publication: What must not survive.

    Raises:
        UsageError: one line per file over the per-file limit, the bundle over its limit, or a leak.
    """
    problems = []
    total = existing_bytes
    for path, text in files.items():
        size = len(text.encode("utf-8"))
        total += size
        if size > limits.max_file_bytes:
            problems.append(
                f"report: {path} would be {size / MIB:.1f} MiB, over the per-file limit of "
                f"{limits.max_file_bytes / MIB:.1f} MiB; raise --max-file-mib or measure fewer repeats"
            )
        for leak in publication_leaks(text, publication):
            problems.append(f"report: {path} still carries {leak} after redaction; remove it from the evidence")
    if total > limits.max_bundle_bytes:
        problems.append(
            f"report: the finding would be {total / MIB:.1f} MiB, over the per-bundle limit of "
            f"{limits.max_bundle_bytes / MIB:.1f} MiB; raise --max-bundle-mib or report fewer points"
        )
    if problems:
        raise UsageError("\n".join(problems))
