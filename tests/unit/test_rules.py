"""Cross-field rules: each named rule fails on a bad profile and passes on a good one."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from servectl.errors import ProfileError
from servectl.profile.loader import search_path
from servectl.profile.rules import RULES
from servectl.profile.validate import load_profile

Write = Callable[[str, str], Path]


@pytest.fixture
def check(write_profile: Write, minimal: Callable[[str], str]) -> Callable[[str], list[str]]:
    """Load a profile made of the minimal one plus ``extra`` YAML; return its problems ([] when valid)."""

    write_profile("_min", minimal("_min"))

    def run(extra: str) -> list[str]:
        write_profile("p", "name: p\nextends: _min\n" + extra + "\n")
        try:
            load_profile("p", folders=search_path(environ=os.environ))
        except ProfileError as err:
            return err.lines()
        return []

    return run


ADAPTIVE = (
    "engine:\n  speculative: {{algorithm: {algo}, num_steps: {steps}, eagle_topk: {topk}, adaptive_steps: [3, 5]}}\n"
)

CASES: list[tuple[str, str, str, str]] = [
    # rule, bad extra, expected text in the message, good extra
    (
        "speculative.adaptive",
        ADAPTIVE.format(algo="NGRAM", steps=3, topk=1),
        "needs algorithm EAGLE or EAGLE3",
        ADAPTIVE.format(algo="EAGLE3", steps=3, topk=1),
    ),
    (
        "speculative.adaptive",
        ADAPTIVE.format(algo="EAGLE", steps=3, topk=2),
        "needs eagle_topk: 1",
        ADAPTIVE.format(algo="EAGLE", steps=5, topk=1),
    ),
    (
        "speculative.adaptive",
        ADAPTIVE.format(algo="EAGLE", steps=4, topk=1),
        "4 is not one of adaptive_steps [3, 5]",
        ADAPTIVE.format(algo="EAGLE", steps=3, topk=1),
    ),
    # read wherever and however written: an abbreviation, a string, max_running_requests under args
    (
        "engine.mamba_cache",
        "engine: {max_running_requests: 4, args: {max-mamba-cache: 19}}",
        "19 is below 5 x max_running_requests (4) = 20",
        "engine: {max_running_requests: 4, args: {max-mamba-cache: 20}}",
    ),
    (
        "engine.mamba_cache",
        "engine: {max_running_requests: 4, args: {max-mamba-cache-size: '19'}}",
        "19 is below 5 x max_running_requests (4) = 20",
        "engine: {max_running_requests: 4, args: {max-mamba-cache-size: '20'}}",
    ),
    (
        "engine.mamba_cache",
        "engine: {args: {max-running-requests: 4, max-mamba-cache-size: 19}}",
        "19 is below 5 x max_running_requests (4) = 20",
        "engine: {args: {max-running-requests: 4, max-mamba-cache-size: 20}}",
    ),
    (
        "engine.mamba_cache",
        "engine: {args: {max-mamba-cache-size: 0}}",
        "0 leaves no mamba state slots",
        "engine: {args: {max-mamba-cache-size: 1}}",
    ),
    (
        "gpus.parallelism",
        "gpus: {devices: [0, 1]}\nengine: {tp: 2, args: {dp-size: 2}}",
        "tp 2 x dp 2 does not match 2 GPU devices [0, 1]",
        "gpus: {devices: [0, 1]}\nengine: {tp: 1, args: {dp-size: 2}}",
    ),
    (
        "speculative.algorithm",
        "engine: {args: {speculative-algorithm: MEDUSA}}",
        "Unknown speculative algorithm name: MEDUSA",
        "engine: {args: {speculative-algorithm: dspark}}",
    ),
    (
        "speculative.draft_model",
        "engine: {speculative: {algorithm: DFLASH}}",
        "DFLASH speculative decoding requires setting --speculative-draft-model-path",
        "engine: {speculative: {algorithm: DFLASH, draft_model_path: /draft}}",
    ),
    (
        "speculative.draft_window",
        "engine: {args: {speculative-draft-sink-size: 4}}",
        "--speculative-draft-sink-size requires --speculative-draft-window-size",
        "engine: {args: {speculative-draft-sink-size: 4, speculative-draft-window-size: 512}}",
    ),
    (
        "speculative.draft_window",
        "engine: {args: {speculative-draft-window-size: 0}}",
        "--speculative-draft-window-size must be positive, got 0",
        "engine: {args: {speculative-draft-window-size: 1}}",
    ),
    (
        "engine.mamba_states",
        "engine: {args: {mamba-max-states-per-path: 0}}",
        "must be -1 (unlimited) or a positive integer, got 0",
        "engine: {args: {mamba-max-states-per-path: -1}}",
    ),
    (
        "engine.int8_mamba_checkpoint",
        "engine: {args: {enable-int8-mamba-checkpoint: true, enable-hicache: true}}",
        "the host-offload path is not int8-aware",
        "engine: {args: {enable-int8-mamba-checkpoint: true}}",
    ),
    (
        "engine.dsa_backends",
        "engine: {args: {dsa-decode-backend: triton}}",
        "The triton DSA backend is only supported on ROCm/HIP",
        "engine: {args: {dsa-decode-backend: flashinfer_sparse_mla}}",
    ),
    (
        "engine.dsa_backends",
        "engine: {kv_cache_dtype: fp8_e4m3, args: {dsa-prefill-backend: tilelang, dsa-decode-backend: trtllm}}",
        "CUDA TileLang FP8 KV requires both DSA backends to be tilelang",
        "engine: {kv_cache_dtype: fp8_e4m3, args: {dsa-prefill-backend: tilelang, dsa-decode-backend: tilelang}}",
    ),
    (
        "engine.mamba_cache",
        "engine: {max_running_requests: 4, args: {max-mamba-cache-size: 19}}",
        "19 is below 5 x max_running_requests (4) = 20",
        "engine: {max_running_requests: 4, args: {max-mamba-cache-size: 20}}",
    ),
    (
        "gpus.parallelism",
        "gpus: {devices: [0, 1]}\nengine: {tp: 1}",
        "tp 1 does not match 2 GPU devices [0, 1]",
        "gpus: {devices: [0, 1]}\nengine: {tp: 1, dp: 2}",
    ),
    (
        "status.pins",
        "status: promoted",
        "a promoted profile pins its image",
        "status: promoted\nmodel: {path: /m, served_name: m, revision: "
        + "a" * 40
        + "}\nimage: {ref: x/y:1, digest: sha256:"
        + "b" * 64
        + "}",
    ),
    (
        "serve.role_port",
        "serve: {port: 8080, role: bench}",
        "8080 is a production port",
        "serve: {port: 8180, role: bench}",
    ),
    (
        "serve.role_port",
        "serve: {port: 8180, role: production}",
        "8180 is not a production port [8080]",
        "serve: {port: 8180, role: production, production_ports: [8180]}",
    ),
    (
        "serve.api_key",
        "serve: {host: 0.0.0.0, port: 8180, role: bench}",
        "0.0.0.0 is reachable from other machines",
        "serve: {host: 0.0.0.0, port: 8180, role: bench, api_key_env: MY_KEY}",
    ),
    (
        "engine.hicache",
        "engine: {args: {hicache-size: 32}}",
        "needs the hierarchical cache",
        "engine: {args: {hicache-size: 32, enable-hierarchical-cache: true}}",
    ),
    (
        "engine.context",
        "engine: {context_length: 9000, max_total_tokens: 8192}",
        "9000 exceeds max_total_tokens 8192",
        "engine: {context_length: 8192, max_total_tokens: 8192}",
    ),
    (
        "engine.env_secrets",
        "engine: {env: {HF_TOKEN: hf_abc}}",
        "looks like a secret",
        "engine: {env: {HF_TOKEN: '${HF_TOKEN}'}}",
    ),
    (
        "swap.standby",
        "swap: {standby: warm}\nengine: {args: {enable-memory-saver: false}}",
        "false turns off what swap.standby: warm needs; remove engine.args.enable-memory-saver",
        "swap: {standby: warm}\nengine: {args: {enable-mixed-chunk: true}}",
    ),
    (
        "swap.standby",
        "swap: {standby: warm}\nengine: {args: {enable-weights-cpu: false}}",
        "remove engine.args.enable-weights-cpu or set swap.standby: none",
        "swap: {standby: none}\nengine: {args: {enable-weights-cpu: false}}",
    ),
    # what the memory saver refuses or a release/resume kills (issue 38), each with its upstream source
    (
        "swap.standby_engine",
        "swap: {standby: warm}\nengine: {env: {PYTORCH_CUDA_ALLOC_CONF: 'expandable_segments:True'}}",
        "expandable_segments:True turns torch_memory_saver off (torch_memory_saver/entrypoint.py:397",
        "swap: {standby: warm}\nengine: {env: {PYTORCH_CUDA_ALLOC_CONF: 'max_split_size_mb:512'}}",
    ),
    (
        "swap.standby_engine",
        "swap: {standby: warm}\nengine: {args: {weight-cache-mode: daemon}}",
        "--weight-cache-mode daemon makes a release of the weights raise in the scheduler, which kills the server "
        "(sglang/srt/managers/scheduler_components/weight_updater.py:300",
        "swap: {standby: warm}\nengine: {args: {weight-cache-mode: 'off'}}",
    ),
    (
        "swap.standby_engine",
        "swap: {standby: warm}\nengine: {args: {startup-weight-load-mode: overlap}}",
        "refuses the memory saver and the CPU weight backup at start (sglang/srt/model_executor/",
        "swap: {standby: warm}\nengine: {args: {startup-weight-load-mode: serial}}",
    ),
    (
        "swap.standby_engine",
        "swap: {standby: warm}\nengine: {env: {SGLANG_MEMORY_SAVER_CUDA_GRAPH: 'true'}}",
        "with the breakable CUDA-graph backend (prefill's default) the engine refuses",
        "swap: {standby: warm}\n"
        "engine: {env: {SGLANG_MEMORY_SAVER_CUDA_GRAPH: '1'}, args: {cuda-graph-backend-prefill: full}}",
    ),
    (
        "swap.standby_engine",
        "swap: {standby: warm}\nengine: {tp: 2, env: {NCCL_GRAPH_REGISTER: '1'}}\ngpus: {devices: [0, 1]}",
        "NCCL_GRAPH_REGISTER=1 with tp 2: a resumed graph pool keeps its addresses",
        "swap: {standby: warm}\nengine: {tp: 2, env: {NCCL_GRAPH_REGISTER: '0'}}\ngpus: {devices: [0, 1]}",
    ),
    (
        "swap.standby_engine",
        "swap: {standby: none, standby_retain_backup: true}",
        "takes effect with swap.standby: warm only",
        "swap: {standby: warm, standby_retain_backup: true, standby_max_cycles: 5}",
    ),
    (
        "swap.standby_engine",
        "swap: {standby_ram_waiver: 'a box of its own, nothing else runs'}",
        "takes effect with swap.standby: warm only",
        "swap: {standby: warm, standby_ram_waiver: 'a box of its own, nothing else runs'}",
    ),
    (
        "swap.standby_engine",
        "swap: {standby: warm, standby_prime: true}",
        "priming pays the pinned buffer at start, which only a retained buffer keeps",
        "swap: {standby: warm, standby_prime: true, standby_retain_backup: true}",
    ),
    (
        "engine.catalog",
        "engine: {args: {tp-szie: 2}}",
        "--tp-szie is not a flag of catalog sglang-0.5.23; did you mean 'tp-size'?",
        "engine: {args: {chunked-prefill-size: 256}}",
    ),
    (
        "engine.catalog",
        "engine: {kv_cache_dtype: fp7}",
        "invalid choice: 'fp7'",
        "engine: {kv_cache_dtype: fp8_e4m3}",
    ),
    (
        "engine.catalog",
        "engine: {args: {chunked-prefill-size: big}}",
        "invalid int value: 'big'",
        "engine: {args: {chunked-prefill-size: 512}}",
    ),
    (
        "engine.catalog",
        "engine: {args: {tool-call-parser: true}}",
        "expected one argument",
        "engine: {args: {tool-call-parser: glm47}}",
    ),
    (
        "engine.catalog",
        "engine: {args: {disable-shared-experts-fusion: 'yes'}}",
        "",
        "engine: {args: {disable-shared-experts-fusion: true}}",
    ),
    (
        "engine.duplicate_flag",
        "engine: {tp: 2, args: {tensor-parallel-size: 2}}",
        "is already set by engine.tp",
        "engine: {tp: 2}",
    ),
    (
        "engine.api_key_flag",
        "engine: {args: {api-key: sk-123}}",
        "the API key is never written in a profile",
        "engine: {}",
    ),
    (
        "engine.admin_api_key_flag",
        "engine: {args: {admin-api-key: sk-admin}}",
        "the admin key is never written in a profile; use serve.admin_api_key_env",
        "serve: {admin_api_key_env: ADMIN_KEY}",
    ),
    (
        "engine.catalog",
        "engine: {quantization: exl3}",
        "invalid choice: 'exl3'",
        "engine: {quantization: exl3, catalog_extend: {choices: {quantization: [exl3]}}}",
    ),
    (
        "engine.catalog",
        "engine: {catalog: sglang-9.9}",
        "unknown flag catalog 'sglang-9.9'",
        "engine: {catalog: sglang-0.5.23}",
    ),
]


@pytest.mark.parametrize(("rule", "bad", "message", "good"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_rejects_bad_and_accepts_good(
    check: Callable[[str], list[str]], rule: str, bad: str, message: str, good: str
) -> None:
    assert rule in RULES
    problems = check(bad)
    assert problems, f"{rule}: expected a problem for {bad!r}"
    assert any(message in p for p in problems), problems
    assert all(p.startswith(("profiles/p.yaml:", "profiles/_min.yaml:")) for p in problems), problems
    assert check(good) == []


@pytest.mark.parametrize(
    "good",
    [
        # settings SGLang resolves itself (false alarms before): top-k and num_steps omitted, NEXTN is EAGLE
        "engine:\n  speculative: {algorithm: EAGLE, adaptive_steps: [3, 5]}",
        "engine:\n  speculative: {algorithm: NEXTN, eagle_topk: 1, adaptive_steps: [3, 5]}",
        "engine:\n  speculative: {algorithm: DSPARK}",
        "engine: {args: {speculative-algorithm: eagle3}}",
        "engine: {args: {forward-hooks: '{}'}}",
        "engine: {args: {chat-template: '- svc'}}",
        "engine: {context_length: 1000000, args: {max-total-tokens: 1Mi}}",
        "engine: {args: {context-length: 64Ki, cuda-graph-prefill-max-context: 1.5M}}",
        "engine: {args: {monokernel-backend: amd}}",
    ],
)
def test_what_sglang_accepts_passes(check: Callable[[str], list[str]], good: str) -> None:
    assert check(good) == []


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("engine: {args: {context-length: 64K}}", "Suffixes are case-sensitive"),
        ("engine: {args: {context-length: 1m}}", "Invalid integer value: '1m'"),
        ("engine: {args: {monokernel-backend: true}}", "expected one argument"),
        ("engine: {args: {mem-fraction-static: '-1e3'}}", "expected one argument"),
        ("engine: {args: {mem-fraction-static: -.inf}}", "engine.args.mem-fraction-static"),
        ("engine: {args: {cuda-graph-config: {verify: {}}}}", "unknown phase 'verify'"),
        ("engine: {args: {cuda-graph-config: {decode: {max_bsz: 8}}}}", "unknown key 'max_bsz'"),
    ],
)
def test_what_the_real_parser_rejects_is_rejected(check: Callable[[str], list[str]], bad: str, message: str) -> None:
    problems = check(bad)
    assert any(message in p for p in problems), problems


def test_adaptive_with_two_batch_overlap_is_a_warning_not_an_error(
    write_profile: Write, minimal: Callable[[str], str]
) -> None:
    from servectl.profile.loader import read_profile
    from servectl.profile.rules import profile_warnings

    write_profile("_min", minimal("_min"))
    extra = (
        "engine:\n  speculative: {algorithm: EAGLE, adaptive_steps: [3, 5]}\n  args: {enable-two-batch-overlap: true}"
    )
    write_profile("p", "name: p\nextends: _min\n" + extra + "\n")
    load_profile("p", folders=search_path(environ=os.environ))  # no error
    (warning,) = [str(w) for w in profile_warnings(read_profile("p", folders=search_path(environ=os.environ)))]
    assert "SGLang disables adaptive speculative decoding with two-batch overlap" in warning
    # validate --json carries the warning with its location and rule (the profile stays valid)
    from typer.testing import CliRunner

    from servectl.cli.app import app

    result = CliRunner().invoke(app, ["validate", "--json", "p"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)
    assert row["valid"] is True and row["problems"] == []
    (found,) = row["warnings"]
    assert found["file"].endswith("p.yaml") and found["rule"] and "two-batch overlap" in found["message"]


def test_switch_with_a_value_is_rejected(check: Callable[[str], list[str]]) -> None:
    (line,) = check("engine: {args: {disable-shared-experts-fusion: 'yes'}}")
    assert "engine.args.disable-shared-experts-fusion" in line
    assert "ignored explicit argument" in line or "unrecognized arguments" in line
