"""Rule ``swap.standby_engine``: what a warm standby's engine cannot have, each with the upstream source that
fails on it (SGLang 0.5.23, torch_memory_saver 0.0.10) and the fix. Registered in :mod:`servectl.profile.rules`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from servectl.profile.engine_args import PathKey, Setting
from servectl.profile.models import Profile

#: What a warm standby's engine cannot have, each from the SGLang 0.5.23 (or torch_memory_saver 0.0.10)
#: source that fails on it: ``(what, source, fix)``.
STANDBY_SOURCES = {
    "alloc_conf": "torch_memory_saver/entrypoint.py:397 _sanity_checks",
    "weight_cache": "sglang/srt/managers/scheduler_components/weight_updater.py:300 _assert_weight_cache_inactive",
    "overlap": "sglang/srt/model_executor/model_runner_components/startup_weight_load.py:379",
    "breakable": "sglang/srt/model_executor/runner_backend/breakable_cuda_graph_backend.py:92 (the prefill "
    "default on CUDA: sglang/srt/model_executor/cuda_graph_config.py:119 default_prefill_backend)",
    "nccl_graph": "sglang/srt/arg_groups/parallel_hook.py:425 _disable_nccl_graph_buffer_registration",
}
_GRAPH_ENV_ON = ("true", "1")


def standby_engine_problems(p: Profile, settings: Mapping[str, Setting]) -> Iterator[tuple[PathKey, str]]:
    """A warm standby's engine: nothing the memory saver refuses, nothing a release or resume kills
    (``settings``: the engine's settings by dest, :func:`servectl.profile.engine_args.effective_settings`)."""
    if p.swap.standby != "warm":
        for key in ("standby_retain_backup", "standby_max_cycles", "standby_prime", "standby_ram_waiver"):
            if getattr(p.swap, key) not in (False, None):
                yield ("swap", key), "takes effect with swap.standby: warm only; set standby: warm or remove it"
        return
    if p.swap.standby_prime and not p.swap.standby_retain_backup:
        yield (
            ("swap", "standby_prime"),
            "priming pays the pinned buffer at start, which only a retained buffer keeps; set "
            "standby_retain_backup: true or remove standby_prime",
        )

    def _value(_p: Profile, dest: str, default: object = None) -> object:
        setting = settings.get(dest)
        return default if setting is None else setting.value

    def _field(_p: Profile, dest: str, fallback: PathKey) -> PathKey:
        setting = settings.get(dest)
        return fallback if setting is None else setting.field

    mode = _value(p, "weight_cache_mode", "off")
    if mode not in (None, "off"):
        yield (
            _field(p, "weight_cache_mode", ("engine", "args")),
            (
                f"--weight-cache-mode {mode} makes a release of the weights raise in the scheduler, which kills "
                f"the server ({STANDBY_SOURCES['weight_cache']}); set it to off or swap.standby: none"
            ),
        )
    if _value(p, "startup_weight_load_mode") == "overlap":
        yield (
            _field(p, "startup_weight_load_mode", ("engine", "args")),
            (
                "--startup-weight-load-mode overlap refuses the memory saver and the CPU weight backup at start "
                f"({STANDBY_SOURCES['overlap']}); use serial or swap.standby: none"
            ),
        )
    for name, message in standby_env_problems(p.engine.env, tp=p.engine.tp, breakable=breakable_graph(p, settings)):
        yield ("engine", "env", name), message


def breakable_graph(p: Profile, settings: Mapping[str, Setting]) -> bool:
    """Whether the engine captures CUDA graphs with the breakable backend (prefill's default on CUDA)."""

    def _value(dest: str) -> object:
        setting = settings.get(dest)
        return None if setting is None else setting.value

    prefill = _value("cuda_graph_backend_prefill") or "breakable"  # the CUDA default
    return not _value("disable_cuda_graph") and "breakable" in (prefill, _value("cuda_graph_backend_decode"))


def standby_env_problems(env: Mapping[str, str], *, tp: int, breakable: bool) -> Iterator[tuple[str, str]]:
    """``(variable, problem)`` for each variable of the engine's environment that its memory saver refuses or a
    release/resume kills: the profile's ``engine.env`` (rule ``swap.standby_engine``) or the image's own
    (preflight's ``image.standby_env``)."""
    if "expandable_segments:True" in env.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        yield (
            "PYTORCH_CUDA_ALLOC_CONF",
            f"expandable_segments:True turns torch_memory_saver off ({STANDBY_SOURCES['alloc_conf']}) and the "
            "warm standby's release frees nothing; remove it or set swap.standby: none",
        )
    if env.get("SGLANG_MEMORY_SAVER_CUDA_GRAPH", "false").lower() in _GRAPH_ENV_ON and breakable:
        yield (
            "SGLANG_MEMORY_SAVER_CUDA_GRAPH",
            "with the breakable CUDA-graph backend (prefill's default) the engine refuses the memory saver's "
            f"graph mode at start ({STANDBY_SOURCES['breakable']}); set engine.args.cuda-graph-backend-prefill: "
            "full (or disabled), or drop the variable",
        )
    register = env.get("NCCL_GRAPH_REGISTER")
    if tp > 1 and register is not None and register != "0":
        yield (
            "NCCL_GRAPH_REGISTER",
            f"NCCL_GRAPH_REGISTER={register} with tp {tp}: a resumed graph pool keeps its addresses on new pages "
            "while NCCL's registrations point at the released ones, so replays can hang "
            f"({STANDBY_SOURCES['nccl_graph']}); remove it (SGLang sets 0)",
        )


__all__ = ["STANDBY_SOURCES", "breakable_graph", "standby_engine_problems", "standby_env_problems"]
