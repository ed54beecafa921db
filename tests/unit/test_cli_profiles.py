"""The profile commands as a user runs them: output, exit codes, one line per problem, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import REPO, servectl

from servectl.profile.models import profile_json_schema

ADOPT_EXL3 = "servectl adopt <container> --name glm53-exl3-524k"


def test_validate_all_passes_on_a_fresh_install_and_names_the_exl3_template() -> None:
    result = servectl("validate")
    assert result.returncode == 0, result.stderr
    for name in ("glm53-393k", "glm53-524k-bringup", "glm53-exl3-q4-tp4", "demo", "demo-rollback"):
        assert f"ok      {name}" in result.stdout
    template = [line for line in result.stdout.splitlines() if line.startswith("template glm53-exl3-524k: ")]
    assert len(template) == 1 and template[0].endswith(ADOPT_EXL3)
    assert result.stderr == ""


def test_the_exl3_template_named_alone_refuses_with_the_adopt_command() -> None:
    result = servectl("validate", "glm53-exl3-524k")
    assert result.returncode == 2
    assert result.stderr.strip().endswith(ADOPT_EXL3) and "Traceback" not in result.stderr
    up = servectl("up", "glm53-exl3-524k", "--dry-run")
    assert up.returncode == 2 and up.stderr.count("\n") == 1 and ADOPT_EXL3 in up.stderr


def test_bad_profile_exits_2_with_located_lines_and_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "bad.yaml").write_text(
        "name: bad\nimage: {ref: x/y:1}\nmodel: {path: /m, served_name: m}\nserve: {port: 8080, role: bench}\n"
        "engine: {tp: 2, speculative: {algorithm: EAGLE, num_steps: 4, eagle_topk: 1, adaptive_steps: [3, 5]}}\n"
        "gpus: {devices: [0]}\n"
    )
    result = servectl("up", "bad", "--dry-run", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 3, lines
    assert all(line.startswith("error: profiles/bad.yaml:") for line in lines)
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_unknown_profile_is_a_usage_error() -> None:
    result = servectl("up", "glm53-39k", "--dry-run")
    assert result.returncode == 2
    assert "profile 'glm53-39k' not found" in result.stderr and "did you mean glm53-393k" in result.stderr


def test_dry_run_prints_docker_run_and_one_flag_per_line() -> None:
    result = servectl("up", "glm53-393k", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "docker run -d \\\n  --name glm53-flash-sm120 \\\n" in result.stdout
    assert "#   --speculative-adaptive-config /etc/servectl/speculative-adaptive.json\n" in result.stdout


def test_dry_run_json_is_the_plan() -> None:
    result = servectl("up", "demo", "--dry-run", "--json")
    plan = json.loads(result.stdout)
    assert plan["profile"] == "demo" and plan["docker"]["name"] == "servectl-demo"
    assert plan["docker"]["labels"]["servectl.plan-hash"] == plan["plan_hash"]


def test_profiles_json_lists_shipped_profiles_with_their_source() -> None:
    rows = {r["name"]: r for r in json.loads(servectl("profiles", "--json").stdout)}
    assert rows["glm53-393k"]["status"] == "promoted" and rows["glm53-393k"]["tp"] == 2
    assert rows["glm53-393k"]["source"].endswith("profiles/glm53-393k.yaml")
    assert rows["glm53-exl3-524k"]["status"] == "template" and not rows["glm53-exl3-524k"]["error"]
    assert "_glm53-ormandj" not in rows


def test_show_prints_the_resolved_profile_after_extends() -> None:
    result = servectl("show", "glm53-393k")
    assert result.returncode == 0
    assert "resolved from" in result.stdout and "_glm53-ormandj.yaml" in result.stdout
    assert "disable-shared-experts-fusion: true" in result.stdout  # inherited from the base


def test_diff_names_what_differs() -> None:
    out = servectl("diff", "demo", "demo-rollback").stdout
    assert "engine --served-model-name: demo -> demo-rollback" in out


def test_catalog_lists_extended_choices_for_a_profile() -> None:
    out = servectl("catalog", "show", "glm53-exl3-q4-tp4", "--grep", "--quantization").stdout
    assert "exl3" in out
    assert "exl3" not in servectl("catalog", "show", "sglang-0.5.23", "--grep", "--quantization").stdout


def test_shipped_schema_is_current_and_every_profile_points_at_it() -> None:
    shipped = json.loads((REPO / "schema" / "profile.schema.json").read_text())
    assert shipped == profile_json_schema(), "schema is stale: servectl schema > schema/profile.schema.json"
    assert json.loads(servectl("schema").stdout) == shipped
    for path in (REPO / "profiles").glob("*.yaml"):
        first = path.read_text().splitlines()[0]
        assert first == "# yaml-language-server: $schema=../schema/profile.schema.json", path


@pytest.mark.parametrize("name", ["glm53-393k", "glm53-524k-bringup", "demo", "demo-rollback", "glm53-exl3-q4-tp4"])
def test_shipped_profile_validates_against_the_json_schema(name: str) -> None:
    import jsonschema
    import yaml

    schema = json.loads((REPO / "schema" / "profile.schema.json").read_text())
    data = yaml.safe_load((REPO / "profiles" / f"{name}.yaml").read_text())
    if "extends" in data:  # the schema describes resolved profiles; check the merged form
        data = json.loads(servectl("show", name, "--json").stdout)
    jsonschema.validate(data, schema)
