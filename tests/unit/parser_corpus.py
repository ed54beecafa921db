"""Mutations of the shipped profiles, judged by servectl and by the real SGLang 0.5.23 parser.

``python3 tests/unit/parser_corpus.py`` (re)writes tests/data/parser-corpus.json: each entry is a shipped profile,
one change to it, the engine argv servectl compiles, and the real parser's verdict on that argv (from the
parser venv, ``servectl_ci.sglang_venv``). tests/unit/test_parser_corpus.py replays the corpus: it needs no
venv, and re-asks the real parser when the venv is there.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: The shipped profiles name shipped catalogs: no folder of extracted ones is looked in (this one does not exist).
NO_EXTRACTED_CATALOGS = ROOT / "tests" / "data" / "no-extracted-catalogs"
CORPUS = ROOT / "tests" / "data" / "parser-corpus.json"
MODEL_PATH = ["--model-path", "/m"]  # the real parser requires it; argv from a profile always has it

#: Flags to set under engine.args: spelled in full, by alias, abbreviated, and a few that do not exist.
ARG_KEYS = [
    "context-length", "max-total-tokens", "max-prefill-tokens", "cuda-graph-prefill-max-context", "context-bucket",
    "chunked-prefill-size", "max-running-requests", "max-mamba-cache-size", "max-mamba-cache", "mem-fraction-static",
    "mem-frac", "kv-cache-dtype", "quantization", "speculative-algorithm", "speculative-num-steps",
    "speculative-eagle-topk", "speculative-adaptive", "cuda-graph-config", "cuda-graph-backend-decode",
    "cuda-graph-max-bs-decode", "cuda-graph-bs-decode", "forward-hooks", "sidecar-args", "json-model-override-args",
    "preferred-sampling-params", "monokernel-backend", "enable-amd-monokernel", "served-model-name", "chat-template",
    "tool-call-parser", "reasoning-parser", "dsa-decode-backend", "dsa-prefill-backend", "linear-attn-backend",
    "mamba-backend", "mamba-max-states-per-path", "enable-hierarchical-cache", "enable-hicache", "hicache-size",
    "hicache-ratio", "disable-shared-experts-fusion", "enable-tf32-matmul", "no-enable-tf32-matmul",
    "log-requests-level", "decode-log-interval", "schedule-conservativeness", "random-seed", "watchdog-timeout",
    "tokenizer-mode", "load-format", "page-size", "attention-backend", "tp", "t", "tp-szie", "api-key",
    "dp-size", "model-checksum", "allowed-media-domains", "lora-paths", "speculative-draft-window-size",
]  # fmt: skip
#: Values, as YAML would give them (strings, numbers, booleans, lists, mappings).
VALUES: list[Any] = [
    0, 1, 2, 4, 19, 64, -1, -5, 393216, 0.5, 0.99, 1.5, -0.5, -1e3, 1e-3, float("inf"), True, False,
    "1", "19", "-1", "-1e3", "-inf", "-.5", "1k", "1K", "64K", "64Ki", "1m", "1M", "1Mi", "1.5M", "1.5Mi", "1g",
    "1G", "1Gi", "1t", "1T", "2Ti", "384Ki", " 7 ", "1_000", "+3", "nan", "x", "- svc", "-svc", "-", "--x", "a b",
    "auto", "fp8_e4m3", "fp8", "bf16", "EAGLE", "eagle3", "nextn", "DSPARK", "MEDUSA", "amd", "full", "disabled",
    "tc_piecewise", "glm45", "glm47", "triton", "flashinfer_sparse_mla", "tilelang", "{}", "[]", "[1, 2]",
    '{"decode": {"max_bs": 8}}', '{"verify": {}}', "NaN", [1, 2, 4], ["a"], [], {"decode": {"max_bs": 8}},
    {"prefill": {"backend": "breakable"}}, {"decode": {"max_bsz": 8}}, {"decode": {"backend": "tc_piecewise"}},
]  # fmt: skip
TYPED: list[tuple[str, list[Any]]] = [
    ("context_length", [4096, 393216, 1000000]),
    ("max_total_tokens", [8192, 400000]),
    ("max_running_requests", [1, 4, 64]),
    ("mem_fraction_static", [0.5, 0.9, 1.0]),
    ("kv_cache_dtype", ["fp8_e4m3", "bf16", "auto", "fp8", "fp4_e2m1"]),
    ("quantization", ["fp8", "exl3", "modelopt_fp4", "awq"]),
]


def runnable_profiles() -> dict[str, Any]:
    """Shipped, complete profiles by name (bases and templates left out)."""
    from servectl.errors import ProfileError
    from servectl.profile.loader import ProfileFolder, ProfileSearch, discover, read_profile_file

    folders = ProfileSearch((ProfileFolder(ROOT / "profiles", "shipped"),), catalogs=NO_EXTRACTED_CATALOGS)
    out = {}
    for name, file in sorted(discover(folders).items()):
        if file.is_base:
            continue
        if "catalog_extend" in file.path.read_text():
            continue  # its image's parser adds flags: upstream's parser is not its judge
        try:
            out[name] = read_profile_file(file, folders=folders).profile
        except ProfileError:
            continue  # a template: nothing to mutate
    return out


def apply(profile: Any, change: dict[str, Any]) -> Any:
    """The profile with one change: ``{"args": key, "value": v}``, ``{"typed": field, "value": v}``, ``{"drop": key}``.

    Raises:
        pydantic.ValidationError: the schema refuses the change.
    """
    from servectl.profile.models import Profile

    data = profile.model_dump(mode="python")
    engine = data["engine"]
    if "args" in change:
        engine["args"][change["args"]] = change["value"]
    elif "typed" in change:
        engine[change["typed"]] = change["value"]
    else:
        engine["args"].pop(change["drop"], None)
    return Profile.model_validate(data)


def argv_of(profile: Any) -> list[str]:
    from servectl.profile.engine_args import catalog_for, engine_args

    catalog = catalog_for(profile, catalogs=NO_EXTRACTED_CATALOGS)
    return [token for arg in engine_args(profile, catalog) for token in arg.tokens]


def changes(rng: random.Random, profile: Any, count: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    existing = sorted(profile.engine.args)
    while len(out) < count:
        roll = rng.random()
        if roll < 0.75:
            out.append({"args": rng.choice(ARG_KEYS), "value": rng.choice(VALUES)})
        elif roll < 0.95:
            field, values = rng.choice(TYPED)
            out.append({"typed": field, "value": rng.choice(values)})
        elif existing:
            out.append({"drop": rng.choice(existing)})
    return out


def build(per_profile: int = 115, seed: int = 11) -> list[dict[str, Any]]:
    from pydantic import ValidationError
    from servectl_ci.sglang_venv import RealParser, ensure_parser_venv

    rng = random.Random(seed)
    entries: list[dict[str, Any]] = []
    with RealParser(ensure_parser_venv()) as real:
        for name, profile in runnable_profiles().items():
            for change in changes(rng, profile, per_profile):
                try:
                    mutated = apply(profile, change)
                except ValidationError:
                    continue  # the schema refuses it before any flag exists
                argv = argv_of(mutated)
                verdict = real.verdict([*MODEL_PATH, *argv])
                real_verdict = {"ok": verdict["ok"], "error": verdict.get("error", "")}
                entries.append({"profile": name, "change": change, "argv": argv, "real": real_verdict})
    return entries


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, allow_nan=True))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    corpus = build()
    CORPUS.write_text(json.dumps(corpus, indent=1, allow_nan=True) + "\n")
    rejected = sum(not e["real"]["ok"] for e in corpus)
    print(f"{CORPUS.relative_to(ROOT)}: {len(corpus)} mutations, the real parser rejects {rejected}")
