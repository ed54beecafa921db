"""One module per gate; each exposes ``run(run: GateRun, spec) -> GateResult``.

A gate never raises for what the server does (errors, bad answers): it records a failed case whose message
names the case and the reason. :class:`GateRun` (in :mod:`.common`) carries what every gate needs; the gates
import it from there, never through this package face.
"""

from __future__ import annotations

from servectl.bench.qualify.gates.common import GateRun, clip, merged

__all__ = ["GateRun", "clip", "merged"]
