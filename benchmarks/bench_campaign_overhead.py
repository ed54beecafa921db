"""servectl's own overhead per variant in a campaign, measured on the stand-in engine in Docker.

A small campaign (an incumbent and ``--variants`` stand-in variants, two points, repeats ``--repeats``) runs
through :meth:`servectl.host.Host.run_campaign` exactly as ``servectl campaign run`` does: every variant checked,
started on the bench port through swap, measured by bench, each repeat committed to SQLite, the table, figures
and winner written, production put back. Its wall time is split from the campaign's own records:

* engine startup: each visit's startup as the swap measured it (container start to the health gate's pass),
  from the campaign database's ``visits``;
* measured requests: each repeat's ``measured_s`` (the wall time of its measured rounds) from its bench
  ``summary.json``; the warm-up request of each repeat (``warmup.e2e_s`` of its point file) is counted apart,
  as engine time (it is a request the engine serves) and shown;
* servectl's overhead: the rest - checking and compiling the variants, writing profiles, swap's preflight,
  staging, stopping the previous container (Docker's stop and the stand-in's exit are in it), bench's client
  and probes, SQLite commits, the decisions, the outputs and the restore.

Reported per visit - from the end of one visit to the end of the next, less that visit's engine startup and
requests: what servectl adds each time a variant is started and measured once at every point, the cost that
repeats multiply (median over the visits; target <= 1 s) - and once per campaign: before the first visit's
engine work (imports, checking and compiling every variant) and after the last (campaign.json, README, figures,
putting production back). The run is in-process, so the CLI's own start (~0.3 s,
``benchmarks/bench_status_help.py``) is not in it. ``--compare-tls`` runs a second campaign with httpx's default
TLS context built for every client (what bench and the health gate did before :mod:`servectl.adapters.tls`),
the ratio of the two in one run.

    flock /tmp/servectl-docker.lock python benchmarks/bench_campaign_overhead.py [--variants 2] [--repeats 3]

Exit status 1 when the median overhead per visit exceeds ``--max-overhead-s`` (default 1.0).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _swap_harness import bench_folders, standin_image, write_standin_profile  # noqa: E402


def campaign_file(path: Path, base: str, *, variants: int, repeats: int) -> Path:
    rates = [400 + 40 * (i + 1) for i in range(variants)]
    lines = [
        f"name: overhead-{base[-6:]}",
        f"base: {base}",
        "variants:",
        *[
            f'  - {{name: v{i}, overrides: {{engine: {{env: {{STANDIN_TOKEN_RATE: "{r}"}}}}}}}}'
            for i, r in enumerate(rates)
        ],
        "workload:",
        "  points:",
        "    - {name: c1, prompt_tokens: 64, concurrency: 1, max_tokens: 32}",
        "    - {name: c2, prompt_tokens: 64, concurrency: 2, max_tokens: 32}",
        f"decision: {{primary_point: c1, min_repeats: {repeats}, max_repeats: {repeats}, sequential: fixed}}",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _visit_startups(folder: Path) -> dict[tuple[str, int], float]:
    """(side, round) -> the engine startup the swap measured for that visit (0 when no swap was needed)."""
    import sqlite3

    with sqlite3.connect(f"file:{folder / 'campaign.sqlite'}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT variant, round, startup_s FROM visits").fetchall()
    return {(str(v), int(r)): float(s or 0.0) for v, r, s in rows}


def run_once(args: argparse.Namespace, *, label: str) -> dict[str, Any]:
    """One campaign on the stand-in, its wall time split (see the module docstring); prints its lines."""
    from servectl.adapters.campaign_db import CampaignDb
    from servectl.host import Host
    from servectl.standin.process import free_port
    from servectl.testing.docker import remove_test_session

    session, folder, _home = bench_folders("campaign")
    base = f"cbase-{session[-6:]}"
    image = standin_image()
    write_standin_profile(
        folder, base, session=session, image=image, port=free_port(), delay_s=0, env={"STANDIN_TOKEN_RATE": "400"}
    )
    file = campaign_file(folder.parent / "campaign.yaml", base, variants=args.variants, repeats=args.repeats)
    out = folder.parent / "run"
    try:
        with Host() as host:
            t0, t_wall0 = time.perf_counter(), time.time()
            outcome = host.run_campaign(file=file, out_dir=out)
            wall, t_wall1 = time.perf_counter() - t0, time.time()
    finally:
        remove_test_session(session)
    with CampaignDb(out, read_only=True) as db:
        measurements = db.measurements()
    engine: dict[tuple[str, int], float] = {}  # (side, round) -> its measured and warm-up requests' time
    ends: dict[tuple[str, int], float] = {}  # (side, round) -> when its last repeat was committed
    measured = warmup = 0.0
    for m in measurements:
        artifacts = out / str(m.detail["artifacts"])
        point = json.loads((artifacts / "summary.json").read_text())["points"][0]
        warm = json.loads((artifacts / str(point["file"])).read_text()).get("warmup") or {}
        m_s, w_s = float(point["measured_s"] or 0.0), float(warm.get("e2e_s") or 0.0)
        measured += m_s
        warmup += w_s
        key = (m.variant, m.round)
        engine[key] = engine.get(key, 0.0) + m_s + w_s
        ends[key] = max(ends.get(key, 0.0), m.measured_at)
    starts = _visit_startups(out)
    order = sorted(ends, key=lambda k: ends[k])
    # steady state: from the end of one visit to the end of the next, less that visit's engine startup and requests
    per_visit = [ends[v] - ends[b] - starts.get(v, 0.0) - engine[v] for b, v in itertools.pairwise(order)]
    startup = sum(starts.values())
    sides = args.variants + 1
    overhead = wall - startup - measured - warmup
    before_first = ends[order[0]] - t_wall0 - starts.get(order[0], 0.0) - engine[order[0]]
    after_last = t_wall1 - ends[order[-1]]
    median = statistics.median(per_visit)
    print(
        f"[{label}] campaign of {sides} sides (incumbent + {args.variants} variants) x 2 points x {args.repeats} "
        f"repeats on the stand-in: {len(order)} visits, {len(measurements)} repeats measured, wall {wall:.2f} s"
    )
    print(
        f"  engine startup {startup:.2f} s, measured requests {measured:.2f} s, warm-up requests {warmup:.2f} s; "
        f"servectl overhead {overhead:.2f} s in all"
    )
    print(
        f"  per visit (a variant started and measured once at every point), end to end less the engine's startup "
        f"and requests: median {median:.3f} s, max {max(per_visit):.3f} s over {len(per_visit)} visits"
    )
    print(
        f"  once per campaign: {before_first:.2f} s before the first visit's engine work (imports, checking and "
        f"compiling every variant, the database), {after_last:.2f} s after the last (campaign.json, README, "
        f"figures, putting production back); {overhead / sides:.2f} s per side all told"
    )
    print(f"  statuses: { ({r.name: r.status for r in outcome.rows}) }")
    return {
        "label": label,
        "sides": sides,
        "repeats": args.repeats,
        "points": 2,
        "visits": len(order),
        "repeats_measured": len(measurements),
        "wall_s": round(wall, 3),
        "engine_startup_s": round(startup, 3),
        "measured_requests_s": round(measured, 3),
        "warmup_requests_s": round(warmup, 3),
        "overhead_s": round(overhead, 3),
        "overhead_per_visit_median_s": round(median, 3),
        "overhead_per_visit_max_s": round(max(per_visit), 3),
        "overhead_before_first_visit_s": round(before_first, 3),
        "overhead_after_last_visit_s": round(after_last, 3),
        "overhead_per_side_s": round(overhead / sides, 3),
        "statuses": {r.name: r.status for r in outcome.rows},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-overhead-s", type=float, default=1.0)
    parser.add_argument(
        "--compare-tls",
        action="store_true",
        help="run a second campaign with httpx's default TLS context per client (the code before adapters/tls.py)",
    )
    parser.add_argument("--out", type=Path, help="also write the numbers as JSON here")
    args = parser.parse_args()

    results = [run_once(args, label="servectl")]
    if args.compare_tls:
        import servectl.adapters.tls as tls
        import servectl.bench.runner as runner

        def httpx_default(url: str | None) -> bool:
            return True

        for module in (tls, runner):  # the health gate imports it from tls when it runs, bench when loaded
            module.__dict__["verify_for"] = httpx_default
        results.append(run_once(args, label="httpx default TLS per client"))
        ratio = results[1]["overhead_per_visit_median_s"] / max(results[0]["overhead_per_visit_median_s"], 1e-9)
        print(f"per-visit overhead, httpx's default TLS per client / servectl's: {ratio:.2f}")
    median = results[0]["overhead_per_visit_median_s"]
    print(
        f"servectl's overhead per variant visit {median:.3f} s -> "
        f"{'PASS' if median <= args.max_overhead_s else 'MISS'} (target <= {args.max_overhead_s:g} s)"
    )
    if args.out:
        args.out.write_text(json.dumps({"target_per_visit_s": args.max_overhead_s, "runs": results}, indent=2) + "\n")
    return 0 if median <= args.max_overhead_s else 1


if __name__ == "__main__":
    raise SystemExit(main())
