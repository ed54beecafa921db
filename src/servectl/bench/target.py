"""Benchmark a managed profile: find its running service and record the provenance the evidence needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from servectl.errors import UsageError

if TYPE_CHECKING:
    from servectl.adapters.gpu import GpuInventory
    from servectl.bench.model import BenchContext
    from servectl.service.context import Context


@dataclass(frozen=True)
class BenchTarget:
    """Where and what to benchmark, as a profile resolves it."""

    url: str
    model: str | None = None
    api_key_env: str | None = None
    api_key_file: str | None = None  # the profile's serve.api_key_file (read when no variable is named)
    context: BenchContext | None = None


def bench_target(ctx: Context, *, name: str, command: str = "bench", read_cards: bool = True) -> BenchTarget:
    """The running service of profile ``name`` (resolved and listed through ``ctx``), with the plan hash and
    pins its results will carry.

    ``command`` (``bench``, ``qualify``) opens the error messages; ``read_cards`` False reads no GPU inventory
    (the free VRAM after and the peak while it runs stay unknown), nor does a profile without GPUs (its host is
    recorded as unknown, with that reason).

    Raises:
        UsageError: the profile does not run, is not ready, or runs another plan than the profile now has
            (evidence of it would not match the profile).
    """
    from servectl.adapters.gpu import NullGpuInventory, reads_cards
    from servectl.bench.manifest import host_facts
    from servectl.bench.model import BenchContext

    resolved = ctx.resolve(name)
    profile = resolved.loaded.profile
    if not read_cards:
        gpus: GpuInventory = NullGpuInventory(f"{command} reads no cards of {name}")
    elif not profile.gpus.devices:  # nothing of the host to record, no driver to open
        gpus = NullGpuInventory(f"profile {name} uses no GPUs")
    else:
        gpus = ctx.gpus
    reads = reads_cards(gpus)
    listed = [s for s in ctx.runtime.services() if s.running]
    running = [s for s in listed if s.profile == name]
    if not running:
        on_port = [s.profile for s in listed if s.port == profile.serve.port]
        if on_port:  # `up NAME` would be refused: the port is taken
            raise UsageError(
                f"{command} {name}: the profile does not run; {on_port[0]} runs on its port {profile.serve.port}: "
                f"`servectl {command} {on_port[0]}`, or `servectl swap {name}` to replace it first"
            )
        raise UsageError(f"{command} {name}: the profile does not run; start it with `servectl up {name}`")
    service = running[0]
    if service.state != "ready":
        raise UsageError(
            f"{command} {name}: the service is {service.state}; wait for it (servectl status) or restart it"
        )
    if service.plan_hash != resolved.plan.plan_hash:
        raise UsageError(
            f"{command} {name}: the running container has plan {service.plan_hash} but the profile now compiles to "
            f"{resolved.plan.plan_hash}; results would not match the profile: `servectl swap {name}` first"
        )

    def service_cards() -> list[object]:  # free memory after the run, used memory while it runs
        wanted = set(profile.gpus.devices)
        return [d for d in gpus.snapshot().devices if d.index in wanted]

    context = BenchContext(
        profile_name=name,
        plan_hash=resolved.plan.plan_hash,
        image_digest=profile.image.digest,
        model_revision=profile.model.revision,
        free_vram_after=service_cards if reads else None,  # type: ignore[arg-type]
        # a service on no card (the stand-in) has no VRAM to watch: its peak is unknown, not zero
        used_vram=service_cards if reads and profile.gpus.devices else None,  # type: ignore[arg-type]
        host_facts=lambda: host_facts(gpus, profile.gpus.devices),
    )
    return BenchTarget(
        url=service.url,
        model=profile.model.served_name,
        api_key_env=profile.serve.api_key_env,
        api_key_file=secret.name if (secret := resolved.plan.secret) is not None and secret.source == "file" else None,
        context=context,
    )
