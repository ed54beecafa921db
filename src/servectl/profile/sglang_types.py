"""SGLang's argparse type functions, ported line for line from the 0.5.23 wheel (sources cited per function).

The catalog names each option's type function; the parser servectl rebuilds from the catalog uses these, so a
value is accepted or refused exactly as the engine does, with its own message. Where a function validates
against data of the build (the phases and keys of ``--cuda-graph-config``), the data comes from the catalog
(``type_rules``, read from the build by ``engine_dump.py flags``). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

TypeFunction = Callable[[str], Any]


def human_readable_int(value: str) -> int:
    """sglang/srt/utils/common.py ``human_readable_int``: case-sensitive SI (k, M, G, T) and IEC (Ki..Ti)."""
    value = value.strip()
    si_multiplier = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec_multiplier = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix in iec_multiplier:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                    f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                    f"or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * iec_multiplier[suffix]
        return int(Decimal(number) * si_multiplier[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid integer value: '{value}'. "
            "Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). "
            "Suffixes are case-sensitive."
        ) from None


def nullable_str(val: str) -> str | None:
    """sglang/srt/utils/common.py ``nullable_str``."""
    if not val or val == "None":
        return None
    return val


def loads(raw: str) -> Any:
    """``json.loads`` (SGLang passes it as the type): its ValueError reads ``invalid loads value``."""
    return json.loads(raw)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _orjson_loads(raw: str) -> Any:
    """What ``orjson.loads`` accepts: strict RFC 8259 JSON (no NaN/Infinity), integers within 64 bits."""
    value = json.loads(raw, parse_constant=_reject_constant)
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, int) and not isinstance(item, bool) and not -(2**63) <= item < 2**64:
            raise ValueError("integer exceeds 64-bit range")
        if isinstance(item, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in item):
            raise ValueError("str is not valid UTF-8: surrogates not allowed")
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return value


def json_list_type(value: str) -> Any:
    """sglang/srt/utils/common.py ``json_list_type``: ``orjson.loads``; any JSON value passes (not only lists)."""
    try:
        return _orjson_loads(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Invalid JSON list: {value}. Please provide a valid JSON list.") from None


def _cuda_graph_functions(rules: Mapping[str, Any]) -> tuple[TypeFunction, TypeFunction]:
    """sglang/srt/model_executor/cuda_graph_config.py ``parse_cuda_graph_backend_arg`` / ``_config_arg``."""
    config_rules = rules.get("parse_cuda_graph_config_arg") or {}
    removed = tuple(rules.get("parse_cuda_graph_backend_arg") or ("tc_piecewise",))
    phases = tuple(config_rules.get("phases") or ("decode", "prefill"))
    allowed_keys = {k: tuple(v) for k, v in (config_rules.get("allowed_keys") or {}).items()}

    def parse_cuda_graph_backend_arg(raw: str) -> str:
        if raw in removed:
            raise argparse.ArgumentTypeError(f"{raw} was removed; select breakable, full, or disabled")
        return raw

    def parse_cuda_graph_config_arg(raw: str) -> dict[str, dict[str, Any]]:
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as e:
            raise argparse.ArgumentTypeError(f"--cuda-graph-config must be JSON: {e}") from None
        if not isinstance(parsed, dict):
            raise argparse.ArgumentTypeError(f"--cuda-graph-config must be a JSON object, got {type(parsed).__name__}")
        result: dict[str, dict[str, Any]] = {}
        for phase, phase_settings in parsed.items():
            phase = str(phase)
            if phase not in phases:
                raise argparse.ArgumentTypeError(
                    f"--cuda-graph-config: unknown phase '{phase}', expected one of {phases}"
                )
            if not isinstance(phase_settings, dict):
                raise argparse.ArgumentTypeError(
                    f"--cuda-graph-config['{phase}'] must be a JSON object, got {type(phase_settings).__name__}"
                )
            if "backend" in phase_settings:
                parse_cuda_graph_backend_arg(phase_settings["backend"])
            allowed = allowed_keys.get(phase, ())
            result[phase] = {}
            for key, value in phase_settings.items():
                if key not in allowed:
                    raise argparse.ArgumentTypeError(
                        f"--cuda-graph-config['{phase}']: unknown key '{key}', expected one of {allowed}"
                    )
                result[phase][key] = value
        return result

    return parse_cuda_graph_backend_arg, parse_cuda_graph_config_arg


_SIMPLE: dict[str, TypeFunction] = {
    "int": int,
    "float": float,
    "str": str,
    "human_readable_int": human_readable_int,
    "nullable_str": nullable_str,
    "loads": loads,
    "json_list_type": json_list_type,
}


def lora_path_action(values: list[Any]) -> list[Any]:
    """sglang/srt/arg_groups/argparse_actions.py ``LoRAPathAction``: a ``{...}`` entry must be JSON naming
    ``lora_name`` and ``lora_path``. SGLang asserts (and ``json.loads`` raises); here both are ValueError."""
    lora_paths: list[Any] = []
    if values:
        for lora_path in values:
            lora_path = lora_path.strip()
            if lora_path.startswith("{") and lora_path.endswith("}"):
                try:
                    obj = json.loads(lora_path)
                except ValueError as err:
                    raise ValueError(f"{lora_path!r} is not valid JSON: {err}") from None
                if not ("lora_path" in obj and "lora_name" in obj):
                    raise ValueError(
                        f"{lora_path!r} looks like a JSON str, "
                        "but it does not contain 'lora_name' and 'lora_path' keys."
                    )
                lora_paths.append(obj)
            else:
                lora_paths.append(lora_path)
    return lora_paths


ACTIONS: dict[str, Callable[[Any], Any]] = {"LoRAPathAction": lora_path_action}
"""SGLang's own argparse actions that check values (by class name, as the catalog records them): each takes
the converted value(s) and returns what SGLang stores, or raises ValueError with SGLang's message."""


def type_function(name: str | None, rules: Mapping[str, Any]) -> TypeFunction:
    """The type function the catalog names; ``str`` for names it does not know (custom image flags)."""
    if name in ("parse_cuda_graph_backend_arg", "parse_cuda_graph_config_arg"):
        backend, config = _cuda_graph_functions(rules)
        return backend if name == "parse_cuda_graph_backend_arg" else config
    return _SIMPLE.get(name or "str", str)
