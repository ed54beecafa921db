"""A service as ``servectl status`` lists it, for the tests of how services are printed."""

from __future__ import annotations

from servectl.service.services import ServiceInfo


def sample_service(profile: str = "demo", **changes: object) -> ServiceInfo:
    """A ready service of ``profile`` (container ``servectl-<profile>``, port 8190, cards 0 and 1, up 2m05s);
    ``changes`` override any field."""
    base: dict[str, object] = dict(
        container_id="c" * 64,
        container_name=f"servectl-{profile}",
        profile=profile,
        plan_hash="0123456789abcdef",
        state="ready",
        exit_code=None,
        oom_killed=False,
        host="127.0.0.1",
        port=8190,
        gpus=(0, 1),
        started_at=1.0,
        uptime_s=125.0,
        stop_grace_s=5,
        drift=False,
    )
    base.update(changes)
    return ServiceInfo(**base)  # type: ignore[arg-type]
