"""Bench and qualify run folders for finding tests: a real bench run against the fake server, a qualify report.

Both carry the provenance of profile ``f`` (below) as it compiles now, host facts of two fake RTX PRO 6000
cards and their free VRAM, and are written by the real writers (so they have their artifact manifests).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from bench_fakes import FakeOpenAIServer, ScriptedClock

from servectl.adapters.gpu import MIB
from servectl.bench.artifacts import write_artifacts
from servectl.bench.manifest import host_facts
from servectl.bench.model import BenchContext, CardFreeMemory
from servectl.bench.qualify import CaseResult, GateResult, QualifySettings, ServiceFacts, load_suite, suite_path
from servectl.bench.qualify.evidence import write_evidence
from servectl.bench.qualify.model import ClientOverhead, QualifyReport
from servectl.bench.runner import run_bench
from servectl.bench.settings import BenchSettings
from servectl.plan.resolve import plan_for
from servectl.profile.loader import search_path
from servectl.profile.validate import load_profile
from servectl.testing.fakes import FakeGpuInventory, make_device

DIGEST = "sha256:" + "c" * 64
REVISION = "d" * 40
PROFILE = f"""# yaml-language-server: $schema=../schema/profile.schema.json
name: f
status: candidate
rollback: f-old
image: {{ref: "x/sglang:1", digest: "{DIGEST}"}}
model: {{path: /models/m, repo: org/model-w4, served_name: m, revision: {REVISION}}}
gpus:
  devices: [0, 1]
  vram_reserve_mib: 3072
  reserve_waiver: model-only pair; the 3,072 MiB/card reserve is waived
serve: {{port: 8180, role: bench}}
engine: {{tp: 2, context_length: 32768, kv_cache_dtype: fp8_e4m3}}
"""


def context(free_mib: tuple[int, int]) -> BenchContext:
    loaded = load_profile("f", folders=search_path(environ=os.environ))
    gpus = FakeGpuInventory.of(make_device(0), make_device(1, power_limit_w=250.0))
    return BenchContext(
        profile_name="f",
        plan_hash=plan_for(loaded, environ=os.environ).plan_hash,
        image_digest=DIGEST,
        model_revision=REVISION,
        free_vram_after=lambda: [CardFreeMemory(i, m * MIB) for i, m in enumerate(free_mib)],
        host_facts=lambda: host_facts(gpus, [0, 1]),
    )


def bench_folder(folder: Path, *, rate_tok_s: float = 112.5) -> Path:
    """A two-point bench run (4,096 and 8,192 tokens, C1, three repeats) written into ``folder``."""
    fake = FakeOpenAIServer(clock=ScriptedClock(), rate_tok_s=rate_tok_s, chunk_tokens=2)
    settings = BenchSettings(url="http://127.0.0.1:8180", prompt_tokens=(4096, 8192), repeats=3, max_tokens=40)
    assert fake.clock is not None
    report = run_bench(settings=settings, context=context((2101, 2200)), transport=fake.transport(), clock=fake.clock)
    write_artifacts(report, folder)
    return folder


def gate(name: str, passed: int, total: int) -> GateResult:
    return GateResult.of(
        name, [CaseResult(f"{name} #{i + 1}", i < passed, "" if i < passed else "broke") for i in range(total)]
    )


def qualify_folder(folder: Path, *, gates: tuple[GateResult, ...] | None = None) -> Path:
    """A qualification of profile ``f``: every gate of the default suite passed (tools 20/20, needle 2/2,
    endurance 60/60 among them) and a skipped image gate."""
    gates = gates or (
        gate("tools", 20, 20),
        gate("long_context", 2, 2),
        gate("endurance", 60, 60),
        gate("smoke", 1, 1),
        gate("structured", 6, 6),
        gate("reasoning", 2, 2),
        gate("vram", 2, 2),
        GateResult(gate="image", verdict="skipped", note="the suite asks for no image cases"),
    )
    report = QualifyReport(
        settings=QualifySettings(url="http://127.0.0.1:8180", suite=load_suite(suite_path("default"))),
        context=context((2543, 2600)),
        facts=ServiceFacts(known=True),
        run_id="q1",
        model="m",
        max_model_len=32768,
        gates=gates,
        overhead=ClientOverhead(requests=1, wall_s=1.0, client_cpu_s=0.01),
        started_at="t0",
        finished_at="t1",
        free_vram_after=(CardFreeMemory(0, 2543 * MIB), CardFreeMemory(1, 2600 * MIB)),
    )
    write_evidence(report, folder)
    return folder


def evidence(tmp_path: Path, write_profile: Callable[[str, str], Path]) -> tuple[Path, Path]:
    """Profile ``f`` written, and its bench and qualify run folders."""
    write_profile("f", PROFILE)
    return bench_folder(tmp_path / "bench"), qualify_folder(tmp_path / "qualify")
