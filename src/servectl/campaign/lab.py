"""The campaign's lab on a real host: each variant started through swap, measured by bench, qualified by qualify.

:class:`ServiceLab` is the :class:`~servectl.campaign.run.Lab` that ``servectl campaign run`` uses. It works
through the one :class:`~servectl.service.context.Context` it is given, whose profile search path starts with
the campaign folder's ``profiles/`` (each variant written there as ``<campaign>.<variant>.yaml``: ``extends``
the base with only its overrides), so ``swap`` stages, starts and gates a variant exactly as it would a profile
of the user's, all-or-nothing, and ``recover`` finds it after a crash. What ran before the campaign is
recorded when the lab is built and put back by :meth:`ServiceLab.restore`, once, however the run ends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl.campaign.model import HIGHER_IS_BETTER, Point
from servectl.campaign.run import Measured, Started
from servectl.campaign.variants import CampaignCheck, CheckedVariant
from servectl.errors import ServectlError, StartupFailed, SwapError
from servectl.signals import Interrupt

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerEngine
    from servectl.adapters.gateway_admin import GatewayMaintenance
    from servectl.bench.model import PointResult
    from servectl.bench.qualify.suite import LoadedSuite
    from servectl.campaign.variants import ImageParse
    from servectl.plan.compile import LaunchPlan
    from servectl.profile.loader import LoadedProfile
    from servectl.service.context import Context

#: Measures one point of the running variant into a folder: (context, profile, settings, folder) -> the point.
PointBench = Callable[["Context", str, Any, Path], "PointResult"]


def bench_point_of_profile(ctx: Context, profile: str, settings: Any, out: Path) -> PointResult:
    """One point of ``profile``'s running service, measured by ``servectl bench`` into ``out`` (artifacts and
    manifest as a bench run writes them)."""
    from servectl.bench.profile_run import run_profile_bench

    return run_profile_bench(ctx, name=profile, settings=settings, out_dir=out).report.points[0]


def metric_value(point: PointResult, metric: str) -> float | None:
    """A repeat's value of ``metric`` at one point (None when no request was good)."""
    if metric == "output_tok_per_min":
        return point.output_tok_per_min if point.output_tokens else None
    stat = getattr(point, metric)
    return None if stat is None else float(stat.p50)


@dataclass
class ServiceLab:
    """Variants started through swap on this host and measured by bench (see the module docstring)."""

    ctx: Context
    check: CampaignCheck
    folder: Path
    bench_point: PointBench
    suite: LoadedSuite | None = None  # the campaign's gates: its suite, cut to the gate ids it names
    before: tuple[str, ...] = field(default=())  # the servectl profiles that ran when the campaign began
    restored: bool = False
    gateway: GatewayMaintenance | None = None  # production's aliases answered 503 maintenance meanwhile

    def eta_s(self) -> float:
        """When production is expected back: the campaign's ETA from its measured visits (before any: a visit
        of 60 s per variant and round at most), plus production's last measured start."""
        from servectl.adapters.gateway_admin import way_back_s
        from servectl.campaign.progress import read_progress

        eta = read_progress(self.folder).eta_s
        if eta is None:
            decision = self.check.loaded.campaign.decision
            eta = 60.0 * (len(self.check.valid_variants) + 1) * decision.max_repeats
        back = way_back_s(self.ctx.state_dir, self.ctx.history, self.before[0]) if self.before else None
        return eta + (back or 0.0)

    def start(self, variant: CheckedVariant) -> Started:
        from servectl.service.swap import SwapOptions, swap

        if self.gateway is not None:
            self.gateway.update(self.eta_s())

        try:
            result = swap(self.ctx, target=variant.profile_name, opts=SwapOptions())
        except StartupFailed as err:
            return Started(None, (str(err), *err.last_log_lines))
        except SwapError as err:
            if err.signum is not None:  # the user's signal, not the variant's failure: the campaign stops
                raise Interrupt(err.signum) from None
            failure = getattr(err.result, "target_failure", None)
            lines = tuple(getattr(failure, "last_log_lines", ()) or ())
            return Started(None, (str(err).splitlines()[0], *lines))
        except ServectlError as err:  # refused before anything started (preflight, a conflict, the lock)
            return Started(None, (str(err).splitlines()[0],))
        return Started(result.target_startup_s or 0.0, image_id=self._image_id(variant.profile_name))

    def _image_id(self, profile: str) -> str | None:
        """The image id of ``profile``'s running container (what its measurements ran on, pinned or not)."""
        from servectl.plan.compile import LABEL_PROFILE

        for container in self.ctx.docker.list_managed({LABEL_PROFILE: profile}):
            if container.status == "running":
                image = (self.ctx.docker.container_document(container.id) or {}).get("Image")
                if image:  # the container's own image, whatever its tag points at now
                    return str(image)
                info = self.ctx.docker.image(container.image)
                return info.id if info is not None else None
        return None

    def qualify(self, variant: CheckedVariant) -> str | None:
        from servectl.bench.qualify.profile_run import run_profile_qualify
        from servectl.bench.qualify.settings import QualifySettings

        result = run_profile_qualify(
            self.ctx,
            name=variant.profile_name,
            settings=QualifySettings(suite=self.suite),
            out_dir=self.folder / "qualify" / variant.name,
        )
        failed = [g.gate for g in result.report.gates if g.verdict == "fail"]
        return failed[0] if failed else None

    def measure(self, variant: CheckedVariant, point: Point, round_index: int) -> Measured:
        from servectl.bench.settings import BenchSettings

        w = self.check.loaded.campaign.workload
        settings = BenchSettings(
            prompt_tokens=(point.prompt_tokens,),
            concurrency=(point.concurrency,),
            max_tokens=point.max_tokens,
            repeats=1,
            warmup=w.warmup or point.prefix == "warm",  # a warm point's first request fills the cache
            shared_prefix=point.prefix == "warm",
            fixed_length=w.fixed_length,
            timeout_s=w.timeout_s,
        )
        out = self.folder / "bench" / variant.name / f"r{round_index}-{point.name}"
        result = self.bench_point(self.ctx, variant.profile_name, settings, out)
        flagged = any(r.failure is not None for r in result.requests if r.role == "measure")
        value = metric_value(result, self.check.loaded.campaign.decision.metric)
        metrics = {name: metric_value(result, name) for name in HIGHER_IS_BETTER}  # what the objectives read
        return Measured(value, flagged, {"artifacts": str(out.relative_to(self.folder)), "metrics": metrics})

    def free_vram_mib(self) -> list[int] | None:
        from servectl.adapters.gpu import MIB, reads_cards

        cards = self.ctx.gpus
        if not reads_cards(cards):
            return None
        try:
            devices = cards.snapshot().devices
        except ServectlError:  # the driver went away mid-campaign: no reading, as bench's free VRAM after
            return None
        return [d.memory_free_bytes // MIB for d in devices if d.memory_free_bytes is not None]

    def restore(self) -> None:
        """Put back what ran before (each profile the campaign took away), or stop the last variant when
        nothing ran."""
        if self.restored:
            return
        self.restored = True
        from servectl.service.runtime import down
        from servectl.service.swap import SwapOptions, swap

        # no guard of its own (one would roll an interrupted way back to the variant): run_campaign's guard for the
        # way back turns a signal into Abandon, which the swap takes as a signal in its undo (journal kept)
        if self.before:
            for profile in self.before:  # each comes back in the place a variant took (the first, a variant's)
                swap(self.ctx, target=profile, opts=SwapOptions(handle_signals=False))
            return
        prefix = self.check.loaded.campaign.name + "."
        for service in self.ctx.runtime.services():
            if service.profile.startswith(prefix):
                down(self.ctx, name=service.profile)


def image_parser(docker_of: Callable[[], DockerEngine]) -> ImageParse:
    """The image's own SGLang asked of each variant's argv where the image is on this host, as ``swap``'s
    staging and ``validate --in-image`` ask it (one throwaway container per distinct argv). Not asked: a
    stand-in image (its parser is servectl's catalog, which the variant passed), an image not here, or no
    Docker engine; a probe that cannot run (no Python or SGLang in the image) is no verdict on the variant."""
    from servectl.adapters.engine_image import ParseMemo
    from servectl.preflight.facts import STANDIN_LABEL

    memo = ParseMemo()

    def parse(loaded: LoadedProfile, plan: LaunchPlan) -> str | None:
        image = loaded.profile.image
        if image.build == "standin":
            return None
        try:
            docker = docker_of()  # opened only for an image that may be here
            info = docker.image(plan.docker.image)
            if info is None or STANDIN_LABEL in info.labels:
                return None
            verdict = memo.parse(
                image=plan.docker.image, argv=plan.engine_argv, engine=docker, entrypoint=image.entrypoint or None
            )
        except ServectlError:
            return None
        if verdict.parsed:
            return None
        return (
            f"SGLang {verdict.sglang_version} in image {plan.docker.image} rejects its argv: {verdict.error} "
            f"(servectl validate PROFILE --in-image asks the same)"
        )

    return parse


def gates_suite(check: CampaignCheck) -> LoadedSuite | None:
    """The campaign's gates as a suite: ``gates.suite`` with only the gate ids ``gates.only`` names (all of them
    when it names none); None when the campaign has no gates."""
    import hashlib

    from servectl.bench.qualify.suite import LoadedSuite, load_suite, suite_path

    gates = check.loaded.campaign.gates
    if gates.suite is None:
        return None
    loaded = load_suite(suite_path(gates.suite, relative_to=check.loaded.path.parent))
    if not gates.only:
        return loaded
    kept = loaded.suite.gates.model_copy(
        update={name: None for name in type(loaded.suite.gates).model_fields if name not in gates.only}
    )
    cut = loaded.suite.model_copy(update={"gates": kept})
    digest = hashlib.sha256(f"{loaded.sha256}:{','.join(gates.only)}".encode()).hexdigest()
    return LoadedSuite(suite=cut, source=f"{loaded.source} (only {', '.join(gates.only)})", sha256=digest)


def variant_file(check: CampaignCheck, variant: CheckedVariant) -> str:
    """The YAML of ``variant``'s profile: the base ``extends``-ed with only the variant's overrides."""
    import yaml

    document = {
        "name": variant.profile_name,
        "extends": check.loaded.campaign.base,
        "description": variant.spec.description or f"campaign {check.loaded.campaign.name}: {variant.name}",
        "status": "candidate",
        "evidence": None,
        **dict(variant.spec.overrides),
    }
    header = (
        f"# Variant {variant.name} of campaign {check.loaded.campaign.name} ({check.loaded.path}), written by "
        "servectl campaign run.\n"
    )
    return header + yaml.safe_dump(document, sort_keys=False)
