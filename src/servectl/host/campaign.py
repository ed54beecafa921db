"""Host methods on campaigns: a bring-up sweep over variants of one profile, decided against an incumbent."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from servectl.host.base import HostBase

if TYPE_CHECKING:
    from servectl.campaign.variants import CampaignCheck


class CampaignCommands(HostBase):
    """Campaigns over the host's profile search path and environment."""

    def check_campaign(self, *, file: Path | str, skip_invalid: bool = False) -> CampaignCheck:
        """Read campaign ``file`` and load, validate and compile its base, incumbent and every variant, starting
        nothing (what ``servectl campaign validate`` does, and what a run does before anything starts).

        ``skip_invalid``: an invalid variant is kept as a ``rejected-invalid`` row (``CampaignCheck.
        invalid_variants``) instead of refusing the campaign.

        Raises:
            ProfileError: every problem of the file, its profiles or (without ``skip_invalid``) its variants,
                one per line with file and line (exit 2).
        """
        from servectl.campaign.load import load_campaign
        from servectl.campaign.variants import check_campaign

        return check_campaign(
            load_campaign(Path(file)),
            folders=self.ctx.profile_folders,
            environ=self.environ,
            skip_invalid=skip_invalid,
        )
