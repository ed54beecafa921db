"""The stand-in checks its argv against the flag catalog and fails like SGLang's argparse parser."""

from __future__ import annotations

import io
import json

import pytest

from servectl.profile.catalog import ArgvError, FlagCatalog
from servectl.standin.argv import load_catalog, parse_server_args, usage_text
from servectl.standin.engine import main

NO_CONFIG = "/nonexistent/standin-model"  # parsing succeeds, then config.json is missing: exit 1, not 2


def run(argv: list[str], **env: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, environ=env, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_unknown_flag_exits_2_with_argparse_usage_and_error() -> None:
    code, out, err = run(["--model-path", NO_CONFIG, "--foo"])
    assert code == 2
    assert out == ""
    assert err.startswith("usage: launch_server.py [-h] --model-path MODEL_PATH\n")
    assert err.rstrip("\n").splitlines()[-1] == "launch_server.py: error: unrecognized arguments: --foo"


def test_bad_int_value_names_the_flag_and_the_value() -> None:
    code, _, err = run(["--model-path", NO_CONFIG, "--tp-size", "x"])
    assert code == 2
    last = err.rstrip("\n").splitlines()[-1]
    assert last == "launch_server.py: error: argument --tp-size/--tensor-parallel-size: invalid int value: 'x'"


def test_choice_outside_upstream_catalog_is_rejected() -> None:
    code, _, err = run(["--model-path", NO_CONFIG, "--quantization", "exl3"])
    assert code == 2
    assert "argument --quantization: invalid choice: 'exl3' (choose from 'awq', 'fp8'," in err


def test_catalog_extension_from_environment_accepts_custom_choice_and_flag() -> None:
    extension = {
        "choices": {"quantization": ["exl3"]},
        "options": [{"flags": ["--sparkinfer-max-batch"], "kind": "value", "type": "int"}],
    }
    code, out, err = run(
        ["--model-path", NO_CONFIG, "--quantization", "exl3", "--sparkinfer-max-batch", "256"],
        STANDIN_CATALOG_EXTEND=json.dumps(extension),
    )
    assert code == 1, err  # past the parser: fails on the missing config.json
    assert "quantization='exl3'" in out
    assert "sparkinfer_max_batch=256" in out


def test_missing_model_path_is_a_required_argument_error() -> None:
    code, _, err = run(["--tp-size", "2"])
    assert code == 2
    assert err.endswith("launch_server.py: error: the following arguments are required: --model-path/--model\n")


def test_malformed_catalog_extension_exits_2_naming_the_variable() -> None:
    code, _, err = run(["--model-path", NO_CONFIG], STANDIN_CATALOG_EXTEND='{"choices": {"no_such_flag": ["x"]}}')
    assert code == 2
    assert err.startswith("launch_server.py: error: STANDIN_CATALOG_EXTEND: ")
    assert "no_such_flag" in err


def test_bad_standin_variable_exits_2_naming_it() -> None:
    code, _, err = run(["--model-path", NO_CONFIG], STANDIN_TOKEN_RATE="fast")
    assert code == 2
    assert err == "launch_server.py: error: STANDIN_TOKEN_RATE='fast' is not a number\n"


def test_help_prints_usage_and_exits_0() -> None:
    code, out, _ = run(["--help"])
    assert code == 0
    assert out.startswith("usage: launch_server.py [-h] --model-path MODEL_PATH")
    assert "  --tp-size, --tensor-parallel-size" in out


def test_usage_lists_every_option_wrapped_like_argparse() -> None:
    catalog = FlagCatalog.load("sglang-0.5.23")
    lines = usage_text(catalog).splitlines()
    indent = " " * len("usage: launch_server.py ")
    assert all(line.startswith(indent) for line in lines[1:])
    assert all(len(line) <= 78 or line.strip().count("[--") == 1 for line in lines)  # long parts stand alone
    text = " ".join(lines)
    assert "[--kv-cache-dtype {auto,fp8_e5m2,fp8_e4m3," in text
    assert "[--enable-metrics]" in text


def test_parsed_args_fill_catalog_defaults_and_sglang_derived_names() -> None:
    catalog = load_catalog("sglang-0.5.23", None)
    args = parse_server_args(catalog, ["--model", "/m", "--context-length", "393216"])
    assert args["model_path"] == "/m"
    assert args["context_length"] == 393216
    assert args["tp_size"] == 1  # catalog default
    assert args["port"] == 30000
    assert args["host"] == "127.0.0.1"
    assert args["served_model_name"] == "/m"
    assert args["tokenizer_path"] == "/m"


def test_human_readable_context_length_is_parsed_like_sglang() -> None:
    catalog = load_catalog("sglang-0.5.23", None)
    assert parse_server_args(catalog, ["--model-path", "/m", "--context-length", "384Ki"])["context_length"] == 393216
    assert parse_server_args(catalog, ["--model-path", "/m", "--context-length", "1M"])["context_length"] == 10**6
    with pytest.raises(ArgvError, match=r"Invalid integer value: .384K.\. Use a plain integer"):
        parse_server_args(catalog, ["--model-path", "/m", "--context-length", "384K"])
    with pytest.raises(ArgvError, match="Invalid integer value: 'lots'"):
        parse_server_args(catalog, ["--model-path", "/m", "--context-length", "lots"])


def test_unknown_catalog_name_is_reported() -> None:
    with pytest.raises(ValueError, match=r"STANDIN_CATALOG: unknown flag catalog 'sglang-9\.9'"):
        load_catalog("sglang-9.9", None)
