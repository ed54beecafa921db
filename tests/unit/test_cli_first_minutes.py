"""What a new user meets first: dry-runs with unset variables, diff, JSON output, --help, completion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import REPO, servectl
from typer.testing import CliRunner

from servectl.cli import complete


def test_dry_run_with_unset_variables_shows_them_and_warns_once_naming_each() -> None:
    result = servectl("up", "glm53-exl3-q4-tp4", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "'${MODEL_ROOT}/GLM-5.3-Flash-EXL3-Q4:/model:ro'" in result.stdout
    assert "${RUNTIME_ASSETS}/chat-template-mm.jinja" in result.stdout
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("warning: ${MODEL_ROOT}, ${RUNTIME_ASSETS} ")
    set_one = servectl("up", "glm53-exl3-q4-tp4", "--dry-run", "--json", env={"MODEL_ROOT": "/srv/models"})
    assert set_one.returncode == 0
    assert "${MODEL_ROOT}" not in set_one.stderr and "${RUNTIME_ASSETS}" in set_one.stderr
    assert "/srv/models/GLM-5.3-Flash-EXL3-Q4" in set_one.stdout


def test_up_still_refuses_an_unset_variable_before_touching_docker() -> None:
    result = servectl("up", "glm53-exl3-q4-tp4")
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "MODEL_ROOT" in result.stderr and "export" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_profile_lists_the_folders_searched_and_ends_with_a_newline(tmp_path: Path) -> None:
    result = servectl("up", "no-such-profile", "--dry-run", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.endswith("\n") and result.stderr.count("\n") == 1
    assert str(tmp_path / "profiles") in result.stderr and "src/servectl/data/profiles" in result.stderr


def test_diff_prints_only_the_two_plans_and_ends_with_a_newline() -> None:
    result = servectl("diff", "glm53-393k", "glm53-exl3-q4-tp4")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # neither another profile's errors nor the unset ${MODEL_ROOT}
    assert result.stdout.endswith("\n")
    assert "engine --tp-size: 2 -> 4" in result.stdout.splitlines()


def test_diff_json_lists_each_changed_field_with_both_values() -> None:
    result = servectl("diff", "demo", "demo-rollback", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["a"], data["b"]) == ("demo", "demo-rollback")
    changes = {c["field"]: (c["a"], c["b"]) for c in data["changes"]}
    assert changes["engine --served-model-name"] == ("demo", "demo-rollback")


def test_validate_json_gives_file_line_field_rule_and_message_per_problem(tmp_path: Path) -> None:
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "wrong-name.yaml").write_text("name: other\nextends: demo\n", encoding="utf-8")
    (folder / "bare.yaml").write_text("name: bare\nstatus: candidate\n", encoding="utf-8")
    result = servectl("validate", "--json", "bare", "wrong-name", "glm53-exl3-524k", "demo", cwd=tmp_path)
    assert result.returncode == 2
    by_name = {entry["profile"]: entry for entry in json.loads(result.stdout)}
    assert by_name["demo"] == {"profile": "demo", "valid": True, "problems": []}
    bare = by_name["bare"]["problems"]
    assert {"file", "line", "field", "rule", "message"} == set(bare[0])
    assert {(p["field"], p["rule"]) for p in bare} >= {("image", "schema.missing"), ("model", "schema.missing")}
    assert bare[0]["file"] == "profiles/bare.yaml" and bare[0]["line"] == 1
    (exl3,) = by_name["glm53-exl3-524k"]["problems"]  # a template: says how to fill it in
    assert {"file", "line", "field", "rule", "message"} == set(exl3)
    assert (exl3["field"], exl3["rule"]) == ("template", "template")
    assert exl3["message"].endswith("servectl adopt <container> --name glm53-exl3-524k")
    assert exl3["file"].endswith("glm53-exl3-524k.yaml") and exl3["line"] == 12
    (problem,) = by_name["wrong-name"]["problems"]
    assert (problem["field"], problem["rule"], problem["line"]) == ("name", "name", 1)


def test_rule_problems_carry_the_rule_name(tmp_path: Path) -> None:
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "bad-role.yaml").write_text("name: bad-role\nextends: demo\nserve: {role: bench, port: 8080}\n")
    result = servectl("validate", "--json", "bad-role", cwd=tmp_path)
    rules = {p["rule"] for p in json.loads(result.stdout)[0]["problems"]}
    assert "serve.role_port" in rules, result.stdout


def test_help_shows_no_type_after_flags_but_keeps_value_types() -> None:
    from servectl.cli.app import COMMANDS, app

    runner = CliRunner()
    for name in [None, "version", *COMMANDS]:
        args = [name, "--help"] if name else ["--help"]
        out = runner.invoke(app, args, env={"COLUMNS": "120"}, prog_name="servectl").output
        assert "<bool>" not in out, (name, out)
    up_help = runner.invoke(app, ["up", "--help"], env={"COLUMNS": "120"}).output
    assert "CHECK-ID" in up_help and "--install-completion" not in up_help
    root_help = runner.invoke(app, ["--help"], env={"COLUMNS": "120"}).output
    assert "--install-completion" in root_help


def test_completion_offers_profiles_check_ids_and_catalog_flags() -> None:
    assert complete.profile_names("glm53-3") == ["glm53-393k"]
    assert "_glm53-ormandj" not in complete.profile_names("")
    assert complete.check_ids("gpu.v") == ["gpu.vram_reserve"]
    assert "speculative-num-steps" in complete.catalog_flags("speculative-n")
    assert complete.catalog_flags("--speculative-num-s") == ["speculative-num-steps"]
    assert complete.catalog_or_profile_names("sglang")[0].startswith("sglang-")


@pytest.mark.parametrize(
    ("words", "cword", "expected"),
    [("servectl up glm53-3", 2, "glm53-393k"), ("servectl preflight demo --force port.f", 4, "port.free")],
)
def test_the_shell_gets_completions_through_typer(words: str, cword: int, expected: str) -> None:
    env = {"_SERVECTL_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    code = "import sys; sys.argv = ['servectl']; from servectl.cli.app import main; main()"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src"), **env},
        timeout=60,
    )
    assert expected in result.stdout.split(), result.stdout + result.stderr


def test_version_option_and_command_print_the_version_of_servectl_version() -> None:
    import ast
    import tomllib

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    # one home: pyproject reads the version from servectl/version.py (and does not write its own)
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "servectl.version.__version__"}
    leaf = ast.parse((REPO / "src" / "servectl" / "version.py").read_text(encoding="utf-8"))
    [assign] = [node for node in leaf.body if isinstance(node, ast.Assign)]
    assert isinstance(assign.value, ast.Constant)
    expected = assign.value.value
    for args in (("--version",), ("version",)):
        result = servectl(*args)
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"servectl {expected}\n", result.stdout
    import servectl as package

    assert package.__version__ == expected  # the fallback when no distribution is installed


def test_a_mistyped_command_still_suggests_the_right_one() -> None:
    result = servectl("statu")
    assert result.returncode == 2 and "No such command 'statu'. Did you mean 'status'?" in result.stderr
