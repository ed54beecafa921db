"""``servectl adopt --recipe``: a ``local-ai-registry/v1`` recipe -> a profile, and the recipe's problems.

The seed is the shipped example (``examples/registry/``: the registry's GLM-5.3-Flash EXL3 Q4 TP4 record);
each fault is planted into a copy of it. Every written profile is loaded with the real loader, and every
problem and refusal must be one line naming the file and the JSON pointer.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from servectl.plan.adopt import AdoptError, adopt_recipe, adoption_yaml, read_recipe
from servectl.profile.loader import ProfileFolder, ProfileSearch, search_path
from servectl.profile.validate import load_profile
from servectl.service.adopt import AdoptOptions, adopt

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "examples" / "registry" / "glm53-flash-exl3-q4-rtxpro6000-sglang-tp4.json"
FILE = "r.json"
DIGEST = "sha256:" + "c3" * 32


def seed() -> dict[str, Any]:
    return json.loads(SEED.read_text(encoding="utf-8"))


def planted(**changes: Any) -> dict[str, Any]:
    """The seed with ``changes`` applied: ``launch__image="x"`` sets /launch/image."""
    data = seed()
    for key, value in changes.items():
        *parents, last = key.split("__")
        node = data
        for part in parents:
            node = node[part]
        node[last] = value
    return data


def args_with(data: dict[str, Any], flag: str, value: str | None) -> dict[str, Any]:
    """``data`` with ``flag``'s value replaced (or the flag and its value removed when ``value`` is None)."""
    data = copy.deepcopy(data)
    args: list[str] = data["launch"]["arguments"]
    at = args.index(flag)
    if value is None:
        del args[at : at + 2]
    else:
        args[at + 1] = value
    return data


def problems_of(data: dict[str, Any]) -> tuple[str, ...]:
    return adopt_recipe(read_recipe(data, file=FILE), file=FILE).problems


def test_the_seed_recipe_becomes_a_valid_profile_with_its_four_problems(tmp_path: Path) -> None:
    adoption = adopt_recipe(read_recipe(seed(), file=FILE), file=FILE)
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / f"{adoption.name}.yaml").write_text(adoption_yaml(adoption), encoding="utf-8")
    profile = load_profile(
        adoption.name, folders=ProfileSearch((ProfileFolder(folder, "test"),), catalogs=tmp_path / "catalogs")
    ).profile
    assert profile.name == "glm53-flash-exl3-q4-rtxpro6000-sglang-tp4" and profile.adopted is None
    assert (profile.engine.tp, profile.engine.context_length, profile.engine.kv_cache_dtype) == (4, 262144, "fp8_e4m3")
    assert profile.engine.quantization == "exl3" and profile.engine.args["ep-size"] == 1
    assert profile.engine.args["disable-shared-experts-fusion"] is True
    assert profile.engine.catalog_extend is not None and profile.engine.catalog_extend.choices == {
        "quantization": ["exl3"]
    }
    assert profile.engine.env == {"SGLANG_EXL3_MAX_BATCH_TOKENS": "256"}
    assert profile.gpus.devices == [0, 1, 2, 3] and profile.container.ipc == "host"
    assert profile.model.path == "${MODEL_ROOT}/GLM-5.3-Flash-EXL3-Q4" and profile.model.container_path == "/model"
    assert profile.model.repo == "0xSero/GLM-5.3-Flash-EXL3-Q4" and profile.model.revision is None
    assert profile.model.served_name == "glm-5.3-flash-exl3-q4"
    assert [(m.source, m.target, m.read_only) for m in profile.container.mounts] == [
        ("${RUNTIME_ASSETS}/chat-template-mm.jinja", "/chat-template.jinja", True)
    ]
    assert profile.image.ref == "glm53-flash-sglang-exl3:stage-20260827-r6" and profile.image.digest is None
    assert adoption.exports == ("MODEL_ROOT", "RUNTIME_ASSETS")
    pointers = [p.split(": ", 2)[1] for p in adoption.problems]
    assert pointers == ["/launch/arguments/8", "/launch/container/digest", "/launch/mounts/0", "/launch/ipc"]
    assert all(p.startswith(f"{FILE}: ") and "\n" not in p for p in adoption.problems)
    assert "--quantization exl3" in adoption.problems[0] and "no digest pin" in adoption.problems[1]
    assert "no revision" in adoption.problems[2] and "host IPC" in adoption.problems[3]
    text = adoption_yaml(adoption)
    assert "# Problems in the source" in text and all(f"#   - {p}" in text for p in adoption.problems)
    assert text.startswith("# Written by `servectl adopt` from registry recipe glm53-flash-exl3-q4-rtxpro6000")


def test_an_unknown_flag_is_named_with_what_it_may_mean() -> None:
    data = seed()
    data["launch"]["arguments"] = [
        "--mem-fraction-statik" if a == "--mem-fraction-static" else a for a in data["launch"]["arguments"]
    ]
    data["launch"]["arguments"] += ["--sparkinfer-overlay"]
    problems = problems_of(data)
    typo = [p for p in problems if "--mem-fraction-statik" in p]
    assert len(typo) == 1 and "/launch/arguments/29: " in typo[0]
    assert "did you mean --mem-fraction-static?" in typo[0]
    alien = [p for p in problems if "--sparkinfer-overlay" in p]
    assert len(alien) == 1 and "did you mean" not in alien[0] and "/launch/arguments/47: " in alien[0]
    assert "no flag of SGLang 0.5.23" in alien[0]


def test_a_pinned_image_and_a_matching_model_revision_leave_only_the_catalog_problem() -> None:
    data = planted(launch__container={"digest": DIGEST, "image": "glm53-flash-sglang-exl3:stage-20260827-r6"})
    adoption = adopt_recipe(read_recipe(data, file=FILE), file=FILE)
    assert adoption.data["image"] == {
        "ref": "glm53-flash-sglang-exl3:stage-20260827-r6",
        "digest": DIGEST,
        "entrypoint": ["python3", "-m", "sglang.launch_server"],
    }
    assert not any("digest" in p for p in adoption.problems)
    bad = planted(launch__container={"digest": "sha256:short"})
    assert [p for p in problems_of(bad) if "/launch/container/digest" in p] == [
        f"{FILE}: /launch/container/digest: 'sha256:short' is not a digest (sha256: and 64 hex digits)"
    ]


def test_a_hugging_face_snapshot_mount_pins_the_model_revision() -> None:
    snapshot = "/hf/hub/models--0xSero--GLM-5.3-Flash-EXL3-Q4/snapshots/" + "ab" * 20
    data = seed()
    data["launch"]["mounts"][0]["source"] = snapshot
    adoption = adopt_recipe(read_recipe(data, file=FILE), file=FILE)
    assert adoption.data["model"]["revision"] == "ab" * 20
    assert not any("no revision" in p for p in adoption.problems)


def test_serving_facts_the_argv_contradicts_are_named() -> None:
    data = args_with(planted(serving__tensor_parallel=2, hardware_count=8), "--context-length", None)
    problems = [p for p in problems_of(data) if "/serving/" in p or "/hardware_count" in p]
    assert problems == [
        f"{FILE}: /serving/tensor_parallel: the recipe was measured with 2, but its argv has --tp-size 4; make "
        "them agree (add --tp-size 2 to /launch/arguments, or correct the fact)",
        f"{FILE}: /serving/max_context_tokens: the recipe was measured with 262144, but its argv has no "
        "--context-length (SGLang's default None); make them agree (add --context-length 262144 to "
        "/launch/arguments, or correct the fact)",
        f"{FILE}: /hardware_count: 8 GPUs, but the argv's tp x dp uses 4; gpus.devices follows hardware_count: "
        "make them agree",
    ]


def test_a_rejected_value_gets_a_close_choice() -> None:
    problems = problems_of(args_with(seed(), "--kv-cache-dtype", "fp8_e4m4"))
    [line] = [p for p in problems if ": /launch/arguments/12: " in p]
    assert "did you mean fp8_e4m3 or fp8_e5m2?" in line and "(choose from" not in line


def test_the_image_s_own_parser_decides_over_the_catalog() -> None:
    recipe = read_recipe(seed(), file=FILE)
    accepted = adopt_recipe(recipe, file=FILE, image_verdict=(True, "0.5.23"))
    assert not any("--quantization" in p for p in accepted.problems)
    assert any("own SGLang 0.5.23 parses the argv" in n for n in accepted.notes)
    rejected = adopt_recipe(recipe, file=FILE, image_verdict=(False, "argument --quantization: invalid choice"))
    assert f"{FILE}: /launch/arguments: image glm53-flash-sglang-exl3:stage-20260827-r6's own SGLang rejects" in (
        "\n".join(rejected.problems)
    )


BAD_INPUT: list[tuple[Any, str]] = [
    ([1, 2], f"{FILE}: a recipe is a JSON object, not list"),
    (planted(schema_version="local-ai-registry/v0"), f"{FILE}: /schema_version: 'local-ai-registry/v0' is not"),
    (planted(engine={"name": "vllm"}), f"{FILE}: /engine/name: 'vllm'; servectl serves SGLang recipes only"),
    (planted(launch__kind="docker-compose"), "is not a docker launch (adopt its compose file with --compose"),
    (planted(launch__image=None, launch__container=None), f"{FILE}: /launch/image: the recipe names no image"),
    (planted(launch__mounts=[{"source": "/x"}]), f"{FILE}: /launch/mounts/0/target: field required"),
    (planted(hardware_count=-1), f"{FILE}: /hardware_count: input should be greater than or equal to 0"),
    (planted(launch__shm_size="lots"), f"{FILE}: /launch/shm_size: string should match pattern"),
    (args_with(seed(), "--model-path", "0xSero/GLM-5.3-Flash-EXL3-Q4"), "is a tag-only model"),
    (args_with(seed(), "--model-path", "/elsewhere"), "--model-path /elsewhere is in no folder of /launch/mounts"),
]


@pytest.mark.parametrize(("data", "message"), BAD_INPUT, ids=[m[:40] for _, m in BAD_INPUT])
def test_bad_recipes_are_refused_in_one_line(data: Any, message: str) -> None:
    with pytest.raises(AdoptError) as refused:
        adopt_recipe(read_recipe(data, file=FILE), file=FILE)
    assert message in refused.value.message and len(refused.value.lines()) == 1, refused.value.message
    assert refused.value.exit_code == 2


class NoDocker:
    """No container, no image: the recipe's image is not on this host."""

    def __init__(self, images: dict[str, dict[str, Any]] | None = None) -> None:
        self.images = images or {}

    def container_document(self, id_or_name: str) -> dict[str, Any] | None:
        return None

    def image_document(self, ref: str) -> dict[str, Any] | None:
        return self.images.get(ref)

    def volume_folder(self, name: str) -> str | None:
        return None


def test_adopt_recipe_writes_the_profile_and_never_loses_a_file(tmp_path: Path) -> None:
    folder = tmp_path / "profiles"
    folder.mkdir()
    recipe = tmp_path / "recipe.json"
    recipe.write_text(SEED.read_text(encoding="utf-8"), encoding="utf-8")
    opts = AdoptOptions(
        folders=ProfileSearch((ProfileFolder(folder, "./profiles"),), catalogs=tmp_path / "catalogs"), environ={}
    )
    dry = adopt(
        docker=NoDocker(),
        recipe=recipe,
        name="glm",
        opts=AdoptOptions(dry_run=True, folders=opts.folders, environ=os.environ),
    )
    assert not dry.written and list(folder.iterdir()) == [] and dry.problems == ()
    assert len(dry.adoption.problems) == 4
    written = adopt(docker=NoDocker(), recipe=recipe, name="glm", opts=opts)
    assert written.path == folder / "glm.yaml" and written.text == written.path.read_text(encoding="utf-8")
    assert load_profile("glm", folders=opts.folders).profile.engine.tp == 4
    # the plan compiles back to the recipe's launch; what differs is where servectl decides (said in the notes)
    assert sorted(written.diff) == ["engine host: (unset) -> 0.0.0.0", 'ports: [] -> ["127.0.0.1:8000:8000"]']
    before = written.path.read_bytes()
    with pytest.raises(AdoptError, match=r"profile glm already exists .* pass --force"):
        adopt(docker=NoDocker(), recipe=recipe, name="glm", opts=opts)
    recipe.write_text('{"schema_version": "local-ai-registry/v1", "id": "x",', encoding="utf-8")
    with pytest.raises(AdoptError) as broken:
        adopt(
            docker=NoDocker(),
            recipe=recipe,
            name="glm",
            opts=AdoptOptions(force=True, folders=opts.folders, environ=os.environ),
        )
    assert broken.value.message == f"{recipe}:1:54: not JSON: Expecting property name enclosed in double quotes"
    with pytest.raises(AdoptError, match=f"recipe file {tmp_path / 'gone.json'} does not exist"):
        adopt(docker=NoDocker(), recipe=tmp_path / "gone.json", opts=opts)
    assert written.path.read_bytes() == before and sorted(p.name for p in folder.iterdir()) == ["glm.yaml"]
    recipe.write_text(SEED.read_text(encoding="utf-8"), encoding="utf-8")
    forced = adopt(
        docker=NoDocker(),
        recipe=recipe,
        name="glm",
        opts=AdoptOptions(force=True, folders=opts.folders, environ=os.environ),
    )
    assert forced.backup == folder / "glm.yaml.bak" and forced.backup.read_bytes() == before


def test_an_image_on_this_host_is_asked_with_its_own_parser(tmp_path: Path) -> None:
    from servectl.testing.inspect import image_inspect

    asked: list[tuple[str, Sequence[str]]] = []

    def parser(image: str, argv: Sequence[str]) -> tuple[bool, str]:
        asked.append((image, argv))
        return True, "0.5.23+exl3"

    recipe = tmp_path / "recipe.json"
    recipe.write_text(SEED.read_text(encoding="utf-8"), encoding="utf-8")
    ref = "glm53-flash-sglang-exl3:stage-20260827-r6"
    docker = NoDocker({ref: image_inspect(repo_digests=[])})
    result = adopt(
        docker=docker,
        recipe=recipe,
        out=tmp_path / "p.yaml",
        opts=AdoptOptions(
            dry_run=True, engine_parser=parser, environ=os.environ, folders=search_path(environ=os.environ)
        ),
    )
    assert asked == [(ref, seed()["launch"]["arguments"])]
    assert not any("--quantization" in p for p in result.adoption.problems)
    assert any("own SGLang 0.5.23+exl3 parses the argv" in n for n in result.adoption.notes)
    absent = adopt(
        docker=NoDocker(),
        recipe=recipe,
        out=tmp_path / "p.yaml",
        opts=AdoptOptions(dry_run=True, environ=os.environ, folders=search_path(environ=os.environ)),
    )
    assert any("--quantization exl3" in p for p in absent.adoption.problems)


def servectl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin", "HOME": str(cwd), "SERVECTL_HOME": str(cwd / "s")}
    return subprocess.run(
        [sys.executable, "-m", "servectl", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=60
    )


def test_cli_prints_each_problem_on_one_line_and_refuses_bad_input_in_one(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir()
    done = servectl("adopt", "--recipe", str(SEED), "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    problems = [line for line in done.stdout.splitlines() if line.startswith("problem: ")]
    assert len(problems) == 4 and all(f"problem: {SEED}: /launch/" in p for p in problems)
    assert "before servectl starts it: export MODEL_ROOT RUNTIME_ASSETS" in done.stdout
    assert list((tmp_path / "profiles").iterdir()) == []
    (tmp_path / "bad.json").write_text('{"schema_version": "local-ai-registry/v1"}', encoding="utf-8")
    for args, message in [
        (("--recipe", "bad.json"), "bad.json: /id: field required (and 2 more); fix the recipe"),
        (("--recipe", "bad.json", "some-container"), "--recipe FILE adopts the recipe alone"),
        ((), "name the container to adopt"),
    ]:
        refused = servectl("adopt", *args, cwd=tmp_path)
        assert refused.returncode == 2 and refused.stdout == "", (args, refused.stdout)
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], lines
    assert list((tmp_path / "profiles").iterdir()) == []
