"""Host methods that measure a running service: bench and qualify."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl.host.base import HostBase

if TYPE_CHECKING:
    from servectl.bench.model import BenchProgressEvent
    from servectl.bench.profile_run import ProfileBenchResult
    from servectl.bench.qualify.model import QualifyProgressEvent
    from servectl.bench.qualify.profile_run import ProfileQualifyResult


class MeasureCommands(HostBase):
    """Benchmark and qualify through the host's environment, Docker engine and GPU inventory."""

    # -- measure -------------------------------------------------------------------------------------------
    def bench(
        self,
        *,
        name: str | None = None,
        url: str | None = None,
        model: str | None = None,
        api_key_env: str | None = None,
        prompt_tokens: Sequence[int] | None = None,
        concurrency: Sequence[int] = (1,),
        repeats: int = 3,
        max_tokens: int = 512,
        warmup: bool = True,
        timeout_s: float = 900.0,
        seed: int = 0,
        out_dir: Path | None = None,
        plot: Path | None = None,
        progress: Callable[[BenchProgressEvent], None] | None = None,
    ) -> ProfileBenchResult:
        """Benchmark profile ``name``'s running service (or the server at ``url``) and write the evidence.

        What ``servectl bench`` does; the arguments are those of
        :func:`servectl.bench.profile_run.run_profile_bench` (``prompt_tokens`` None: its default lengths),
        with the host's environment, Docker engine (to find the service) and GPU inventory (free VRAM after).
        """
        from servectl.bench.profile_run import run_profile_bench

        lengths: dict[str, Any] = {} if prompt_tokens is None else {"prompt_tokens": prompt_tokens}
        return run_profile_bench(
            name=name,
            url=url,
            model=model,
            api_key_env=api_key_env,
            concurrency=concurrency,
            repeats=repeats,
            max_tokens=max_tokens,
            warmup=warmup,
            timeout_s=timeout_s,
            seed=seed,
            out_dir=out_dir,
            plot=plot,
            progress=progress,
            environ=self.environ,
            **self._measured(name),
            **lengths,
        )

    def qualify(
        self,
        *,
        name: str | None = None,
        url: str | None = None,
        model: str | None = None,
        suite: str | None = None,
        api_key_env: str | None = None,
        seed: int = 0,
        out_dir: Path | None = None,
        progress: Callable[[QualifyProgressEvent], None] | None = None,
        via_gateway: bool = False,
        api_key_file: Path | None = None,
    ) -> ProfileQualifyResult:
        """Qualify profile ``name``'s running service (or the server at ``url``) and write ``qualify.json``.

        What ``servectl qualify`` does; the arguments are those of
        :func:`servectl.bench.qualify.profile_run.run_profile_qualify`, with the host's environment, Docker engine
        and GPU inventory.
        """
        from servectl.bench.qualify.profile_run import run_profile_qualify

        return run_profile_qualify(
            name=name,
            url=url,
            model=model,
            suite=suite,
            api_key_env=api_key_env,
            seed=seed,
            out_dir=out_dir,
            progress=progress,
            environ=self.environ,
            via_gateway=via_gateway,
            api_key_file=api_key_file,
            # through the gateway, name is an alias: the engine finds the alias's profile's service
            **({"docker": self.docker} if via_gateway else self._measured(name)),
        )

    def _measured(self, name: str | None) -> dict[str, Any]:
        """The adapters a measurement of profile ``name``'s service reads (none for a bare URL)."""
        if name is None:
            return {}
        return {"docker": self.docker, "gpus": self.ctx.gpus_for(self._resolve(name))}
