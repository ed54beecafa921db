"""The mutation corpus (tests/data/parser-corpus.json): servectl against the real SGLang 0.5.23 parser.

No argv that servectl accepts is rejected by the real parser, and every profile servectl refuses while the real
parser takes its argv is refused by a named policy rule or by a rule porting a check SGLang runs after parsing.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

import pytest
from parser_corpus import CORPUS, MODEL_PATH, NO_EXTRACTED_CATALOGS, apply, argv_of, runnable_profiles
from servectl_ci.sglang_venv import RealParser, is_built, venv_python

from servectl.profile.rules import POLICY_RULES, RULES, SGLANG_RULES

ENTRIES: list[dict[str, Any]] = json.loads(CORPUS.read_text())
PROFILES = runnable_profiles()


def judged(entry: dict[str, Any]) -> tuple[list[str], dict[str, list[str]]]:
    """(argv servectl compiles, {rule: messages} for every rule that refuses the mutated profile)."""
    profile = apply(PROFILES[entry["profile"]], entry["change"])
    refused = {name: [m for _, m in func(profile, NO_EXTRACTED_CATALOGS)] for name, func in RULES.items()}
    return argv_of(profile), {name: found for name, found in refused.items() if found}


def test_the_corpus_has_at_least_400_mutations_both_verdicts_well_represented() -> None:
    verdicts = Counter(e["real"]["ok"] for e in ENTRIES)
    assert len(ENTRIES) >= 400
    assert verdicts[True] >= 100 and verdicts[False] >= 100


def test_servectl_and_the_real_parser_agree_on_every_mutation() -> None:
    accepted_but_real_rejects: list[str] = []
    false_alarms: list[str] = []
    parser_disagrees: list[str] = []
    for entry in ENTRIES:
        argv, refused = judged(entry)
        assert argv == entry["argv"], "the compiler changed: regenerate with python3 tests/unit/parser_corpus.py"
        real_ok = entry["real"]["ok"]
        shown = f"{entry['profile']} {entry['change']}"
        if not refused and not real_ok:
            accepted_but_real_rejects.append(f"{shown}: sglang says {entry['real']['error']}")
        if ("engine.catalog" in refused) == real_ok:
            parser_disagrees.append(f"{shown}: servectl {refused.get('engine.catalog')} / sglang {entry['real']}")
        unexplained = set(refused) - set(POLICY_RULES) - set(SGLANG_RULES)
        if real_ok and unexplained:
            false_alarms.append(f"{shown}: {sorted(unexplained)} {[refused[r] for r in unexplained]}")
    assert accepted_but_real_rejects == []
    assert parser_disagrees == []
    assert false_alarms == []


@pytest.mark.skipif(
    not is_built() and not os.environ.get("SERVECTL_REQUIRE_SGLANG_PARSER"),
    reason="the SGLang parser venv is not built",
)
def test_the_stored_verdicts_are_the_real_parsers() -> None:
    with RealParser(venv_python()) as real:
        for entry in ENTRIES:
            verdict = real.verdict([*MODEL_PATH, *entry["argv"]])
            assert verdict["ok"] == entry["real"]["ok"], entry
