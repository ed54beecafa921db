"""The campaign file: schema (shipped and generated agree), one located line per problem, variants spelled out
(explicit and the product of axes less the excludes), and every variant validated and compiled before anything
starts - a bad one refuses the campaign naming it, or is kept as ``rejected-invalid`` with ``--skip-invalid``."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from tests.unit.cli_run import REPO, run_cli

from servectl.campaign.load import axis_variant_name, load_campaign
from servectl.campaign.model import campaign_json_schema
from servectl.errors import ProfileError
from servectl.profile.yaml_locations import display_path
from servectl.testing.host import FakeHost

EXAMPLE = REPO / "examples" / "campaign-demo.yaml"

GOOD = """\
name: demo-speed
base: demo
variants:
  - name: fast
    overrides:
      engine:
        env: {STANDIN_TOKEN_RATE: "400"}
workload:
  points:
    - {name: c1, prompt_tokens: 1024, concurrency: 1, max_tokens: 128}
    - {name: c4, prompt_tokens: 1024, concurrency: 4}
decision: {primary_point: c1}
"""


def write(folder: Path, text: str, name: str = "campaign.yaml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def problems_of(path: Path) -> list[str]:
    with pytest.raises(ProfileError) as err:
        load_campaign(path)
    return str(err.value).splitlines()


def test_the_shipped_schema_is_generated_from_the_models_and_the_example_follows_it() -> None:
    import jsonschema
    import yaml

    shipped = json.loads((REPO / "schema" / "campaign.schema.json").read_text())
    assert shipped == campaign_json_schema(), "regenerate schema/campaign.schema.json from campaign_json_schema()"
    assert EXAMPLE.read_text().splitlines()[0] == "# yaml-language-server: $schema=../schema/campaign.schema.json"
    jsonschema.validate(yaml.safe_load(EXAMPLE.read_text()), shipped)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**yaml.safe_load(EXAMPLE.read_text()), "budjet": {}}, shipped)


def test_each_problem_is_one_line_with_file_line_and_field(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        name: demo-speed
        base: demo
        variants:
          - name: fast
            overrides: {engine: {tp: 1}}
        axes:
          engine.max_running_requests: [2, 4]
        exclude:
          - {engine.max_runing_requests: 4}
        workload:
          points:
            - {name: c1, prompt_tokens: 1024}
        decision:
          primary_point: c8
        """,
    )
    lines = problems_of(path)
    assert lines == [
        f"{path}:14: decision.primary_point: 'c8' is no workload point; one of: c1",
        f"{path}:9: exclude[0].engine.max_runing_requests: no such axis; did you mean 'engine.max_running_requests'?",
    ]


def test_schema_problems_name_the_key_and_suggest_the_fix(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        GOOD.replace("decision: {primary_point: c1}", "decision: {primary_point: c1, min_repets: 4, alpha: 2}").replace(
            "concurrency: 4}", "concurrency: 0}"
        ),
    )
    lines = problems_of(path)
    assert f"{path}:12: decision.min_repets: unknown key; did you mean 'min_repeats'?" in lines
    assert any(line.startswith(f"{path}:12: decision.alpha: 2: ") and "less than 0.5" in line for line in lines)
    assert any(line.startswith(f"{path}:11: workload.points[1].concurrency: 0: ") for line in lines)
    assert len(lines) == 3


def test_a_campaign_without_variants_or_with_repeated_names_is_refused(tmp_path: Path) -> None:
    none = write(tmp_path, GOOD.split("variants:")[0] + "workload:" + GOOD.split("workload:")[1], "none.yaml")
    assert problems_of(none) == [f"{none}:1: no variants: give `variants` (a list of overrides) or `axes`"]
    twice = write(
        tmp_path,
        GOOD.replace("variants:\n", "variants:\n  - {name: fast}\n  - {name: incumbent}\n"),
        "twice.yaml",
    )
    lines = problems_of(twice)
    assert f"{twice}:5: variants: 'incumbent' names the incumbent; rename the variant" in lines
    assert f"{twice}:6: variants: variant 'fast' is named twice" in lines


def test_incumbent_bench_runs_and_reference_csv_that_cannot_be_read_are_one_line_each(
    tmp_path: Path, profile_dir: Path
) -> None:
    (tmp_path / "ref.csv").write_text("prompt_tokens,decode_tok_s\n1024,fast\n")
    path = write(
        tmp_path,
        GOOD.replace("workload:", "incumbent:\n  bench_runs: [runs/old]\n  reference_csv: ref.csv\nworkload:"),
    )
    with FakeHost(state_dir=tmp_path / "home") as host, pytest.raises(ProfileError) as err:
        host.check_campaign(file=path)
    lines = str(err.value).splitlines()
    assert len(lines) == 2
    shown = display_path(path)
    assert lines[0].startswith(f"{shown}:9: incumbent.bench_runs[0]: {tmp_path / 'runs' / 'old'}: no such folder")
    assert lines[1].startswith(f"{shown}:10: incumbent.reference_csv: {tmp_path / 'ref.csv'}:2: ")


def test_an_objective_named_like_a_variant_or_too_long_for_a_profile_name_is_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        GOOD.replace("name: demo-speed", "name: " + "c" * 30)
        + "objectives:\n"
        + "  - {name: fast, kind: max_output_tpm}\n"
        + f"  - {{name: {'x' * 40}, kind: max_output_tpm}}\n",
    )
    lines = problems_of(path)
    assert lines[0] == f"{path}:14: objectives[0].name: 'fast' names a variant too; rename one of them"
    assert lines[1].startswith(f"{path}:15: objectives[1].name: profile name 'cccccccccc")
    assert lines[1].endswith("is longer than 63 characters; shorten the campaign or objective name")
    assert len(lines) == 2


def test_axes_make_their_product_less_the_excluded_combinations(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        GOOD.replace(
            "workload:",
            "axes:\n"
            "  engine.max_running_requests: [2, 4]\n"
            "  engine.args.chunked-prefill-size: [256, 512]\n"
            "exclude:\n"
            "  - {engine.max_running_requests: 4, engine.args.chunked-prefill-size: 512}\n"
            "workload:",
        ),
    )
    loaded = load_campaign(path)
    names = [v.name for v in loaded.variants]
    assert names == ["fast", "mrr2_cps256", "mrr2_cps512", "mrr4_cps256"]  # the long names by their initials
    combo = loaded.variants[2]
    assert combo.overrides == {"engine": {"max_running_requests": 2, "args": {"chunked-prefill-size": 512}}}
    assert combo.axes == {"engine.max_running_requests": 2, "engine.args.chunked-prefill-size": 512}
    assert combo.locations[("engine", "args", "chunked-prefill-size")] == (path, 10)
    assert loaded.variants[0].locations[("engine", "env", "STANDIN_TOKEN_RATE")] == (path, 7)
    assert axis_variant_name({"engine.tp": 2}) == "tp-2"


def test_every_variant_is_validated_and_compiled_and_a_bad_one_refuses_the_campaign(
    tmp_path: Path, profile_dir: Path
) -> None:
    path = write(
        tmp_path,
        GOOD.replace(
            "workload:",
            "  - name: typo\n    overrides:\n      engine:\n        args: {speculative-num-stepz: 3}\nworkload:",
        ),
    )
    with FakeHost(state_dir=tmp_path / "home") as host:
        with pytest.raises(ProfileError) as err:
            host.check_campaign(file=path)
        assert str(err.value) == (
            f"{display_path(path)}:11: engine.args.speculative-num-stepz: variant typo: --speculative-num-stepz is "
            "not a flag of catalog sglang-0.5.23; did you mean 'speculative-num-steps'?"
        )
        check = host.check_campaign(file=path, skip_invalid=True)
        assert host.engine.containers == {} and host.engine.calls == []  # nothing created, nothing asked
    fast, typo = check.variants
    assert fast.valid and fast.plan_hash and fast.plan_hash != check.incumbent.plan_hash
    assert fast.loaded is not None and fast.loaded.profile.name == "demo-speed.fast"
    assert fast.loaded.profile.engine.env["STANDIN_TOKEN_RATE"] == "400"
    assert fast.loaded.profile.status == "candidate" and fast.loaded.profile.evidence is None
    assert not typo.valid and typo.to_dict()["status"] == "rejected-invalid"
    assert "variant typo: --speculative-num-stepz" in typo.reason()
    assert check.invalid_variants == (typo,) and check.valid_variants == (fast,)


def test_a_profile_problem_names_the_variant_and_the_campaign_line_that_set_it(
    tmp_path: Path, profile_dir: Path
) -> None:
    path = write(tmp_path, GOOD.replace('env: {STANDIN_TOKEN_RATE: "400"}', "tp: 0"))
    with FakeHost(state_dir=tmp_path / "home") as host, pytest.raises(ProfileError) as err:
        host.check_campaign(file=path)
    (line,) = str(err.value).splitlines()
    assert line.startswith(f"{display_path(path)}:7: engine.tp: variant fast: 0: ")


def test_the_base_the_incumbent_and_the_gates_are_checked_too(tmp_path: Path, profile_dir: Path) -> None:
    path = write(
        tmp_path,
        GOOD.replace(
            "base: demo", "base: demo\nincumbent: {profile: demo-rollbak}\ngates: {suite: default, only: [tool]}"
        ),
    )
    with FakeHost(state_dir=tmp_path / "home") as host, pytest.raises(ProfileError) as err:
        host.check_campaign(file=path)
    lines = str(err.value).splitlines()
    assert len(lines) == 2
    shown = display_path(path)
    assert lines[0].startswith(f"{shown}:3: incumbent.profile: profile 'demo-rollbak' not found")
    assert lines[0].endswith("did you mean demo-rollback?")
    assert lines[1] == (
        f"{shown}:4: gates.only[0]: 'tool' is no gate of suite default "
        "(smoke, structured, tools, reasoning, long_context, endurance, vram)"
    )


def test_campaign_validate_prints_each_variant_and_exits_2_on_bad_input(
    tmp_path: Path, profile_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(monkeypatch, capsys, "campaign", "validate", str(EXAMPLE))
    assert code == 0, err
    assert out.splitlines()[0].startswith("campaign demo-speed: base demo, incumbent demo (plan ")
    assert "5 variants, all valid" in out.splitlines()[0]
    assert [line.split()[0] for line in out.splitlines()[3:]] == [
        "fast",
        "within-noise",
        "mrr2_sct1",
        "mrr2_sct4",
        "mrr8_sct4",
    ]
    data = json.loads(run_cli(monkeypatch, capsys, "campaign", "validate", str(EXAMPLE), "--json")[1])
    assert data["incumbent"]["profile"] == "demo" and len({v["plan_hash"] for v in data["variants"]}) == 5
    bad = write(tmp_path, GOOD.replace("primary_point: c1", "primary_point: c9"))
    code, out, err = run_cli(monkeypatch, capsys, "campaign", "validate", str(bad))
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        f"error: {display_path(bad)}:12: decision.primary_point: 'c9' is no workload point; one of: c1, c4"
    ]


def test_where_the_image_is_here_each_variant_is_parsed_by_its_own_sglang_and_a_refusal_makes_it_invalid(
    tmp_path: Path, profile_dir: Path
) -> None:
    from servectl.testing.docker import PARSED, FakeDockerEngine, probe_answer

    (profile_dir / "real.yaml").write_text(
        "name: real\nimage: {ref: example/sglang:1}\nmodel: {path: /models/m, served_name: m}\n"
        "serve: {port: 8180, role: bench}\n"
    )
    asked: list[list[str]] = []

    def sglang(image: str, command: list[str]) -> Any:
        asked.append(command)
        if "2048" in command:  # what this image's SGLang (a newer build, say) refuses
            refused = {"sglang_version": "0.5.24", "parsed": False, "parse_error": "--max-total-tokens: too small"}
            return probe_answer(refused)
        return probe_answer(PARSED)

    path = write(
        tmp_path,
        GOOD.replace("base: demo", "base: real").replace(
            "variants:\n",
            "variants:\n  - {name: small, overrides: {engine: {args: {max-total-tokens: 2048}}}}\n",
        ),
    )
    engine = FakeDockerEngine(images={"example/sglang:1"}, oneshot=sglang)
    with FakeHost(state_dir=tmp_path / "home", engine=engine) as host:
        with pytest.raises(ProfileError) as err:
            host.check_campaign(file=path)
        assert str(err.value) == (
            f"{display_path(path)}:4: variant small: SGLang 0.5.24 in image example/sglang:1 rejects its argv: "
            "--max-total-tokens: too small (servectl validate PROFILE --in-image asks the same)"
        )
        check = host.check_campaign(file=path, skip_invalid=True)
        assert engine.containers == {}  # throwaway parse containers only, nothing started
    small, fast = check.variants
    assert not small.valid and small.plan is None and fast.valid
    assert len(asked) == 4  # the two variants' argv, asked once per check


def test_a_base_on_a_production_port_is_said_by_validate(
    tmp_path: Path, profile_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every variant takes its base's port: on production's, what serves there must stop for each variant (a
    released engine still holds the port, so it cannot wait warm) and clients reach the variants."""
    (profile_dir / "prod.yaml").write_text(
        "name: prod\nextends: demo\nrollback: null\nserve: {role: production, port: 8080}\n", encoding="utf-8"
    )
    code, out, err = run_cli(monkeypatch, capsys, "campaign", "validate", str(write(tmp_path, GOOD)))
    assert code == 0 and "note:" not in out  # demo is a bench profile on 8190
    prod = write(tmp_path, GOOD.replace("base: demo", "base: prod"), "prod-campaign.yaml")
    code, out, err = run_cli(monkeypatch, capsys, "campaign", "validate", str(prod))
    assert code == 0, err
    assert out.splitlines()[-1].startswith("note: base prod serves on production port 8080: every variant takes it")
    data = json.loads(run_cli(monkeypatch, capsys, "campaign", "validate", str(prod), "--json")[1])
    assert len(data["notes"]) == 1 and "cannot wait warm" in data["notes"][0]
