"""The stand-in reads ``config.json`` from ``--model-path`` and fails like SGLang when it cannot."""

from __future__ import annotations

import io
import json
import signal
from pathlib import Path

import pytest

from servectl.standin.engine import main
from servectl.standin.image import DEMO_MODEL_CONFIG
from servectl.standin.model import ModelConfigError, load_model_info, plan_memory

DEMO_MODEL = Path(__file__).parents[2] / "examples" / "demo-model"


def test_demo_model_config_is_read() -> None:
    info = load_model_info(str(DEMO_MODEL))
    assert info.architecture == "Glm4MoeForCausalLM"
    assert info.derived_context_length == 202752
    assert info.torch_dtype == "bfloat16"
    assert 7e9 < info.parameter_count < 9e9


def test_demo_model_in_the_image_is_the_example_folder_config() -> None:
    assert json.loads((DEMO_MODEL / "config.json").read_text()) == DEMO_MODEL_CONFIG


def test_missing_folder_is_the_transformers_cannot_load_error(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError) as caught:
        load_model_info(str(tmp_path / "absent"))
    assert caught.value.lines[0] == "Traceback (most recent call last):"
    assert caught.value.lines[-1].startswith(f"OSError: Can't load the configuration of '{tmp_path / 'absent'}'")


def test_folder_without_config_json_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match=r"does not appear to have a file named config\.json"):
        load_model_info(str(tmp_path))


def test_invalid_json_is_reported(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelConfigError, match="is not a valid JSON file"):
        load_model_info(str(tmp_path))


def test_context_length_falls_back_through_sglang_keys(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"seq_length": 32768}))
    assert load_model_info(str(tmp_path)).derived_context_length == 32768
    (tmp_path / "config.json").write_text(json.dumps({}))
    assert load_model_info(str(tmp_path)).derived_context_length == 2048


def test_memory_plan_scales_with_tensor_parallelism_and_kv_dtype() -> None:
    info = load_model_info(str(DEMO_MODEL))
    one = plan_memory(info, {"tp_size": 1}, 202752)
    two = plan_memory(info, {"tp_size": 2, "kv_cache_dtype": "fp8_e4m3"}, 202752)
    assert two.weights_gb == pytest.approx(one.weights_gb / 2)
    assert one.shard_count == 4
    assert plan_memory(info, {"max_total_tokens": 524288}, 202752).kv_tokens == 524288


def test_engine_exits_1_with_traceback_on_stderr_when_config_is_missing_and_restores_signals(
    tmp_path: Path,
) -> None:
    out, err = io.StringIO(), io.StringIO()
    handlers = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
    code = main(["--model-path", str(tmp_path)], environ={}, stdout=out, stderr=err)
    assert code == 1
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == handlers  # run in-process
    assert "server_args=ServerArgs(model_path=" in out.getvalue()
    assert err.getvalue().splitlines()[-1].startswith(f"OSError: {tmp_path} does not appear to have a file")
