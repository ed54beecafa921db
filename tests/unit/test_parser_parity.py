"""servectl's verdict on flags, values and profiles equals the real SGLang 0.5.23 parser's (differential).

The real parser runs in the venv that ``servectl_ci.sglang_venv`` builds from the wheel (scripts/test.sh
builds it; CI sets SERVECTL_REQUIRE_SGLANG_PARSER=1 so these tests cannot skip there).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servectl_ci.sglang_venv import RealParser, is_built, venv_python

from servectl.profile.catalog import ArgvError, CatalogOption, FlagCatalog

CATALOG = FlagCatalog.load("sglang-0.5.23")
#: Options whose stored value comes from a custom argparse action, not the type function: verdicts compared,
#: values not.
CUSTOM_ACTIONS = frozenset({"enable_amd_monokernel"})


@pytest.fixture(scope="module")
def real() -> Iterator[RealParser]:
    if not is_built():
        if os.environ.get("SERVECTL_REQUIRE_SGLANG_PARSER"):
            pytest.fail("the SGLang parser venv is missing: run python3 -m servectl_ci.sglang_venv")
        pytest.skip("the SGLang parser venv is not built (python3 -m servectl_ci.sglang_venv)")
    with RealParser(venv_python()) as parser:
        yield parser


def servectl_verdict(argv: list[str]) -> dict[str, Any]:
    try:
        return {"ok": True, "args": CATALOG.parse_argv(argv)}
    except ArgvError as err:
        return {"ok": False, "error": str(err)}


def assert_same_verdict(real: RealParser, argv: list[str]) -> None:
    full = ["--model-path", "/m", *argv]
    theirs, ours = real.verdict(full), servectl_verdict(full)
    assert ours["ok"] == theirs["ok"], f"{argv}: servectl {ours} / sglang {theirs}"
    if ours["ok"]:
        real_args = theirs["args"]
        assert isinstance(real_args, dict)
        for dest, value in ours["args"].items():
            if dest not in CUSTOM_ACTIONS:
                assert _same(value, real_args.get(dest)), f"{argv}: {dest} servectl {value!r} / sglang {real_args}"


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


# -- examples the issue found --------------------------------------------------------------------------------
ISSUE_CASES = [
    # LoRAPathAction (found by the generated profiles): a {...} entry must be JSON naming lora_name and lora_path
    ["--lora-paths", '{"decode":{"max_bs":8}}'],
    ["--lora-paths", '{"lora_name":"a","lora_path":"/p"}', " plain "],
    ["--lora-paths", "{not json}"],
    ["--lora-paths"],
    ["--lora-paths=[1]"],
    ["--context-length", "64K"],
    ["--context-length", "1m"],
    ["--context-length", "1g"],
    ["--context-length", "1t"],
    ["--context-length", "1M"],
    ["--context-length", "1Mi"],
    ["--context-length", "64Ki"],
    ["--context-length", "1.5M"],
    ["--context-length", "1.5Mi"],
    ["--monokernel-backend"],
    ["--monokernel-backend", "amd"],
    ["--mem-fraction-static", "-1e3"],
    ["--mem-fraction-static", "-inf"],
    ["--mem-fraction-static", "-.5"],
    ["--mem-fraction-static", "-1"],
    ["--served-model-name", "- svc"],
    ["--served-model-name", "-svc"],
    ["--served-model-name", "-"],
    ["--forward-hooks", "{}"],
    ["--forward-hooks", "[1, 2]"],
    ["--forward-hooks", "NaN"],
    ["--cuda-graph-config", '{"decode": {"max_bs": 8}}'],
    ["--cuda-graph-config", '{"verify": {}}'],
    ["--cuda-graph-config", '{"decode": {"max_bsz": 8}}'],
    ["--cuda-graph-config", "[1]"],
    ["--cuda-graph-config", '{"prefill": {"backend": "tc_piecewise"}}'],
    ["--cuda-graph-backend-decode", "tc_piecewise"],
    ["--max-mamba-cache", "19"],
    ["--tp", "2"],
    ["--t", "2"],
    ["--enable-hierarchical-cache=1"],
    ["--no-enable-tf32-matmul"],
    ["--tp-size=2"],
    ["--tp-size", "2", "3"],
    ["--log-requests-level", "5"],
    ["--model", "-h"],
    ["--hel"],
]


@pytest.mark.parametrize("argv", ISSUE_CASES, ids=lambda a: " ".join(a))
def test_the_issue_cases_get_the_real_parsers_verdict(real: RealParser, argv: list[str]) -> None:
    assert_same_verdict(real, argv)


# -- generated ------------------------------------------------------------------------------------------------
_OPTIONS = [o for o in CATALOG.options if o.dest != "model_path"]
_SUFFIXES = ["", "k", "K", "M", "m", "G", "g", "T", "t", "Ki", "Mi", "Gi", "Ti", "ki", "KI", "mi"]
_TRICKY = ["-1", "-1e3", "-inf", "-.5", "-0.5", "- x", "-x", "-", "--", "nan", "inf", "1_000", " 7 ", "+3", "0x10",
           "1e3", "True", "None", "null", "", "{}", "[]", "[1]", '{"a": 1}', "1.0", "٣", "x y"]  # fmt: skip


def _spellings(opt: CatalogOption) -> st.SearchStrategy[str]:
    flags = list(opt.flags)
    prefixes = [f[:n] for f in flags for n in range(3, len(f))]
    return st.one_of(st.sampled_from(flags), st.sampled_from(prefixes or flags))


def _values(opt: CatalogOption) -> st.SearchStrategy[str]:
    numbers = st.one_of(st.integers(-(10**20), 10**20).map(str), st.floats().map(repr))
    sized = st.tuples(st.decimals(0, 10**4, places=2).map(str), st.sampled_from(_SUFFIXES)).map("".join)
    keys = st.sampled_from(["decode", "prefill", "x", "backend", "max_bs", "bs"])
    json_values = st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**70), 2**70)
        | st.text(max_size=4)
        | st.sampled_from(["full", "tc_piecewise"]),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
        max_leaves=6,
    ).map(json.dumps)
    pool = [numbers, sized, json_values, st.sampled_from(_TRICKY), st.text(max_size=6)]
    if opt.choices:
        pool.append(st.sampled_from(list(opt.choices)))
    return st.one_of(*pool)


@st.composite
def argvs(draw: st.DrawFn) -> list[str]:
    opt = draw(st.sampled_from(_OPTIONS))
    flag = draw(_spellings(opt))
    values = draw(st.lists(_values(opt), max_size=3 if opt.nargs in ("+", "*") else 2))
    if values and draw(st.booleans()) and not flag.startswith("--no-"):
        return [f"{flag}={values[0]}", *values[1:]]
    return [flag, *values]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=argvs())
def test_generated_flags_and_values_get_the_real_parsers_verdict(real: RealParser, argv: list[str]) -> None:
    assert_same_verdict(real, argv)


@pytest.mark.parametrize(
    "argv", [["--tokenizer-mode=--"], ["--tokenizer-path=--"], ["--tp-size=--"], ["--tokenizer-mode", "--", "auto"]]
)
def test_a_double_dash_given_as_an_options_explicit_value_gets_the_real_parsers_verdict(
    real: RealParser, argv: list[str]
) -> None:
    """argparse strips '--' from an option's values ('--opt=--' stores [] unchecked); hypothesis found it."""
    assert_same_verdict(real, argv)


def test_the_shipped_flag_catalog_is_what_the_extraction_script_reads_off_the_wheel(real: RealParser) -> None:
    import subprocess
    from pathlib import Path

    from servectl.profile import engine_dump

    dumped = subprocess.run(
        [str(venv_python()), engine_dump.__file__, "flags"], capture_output=True, text=True, check=True
    ).stdout
    shipped = Path(engine_dump.__file__).parent / "catalogs" / "sglang-0.5.23.json"
    assert json.loads(dumped) == json.loads(shipped.read_text()), "run python3 scripts/extract_sglang_catalogs.py"


# -- generated profiles ----------------------------------------------------------------------------------------
@st.composite
def profile_changes(draw: st.DrawFn) -> tuple[str, list[dict[str, Any]]]:
    from parser_corpus import ARG_KEYS, TYPED, VALUES

    name = draw(st.sampled_from(sorted(_profiles())))
    arg = st.builds(lambda k, v: {"args": k, "value": v}, st.sampled_from(ARG_KEYS), st.sampled_from(VALUES))
    typed = st.sampled_from(TYPED).flatmap(
        lambda fv: st.sampled_from(fv[1]).map(lambda v: {"typed": fv[0], "value": v})
    )
    return name, draw(st.lists(arg | typed, min_size=1, max_size=4))


@functools.cache
def _profiles() -> dict[str, Any]:
    from parser_corpus import runnable_profiles

    return runnable_profiles()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=profile_changes())
def test_every_argv_of_a_generated_profile_servectl_accepts_is_accepted_by_sglang(
    real: RealParser, case: tuple[str, list[dict[str, Any]]]
) -> None:
    from parser_corpus import MODEL_PATH, NO_EXTRACTED_CATALOGS, apply, argv_of
    from pydantic import ValidationError

    from servectl.profile.rules import RULES

    name, changes = case
    profile = _profiles()[name]
    try:
        for change in changes:
            profile = apply(profile, change)
    except ValidationError:
        return  # the schema refuses it: no argv
    refused = {rule for rule, check in RULES.items() if any(True for _ in check(profile, NO_EXTRACTED_CATALOGS))}
    verdict = real.verdict([*MODEL_PATH, *argv_of(profile)])
    if not refused:
        assert verdict["ok"], f"servectl accepts {name} {changes}, SGLang says {verdict.get('error')}"
    assert ("engine.catalog" not in refused) == verdict["ok"], f"{name} {changes}: {refused} / {verdict}"
