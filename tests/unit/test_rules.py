"""Cross-field rules: each named rule fails on a bad profile and passes on a good one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from servectl.errors import ProfileError
from servectl.plan.rules import RULES
from servectl.plan.validate import load_profile

Write = Callable[[str, str], Path]


@pytest.fixture
def check(write_profile: Write, minimal: Callable[[str], str]) -> Callable[[str], list[str]]:
    """Load a profile made of the minimal one plus ``extra`` YAML; return its problems ([] when valid)."""

    write_profile("_min", minimal("_min"))

    def run(extra: str) -> list[str]:
        write_profile("p", "name: p\nextends: _min\n" + extra + "\n")
        try:
            load_profile("p")
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
        "engine.catalog",
        "engine: {tp: 2, args: {tensor-parallel-size: 2}}",
        "is already set by engine.tp",
        "engine: {tp: 2}",
    ),
    (
        "engine.catalog",
        "engine: {args: {api-key: sk-123}}",
        "the API key is never written in a profile",
        "engine: {}",
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


def test_switch_with_a_value_is_rejected(check: Callable[[str], list[str]]) -> None:
    (line,) = check("engine: {args: {disable-shared-experts-fusion: 'yes'}}")
    assert "engine.args.disable-shared-experts-fusion" in line
    assert "ignored explicit argument" in line or "unrecognized arguments" in line
