"""What the stand-in knows about "its" model: read from ``config.json``, plus plausible memory figures.

There are no weights. The sizes printed in the startup log are estimates from the config (parameter count
times bytes per parameter), only so that the log reads like SGLang's and scales with the model.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: What one GPU reports as available before loading (an RTX PRO 6000 Blackwell, 96 GB class).
GPU_AVAILABLE_GB = 94.51

_CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions")
_DEFAULT_CONTEXT = 2048
_SHARD_BYTES = 5e9


class ModelConfigError(Exception):
    """``config.json`` is missing or unreadable; ``lines`` is the traceback-like text SGLang would print."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines[-1])
        self.lines = lines


@dataclass(frozen=True)
class ModelInfo:
    """The parts of a model's ``config.json`` that the stand-in uses."""

    path: str
    architecture: str
    torch_dtype: str
    derived_context_length: int
    hidden_size: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    parameter_count: int
    config: dict[str, Any]


def _as_int(config: dict[str, Any], key: str, default: int) -> int:
    value = config.get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else default


def load_model_info(model_path: str) -> ModelInfo:
    """Read ``<model_path>/config.json``.

    Raises:
        ModelConfigError: the folder or file is missing or not a JSON object (worded like transformers).
    """
    folder = Path(model_path)
    config_file = folder / "config.json"
    trace = [
        "Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/configs/model_config.py", line 98, in __init__',
        "    self.hf_config = get_config(",
    ]
    if not folder.is_dir():
        raise ModelConfigError(
            [
                *trace,
                f"OSError: Can't load the configuration of '{model_path}'. If you were trying to load it "
                "from 'https://huggingface.co/models', make sure you don't have a local directory with the "
                "same name. "
                f"Otherwise, make sure '{model_path}' is the correct path to a directory containing a "
                "config.json file",
            ]
        )
    if not config_file.is_file():
        raise ModelConfigError(
            [
                *trace,
                f"OSError: {model_path} does not appear to have a file named config.json. Checkout "
                f"'https://huggingface.co/{model_path}/tree/None' for available files.",
            ]
        )
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelConfigError(
            [
                *trace,
                f"OSError: It looks like the config file at '{config_file}' is not a valid JSON file. ({err})",
            ]
        ) from None
    if not isinstance(config, dict):
        raise ModelConfigError(
            [*trace, f"OSError: It looks like the config file at '{config_file}' is not a valid JSON file."]
        )
    return model_info_from_config(str(folder), config)


def model_info_from_config(path: str, config: dict[str, Any]) -> ModelInfo:
    """Derive :class:`ModelInfo` from a parsed config (missing keys get small-model defaults)."""
    hidden = _as_int(config, "hidden_size", 4096)
    layers = _as_int(config, "num_hidden_layers", 32)
    heads = _as_int(config, "num_attention_heads", 32)
    kv_heads = _as_int(config, "num_key_value_heads", heads)
    head_dim = _as_int(config, "head_dim", max(1, hidden // heads))
    context = next((_as_int(config, k, 0) for k in _CONTEXT_KEYS if _as_int(config, k, 0)), _DEFAULT_CONTEXT)
    architectures = config.get("architectures")
    architecture = str(architectures[0]) if isinstance(architectures, list) and architectures else "LlamaForCausalLM"
    return ModelInfo(
        path=path,
        architecture=architecture,
        torch_dtype=str(config.get("torch_dtype") or "bfloat16"),
        derived_context_length=context,
        hidden_size=hidden,
        num_layers=layers,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        parameter_count=_parameter_count(config, hidden, layers, heads, kv_heads, head_dim),
        config=config,
    )


def _parameter_count(config: dict[str, Any], hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int) -> int:
    vocab = _as_int(config, "vocab_size", 32000)
    intermediate = _as_int(config, "intermediate_size", 4 * hidden)
    experts = _as_int(config, "n_routed_experts", _as_int(config, "num_experts", 0))
    moe_intermediate = _as_int(config, "moe_intermediate_size", intermediate)
    shared = _as_int(config, "n_shared_experts", 0)
    dense_layers = min(layers, _as_int(config, "first_k_dense_replace", 0 if experts else layers))
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    dense_mlp = 3 * hidden * intermediate
    moe_mlp = (experts + shared) * 3 * hidden * moe_intermediate + hidden * experts
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return embeddings + layers * attention + dense_layers * dense_mlp + (layers - dense_layers) * moe_mlp


def bytes_per_parameter(quantization: str | None, torch_dtype: str) -> float:
    """Weight bytes per parameter for a ``--quantization`` value (4-bit schemes ~0.56, FP8 1, else dtype)."""
    if quantization:
        q = quantization.lower()
        if "fp8" in q or "int8" in q or q.endswith("q8"):
            return 1.0
        if q != "unquant":
            return 0.5625
    return 4.0 if torch_dtype in ("float32", "float") else 2.0


@dataclass(frozen=True)
class MemoryPlan:
    """The figures of the startup log, per GPU, in GB (10^9 bytes) like SGLang prints them."""

    available_before_gb: float
    weights_gb: float
    shard_count: int
    kv_tokens: int
    k_size_gb: float
    v_size_gb: float
    cuda_graph_gb: float

    @property
    def available_after_weights_gb(self) -> float:
        return max(0.5, self.available_before_gb - self.weights_gb)

    @property
    def available_after_kv_gb(self) -> float:
        return max(0.4, self.available_after_weights_gb - self.k_size_gb - self.v_size_gb)

    @property
    def available_after_graphs_gb(self) -> float:
        return max(0.3, self.available_after_kv_gb - self.cuda_graph_gb)


def plan_memory(info: ModelInfo, args: dict[str, Any], context_length: int) -> MemoryPlan:
    """Weights, KV cache and graph sizes for the log, from the config and the server arguments."""
    tp = max(1, int(args.get("tp_size") or 1))
    total_weight_bytes = info.parameter_count * bytes_per_parameter(args.get("quantization"), info.torch_dtype)
    weights_gb = total_weight_bytes / tp / 1e9
    kv_dtype = str(args.get("kv_cache_dtype") or "auto")
    kv_bytes = 1 if ("fp8" in kv_dtype or "mxfp8" in kv_dtype) else (0.5 if "fp4" in kv_dtype else 2)
    per_token_bytes = info.num_layers * max(1, info.num_kv_heads // tp) * info.head_dim * kv_bytes
    fraction = float(args.get("mem_fraction_static") or 0.88)
    if args.get("max_total_tokens"):
        kv_tokens = int(args["max_total_tokens"])
    else:
        budget = max(1.0, GPU_AVAILABLE_GB * fraction - weights_gb) * 1e9
        kv_tokens = max(context_length, int(budget / (2 * per_token_bytes)))
    k_size_gb = kv_tokens * per_token_bytes / 1e9
    shards = max(1, math.ceil(total_weight_bytes / _SHARD_BYTES))
    return MemoryPlan(
        available_before_gb=GPU_AVAILABLE_GB,
        weights_gb=weights_gb,
        shard_count=min(shards, 128),
        kv_tokens=kv_tokens,
        k_size_gb=k_size_gb,
        v_size_gb=k_size_gb,
        cuda_graph_gb=0.35,
    )
