"""Host methods that change what runs all-or-nothing: swap, rollback, rollback_check, recover."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from servectl.host.base import HostBase, ReportHook

if TYPE_CHECKING:
    from servectl.service.recover import RecoverResult
    from servectl.service.rollback import RollbackCheck
    from servectl.service.swap import SwapOptions
    from servectl.service.transaction.model import PhaseEvent, SwapResult


class TransactionCommands(HostBase):
    """The transactions, over the host's context."""

    # -- transactions --------------------------------------------------------------------------------------
    def swap(
        self,
        *,
        name: str | None = None,
        force: Iterable[str] = (),
        on_phase: Callable[[PhaseEvent], None] | None = None,
        on_report: ReportHook | None = None,
        lock_timeout_s: float | None = None,
        stage: bool = True,
    ) -> SwapResult:
        """Replace the running service with profile ``name`` (default: its ``rollback:``), all-or-nothing.

        Args:
            name: the profile to run instead.
            force: preflight check ids to skip.
            on_phase: called as each phase of the transaction begins, progresses and ends.
            on_report: called with the target's preflight report.
            lock_timeout_s: wait for another servectl changing services (default: the host's).
            stage: before the old service stops, check the target's image and pin, parse its argv in the image
                and read its weights ahead into the page cache (:mod:`servectl.service.stage`); ``False`` skips it.

        Raises:
            SwapRolledBack: the target failed and the previous service is back (exit 4).
            SwapFailed: both failed and nothing runs (exit 5).
            PreflightFailed / LockTimeout: nothing changed.
        """
        from servectl.service.swap import swap

        opts = self._swap_options(force, on_phase, on_report, lock_timeout_s, stage)
        return swap(self.ctx, target=name, opts=opts)

    def rollback(
        self,
        *,
        force: Iterable[str] = (),
        on_phase: Callable[[PhaseEvent], None] | None = None,
        on_report: ReportHook | None = None,
        lock_timeout_s: float | None = None,
        stage: bool = True,
    ) -> SwapResult:
        """Swap back to the profile that ran before the current one (from the history); see :meth:`swap`.

        Raises:
            UsageError: nothing runs, several services run, or the history has no earlier profile.
        """
        from servectl.service.rollback import rollback

        opts = self._swap_options(force, on_phase, on_report, lock_timeout_s, stage)
        return rollback(self.ctx, opts=opts)

    def _swap_options(
        self,
        force: Iterable[str],
        on_phase: Callable[[PhaseEvent], None] | None,
        on_report: ReportHook | None,
        lock_timeout_s: float | None,
        stage: bool,
    ) -> SwapOptions:
        """What ``swap`` and ``rollback`` share; staging reads free RAM through the host's probe."""
        from servectl.service.stage import stager
        from servectl.service.swap import SwapOptions

        return SwapOptions(
            force=tuple(force),
            on_phase=on_phase,
            on_report=on_report,
            lock_timeout_s=lock_timeout_s,
            stage=stager(self.ctx.probe, clock=self.ctx.clocks.monotonic) if stage else None,
        )

    def rollback_check(self, *, names: Sequence[str] | None = None) -> list[RollbackCheck]:
        """Prove that each profile's rollback target could start now (profile, image, model, preflight).

        Args:
            names: the profiles whose target to check (default: every profile that has a ``rollback:``).
        """
        from servectl.service.rollback import rollback_check

        return rollback_check(self.ctx, names=names)

    def recover(self, *, lock_timeout_s: float | None = None) -> RecoverResult:
        """Settle a swap, rollback or up that was killed, from the journal it left: bring back what ran before.

        Raises:
            SwapFailed: the previous service did not pass its gate again; nothing of it runs.
            LockTimeout: another servectl process is changing services.
        """
        from servectl.service.recover import recover

        return recover(self.ctx, lock_timeout_s=lock_timeout_s)
