"""Host methods on campaigns: a bring-up sweep over variants of one profile, decided against an incumbent."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from servectl.host.base import HostBase

if TYPE_CHECKING:
    from servectl.adapters.campaign_db import CampaignDb
    from servectl.campaign.lab import PointBench
    from servectl.campaign.output import CampaignOutcome
    from servectl.campaign.progress import CampaignProgress
    from servectl.campaign.variants import CampaignCheck
    from servectl.service.context import Context


class CampaignCommands(HostBase):
    """Campaigns over the host's profile search path and environment."""

    def check_campaign(self, *, file: Path | str, skip_invalid: bool = False) -> CampaignCheck:
        """Read campaign ``file`` and load, validate and compile its base, incumbent and every variant, starting
        nothing (what ``servectl campaign validate`` does, and what a run does before anything starts); where a
        variant's image is on this host, its argv is parsed by the image's own SGLang too (not a stand-in's).

        ``skip_invalid``: an invalid variant is kept as a ``rejected-invalid`` row (``CampaignCheck.
        invalid_variants``) instead of refusing the campaign.

        Raises:
            ProfileError: every problem of the file, its profiles or (without ``skip_invalid``) its variants,
                one per line with file and line (exit 2).
        """
        from servectl.campaign.lab import image_parser
        from servectl.campaign.load import load_campaign
        from servectl.campaign.variants import check_campaign

        return check_campaign(
            load_campaign(Path(file)),
            folders=self.ctx.profile_folders,
            environ=self.environ,
            skip_invalid=skip_invalid,
            parse=image_parser(lambda: self.ctx.docker),
        )

    def run_campaign(
        self,
        *,
        file: Path | str,
        out_dir: Path | str,
        skip_invalid: bool = False,
        bench_point: PointBench | None = None,
    ) -> CampaignOutcome:
        """Run campaign ``file`` into folder ``out_dir``, or resume the one there (``servectl campaign run``).

        Every variant is checked first (:meth:`check_campaign`); each is written to ``out_dir/profiles/`` as a
        profile that extends the base with only its overrides, started on the bench port through ``swap``,
        qualified and measured in interleaved rounds; every repeat is committed to ``out_dir/campaign.sqlite``,
        so running it again after ``kill -9`` measures nothing twice. What ran before is put back at the end
        however the run ends; meanwhile a gateway in front of it answers its aliases 503 ``maintenance`` with
        the campaign's ETA (``Retry-After``). Each objective of the file then picks its operating point among the
        incumbent and the accepted variants, and an accepted one is written beside the winner as
        ``winner/<campaign>.<objective>.yaml`` (``CampaignOutcome.objectives``). ``bench_point`` measures one
        point (tests pass a fake; default: ``bench``).

        Raises:
            ProfileError: the campaign file or a variant is invalid (nothing started).
            StartupFailed: the incumbent did not start (production is put back).
        """
        from dataclasses import replace

        from servectl.adapters.campaign_db import CampaignDb
        from servectl.adapters.gateway_admin import GatewayMaintenance
        from servectl.adapters.state import atomic_write_text
        from servectl.campaign.lab import ServiceLab, bench_point_of_profile, gates_suite, variant_file
        from servectl.campaign.objectives import write_objectives
        from servectl.campaign.output import write_outputs
        from servectl.campaign.references import incumbent_references
        from servectl.campaign.run import run_campaign
        from servectl.service.context import Context
        from servectl.service.recover import recover

        check = self.check_campaign(file=file, skip_invalid=skip_invalid)
        folder = Path(out_dir)
        profiles = folder / "profiles"
        for variant in check.valid_variants:
            atomic_write_text(profiles / f"{variant.profile_name}.yaml", variant_file(check, variant))
        searched = self.environ.get("SERVECTL_PROFILES", "")
        environ = {**self.environ, "SERVECTL_PROFILES": f"{profiles}:{searched}" if searched else str(profiles)}
        ctx = Context(  # the host's adapters, with the campaign's profiles first on the search path
            environ=environ,
            state_dir=self.ctx.state_dir,
            docker=self.ctx.docker,
            gpus=self.ctx.gpus,
            probe=self.ctx.probe,
            http=self.ctx.http,
            conflicts=self.ctx.conflicts,
            lock_timeout_s=self.ctx.lock_timeout_s,
            scope=self.ctx.scope,
            clocks=self.ctx.clocks,
        )
        try:
            recover(ctx)  # a swap of this campaign killed mid-way (kill -9) is settled before anything else
            with CampaignDb(folder) as db:
                before = _production(db, ctx, check)
                lab = ServiceLab(
                    ctx, check, folder, bench_point or bench_point_of_profile, suite=gates_suite(check), before=before
                )
                # production is away until the campaign ends: a gateway in front of it says so (503 maintenance)
                reason = f"campaign {check.loaded.campaign.name} ({folder})"
                with GatewayMaintenance(ctx.state_dir, profiles=before, reason=reason, eta_s=0.0) as away:
                    lab.gateway = away
                    rows = run_campaign(check, db=db, lab=lab, clocks=ctx.clocks)
                outcome = write_outputs(folder, check, rows, db)
                points = write_objectives(folder, check, rows, db, folders=ctx.profile_folders, environ=environ)
                references = tuple(incumbent_references(check.loaded))
                return replace(
                    outcome, objectives=tuple(points), references=references, incumbent_decode=_incumbent_decode(db)
                )
        finally:
            ctx.close()

    def resume_campaign(self, *, folder: Path | str, bench_point: PointBench | None = None) -> CampaignOutcome:
        """Continue the campaign in ``folder`` from its database (after ``kill -9``, a reboot or SIGINT): the file
        it was run from, read again; nothing already measured is measured again.

        Raises:
            UsageError: no campaign in ``folder``, or its file changed since the run began.
        """
        from servectl.campaign.progress import campaign_file_of

        return self.run_campaign(
            file=campaign_file_of(Path(folder)), out_dir=folder, skip_invalid=True, bench_point=bench_point
        )

    def campaign_status(self, *, folder: Path | str) -> CampaignProgress:
        """Where the campaign in ``folder`` stands, read from its database only (also while another process runs
        it): each variant's status and repeats, the last event, an ETA. Opens no adapter."""
        from servectl.campaign.progress import read_progress

        return read_progress(Path(folder))


def _production(db: CampaignDb, ctx: Context, check: CampaignCheck) -> tuple[str, ...]:
    """What the campaign takes away: the ready services in the way of its incumbent or a variant (same port,
    container name or card; the ones its swaps stop), read now and recorded by its first run; a resumed run reads
    the record (a run killed with ``kill -9`` left one of its variants running, which is not what to put back).
    Services the campaign's profiles do not touch are not production here: they run on, unnamed."""
    import json

    from servectl.service.swap_preflight import overlaps

    stored = db.meta().get("production")
    if stored is not None:
        return tuple(json.loads(stored))
    mine = [check.incumbent, *check.valid_variants]
    resolved = [ctx.resolve(v.profile_name) for v in mine]
    ready = tuple(
        s.profile
        for s in ctx.runtime.services(probe=False)
        if s.state == "ready" and any(overlaps(s, r) for r in resolved)
    )
    db.set_meta("production", json.dumps(ready))
    return ready


def _incumbent_decode(db: CampaignDb) -> dict[str, float | None]:
    """The incumbent's median decode tok/s per point over the campaign's repeats (beside its earlier figures)."""
    import statistics

    from servectl.campaign.schedule import INCUMBENT

    values: dict[str, list[float]] = {}
    for m in db.measurements():
        decode = (m.detail.get("metrics") or {}).get("decode_tok_s") if m.variant == INCUMBENT else None
        if decode is not None:
            values.setdefault(m.point, []).append(float(decode))
    return {point: statistics.median(v) for point, v in values.items()}
