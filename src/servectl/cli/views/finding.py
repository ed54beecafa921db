"""What ``servectl report`` and ``servectl claims verify`` print: where a finding went, its one-line post, the
registry record's line; and the size limits the report's options name in MiB."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servectl.bench.finding.publish import FindingLimits
    from servectl.bench.finding.registry import RegistryExport
    from servectl.bench.finding.report import ReportResult


def finding_limits(*, max_file_mib: float, max_bundle_mib: float) -> FindingLimits:
    """The per-file and per-bundle limits of ``--max-file-mib`` / ``--max-bundle-mib``."""
    from servectl.bench.finding.publish import MIB, FindingLimits

    return FindingLimits(max_file_bytes=int(max_file_mib * MIB), max_bundle_bytes=int(max_bundle_mib * MIB))


def short_post(ledger: Any) -> str:
    """The one-line post of a finding's ledger (no trailing newline)."""
    from servectl.bench.finding.render import render_short

    return render_short(ledger).rstrip()


def short_post_of(folder: Path) -> str:
    """The one-line post of the finding in ``folder`` (after it recounted)."""
    from servectl.bench.finding.verify import read_ledger

    return short_post(read_ledger(folder))


def finding_lines(result: ReportResult) -> list[str]:
    """``finding: DIR (edition N, M claims)`` and one line per claim a correction superseded."""
    claims = [c for c in result.ledger["claims"] if c.get("status") == "current"]
    lines = [f"finding: {result.folder} (edition {result.edition}, {len(claims)} claims)"]
    return lines + [f"  superseded: {superseded}" for superseded in result.superseded]


def registry_line(result: RegistryExport) -> str:
    """``registry record: FILE (ID, N rows, schema-checked)``."""
    rows = len(result.document["rows"])
    return f"registry record: {result.path} ({result.document['id']}, {rows} rows, schema-checked)"
