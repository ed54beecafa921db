"""``STANDIN_READ_WEIGHTS=1``: the stand-in really reads its model folder's weight files at start, one shard each."""

from __future__ import annotations

import shutil
from pathlib import Path

from servectl.adapters.host import WEIGHT_SUFFIXES
from servectl.standin import engine
from servectl.standin.process import HostStandin

DEMO_MODEL = Path(__file__).resolve().parents[2] / "src/servectl/data/examples/demo-model"


def test_the_standin_reads_each_weight_file_as_one_checkpoint_shard(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(DEMO_MODEL / "config.json", model / "config.json")
    for i in (1, 2, 3):
        (model / f"model-0000{i}-of-00003.safetensors").write_bytes(bytes([i]) * (3 * 2**20))
    (model / "tokenizer.json").write_text("{}", encoding="utf-8")
    with HostStandin(["--model-path", str(model)], env={"STANDIN_READ_WEIGHTS": "1"}) as standin:
        standin.wait_ready(timeout_s=20)
        lines = list(standin.lines)
    shards = [line for line in lines if line.startswith("Loading safetensors checkpoint shards:")]
    assert shards[0].startswith("Loading safetensors checkpoint shards:   0% Completed | 0/3 ")
    assert [s.split("|")[1].split()[0] for s in shards[1:]] == ["1/3", "2/3", "3/3"]
    assert any("Load weight end. elapsed=" in line for line in lines)


def test_without_the_setting_the_shard_count_comes_from_the_config_not_the_files(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(DEMO_MODEL / "config.json", model / "config.json")
    for i in (1, 2, 3, 4, 5):
        (model / f"m{i}.safetensors").write_bytes(b"x")
    with HostStandin(["--model-path", str(model)]) as standin:
        standin.wait_ready(timeout_s=20)
        lines = list(standin.lines)
    first = next(line for line in lines if line.startswith("Loading safetensors checkpoint shards:"))
    assert "| 0/5 " not in first


def test_the_standins_weight_suffixes_are_preflights() -> None:
    assert engine.WEIGHT_SUFFIXES == WEIGHT_SUFFIXES
