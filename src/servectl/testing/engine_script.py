"""What a fake container does once started: :class:`FakeScript` (log lines at given seconds, then running on or
exiting), and :func:`sglang_like_script`, SGLang 0.5.23's startup as the fake Docker engine plays it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from servectl.service.health import READY_LINE


@dataclass(frozen=True)
class FakeScript:
    """What a fake container does after it starts.

    Attributes:
        lines: (seconds after start, line) in order.
        exit_at_s: when the main process exits by itself (None: runs until stopped).
        exit_code: its exit code then.
        oom_killed: whether Docker reports it OOM-killed.
        ignore_sigterm: a stop waits the whole grace period and ends in SIGKILL (exit 137).
        models: what ``/v1/models`` lists (default: the container's served name).
        chat_status: HTTP status of chat completions once ready.
    """

    lines: tuple[tuple[float, str], ...] = ()
    exit_at_s: float | None = None
    exit_code: int = 0
    oom_killed: bool = False
    ignore_sigterm: bool = False
    models: tuple[str, ...] | None = None
    chat_status: int = 200

    @property
    def ready_at_s(self) -> float | None:
        return next((t for t, line in self.lines if READY_LINE in line), None)


def sglang_like_script(
    delay_s: float = 0.2,
    *,
    crash_at: str | None = None,
    stall_at: str | None = None,
    fatal_line: str | None = None,
    extra_lines: Iterable[str] = (),
    exit_code: int = 1,
    oom_killed: bool = False,
    never_ready: bool = False,
    ignore_sigterm: bool = False,
) -> FakeScript:
    """SGLang 0.5.23's startup lines (each in its log catalog) spread over ``delay_s``, with an optional failure.

    ``crash_at``/``stall_at``/``fatal_line`` take effect at the start of a phase: "weights", "kv_cache",
    "cuda_graph" or "warmup" (``fatal_line`` is written during "kv_cache").
    """
    phases: list[tuple[str, list[str]]] = [
        (
            "weights",
            [
                "Load weight begin. avail mem=94.00 GB",
                "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.00it/s]",
                "Loading safetensors checkpoint shards: 100% Completed | 2/2 [00:02<00:00,  1.00it/s]",
                "Load weight end. elapsed=2.00 s, type=X, dtype=torch.bfloat16, avail mem=80.00 GB, mem usage=4.00 GB.",
            ],
        ),
        (
            "kv_cache",
            [
                "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 524288, K size: 1.00 GB, V size: 1.00 GB",
                "Memory pool end. avail mem=12.00 GB",
            ],
        ),
        (
            "cuda_graph",
            [
                "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=12.00 GB",
                "Capturing batches (bs=1 avail_mem=10.00 GB): 100%|##########| 1/1 [00:00<00:00]",
                "Capture target decode CUDA graph end. bs=[1], elapsed=0.10 s, mem usage=2.00 GB, avail mem=10.00 GB.",
            ],
        ),
        (
            "warmup",
            [
                "INFO:     Uvicorn running on http://0.0.0.0:8190 (Press CTRL+C to quit)",
                *extra_lines,
                READY_LINE,
            ],
        ),
    ]
    total = sum(len(lines) for _, lines in phases)
    step = delay_s / total
    out: list[tuple[float, str]] = []
    t = 0.0
    for phase, lines in phases:
        if phase == crash_at:
            out.append((t, "Scheduler hit an exception: RuntimeError: injected"))
            return FakeScript(tuple(out), exit_at_s=t + step, exit_code=exit_code, oom_killed=oom_killed)
        if phase == stall_at:
            return FakeScript(tuple(out), ignore_sigterm=ignore_sigterm)
        if fatal_line is not None and phase == "kv_cache":
            out.append((t, fatal_line))
            return FakeScript(tuple(out), ignore_sigterm=ignore_sigterm)
        for line in lines:
            t += step
            if never_ready and line == READY_LINE:
                continue
            out.append((t, line))
    return FakeScript(tuple(out), ignore_sigterm=ignore_sigterm)


__all__ = ["FakeScript", "sglang_like_script"]
