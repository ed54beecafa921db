"""Qualify a managed profile: its running service (as bench finds it) and what the profile says about it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from servectl.bench.qualify.model import ServiceFacts
from servectl.bench.target import BenchTarget

if TYPE_CHECKING:
    from servectl.service.context import Context


@dataclass(frozen=True)
class QualifyTarget:
    """The service to qualify, its provenance and facts, and the suite file the profile names."""

    bench: BenchTarget
    facts: ServiceFacts
    suite_file: Path


def qualify_target(ctx: Context, *, name: str, read_cards: bool = True) -> QualifyTarget:
    """The running service of profile ``name`` (see :func:`servectl.bench.target.bench_target`) and its facts.

    Raises:
        UsageError: the profile does not run the plan it compiles to now, or names a suite that does not exist.
    """
    from servectl.bench.qualify.suite import suite_path
    from servectl.bench.target import bench_target

    target = bench_target(ctx, name=name, command="qualify", read_cards=read_cards)
    loaded = ctx.resolve(name).loaded
    profile = loaded.profile
    args = profile.engine.args

    def parser(flag: str) -> str | None:
        value = args.get(flag)
        return str(value) if value else None

    facts = ServiceFacts(
        known=True,
        reasoning_parser=parser("reasoning-parser"),
        multimodal=profile.model.multimodal,
        context_length=profile.engine.context_length,
        vram_reserve_mib=profile.gpus.vram_reserve_mib,
        reserve_waiver=profile.gpus.reserve_waiver,
        free_vram=target.context.free_vram_after if target.context else None,
    )
    return QualifyTarget(
        bench=target, facts=facts, suite_file=suite_path(profile.qualify, relative_to=loaded.file.path.parent)
    )
