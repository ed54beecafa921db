"""Issue 44: what a newcomer following the README ran into, each fixed where the fact is decided."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from servectl.bench.target import bench_target
from servectl.errors import UsageError
from servectl.testing import FakeHost

REPO = Path(__file__).resolve().parents[2]


def test_bench_of_a_profile_whose_port_another_service_holds_names_that_service_and_the_swap(tmp_path: Path) -> None:
    with FakeHost(state_dir=tmp_path / "state") as host:
        host.up(name="demo")
        host.swap(name="demo-rollback")
        with pytest.raises(UsageError) as refused:
            bench_target(host.ctx, name="demo")
    message = str(refused.value)
    assert "demo-rollback runs on its port 8190" in message, message
    assert "`servectl swap demo`" in message and "`servectl bench demo-rollback`" in message, message
    assert "servectl up demo" not in message  # that would be refused: the port is taken


def test_a_recipe_named_without_a_folder_is_the_one_servectl_ships_and_a_missing_path_points_at_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from servectl.paths import DATA_DIR
    from servectl.plan.adopt import AdoptError
    from servectl.service.adopt import recipe_file

    monkeypatch.chdir(tmp_path)  # an empty working folder: examples/ is not here
    name = "glm53-flash-exl3-q4-rtxpro6000-sglang-tp4"
    shipped = DATA_DIR / "examples" / "registry" / f"{name}.json"
    assert recipe_file(Path(name)) == shipped
    with pytest.raises(AdoptError) as missing:
        recipe_file(Path(f"examples/registry/{name}.json"))
    assert str(missing.value) == (
        f"recipe file examples/registry/{name}.json does not exist; servectl ships a recipe of that name: "
        f"--recipe {name} (the file is {shipped})"
    )
    (tmp_path / f"{name}.json").write_text("{}")  # a file of one's own wins over the shipped one
    assert recipe_file(Path(f"{name}.json")) == Path(f"{name}.json")
    with pytest.raises(AdoptError, match=r"^recipe file nope\.json does not exist$"):
        recipe_file(Path("nope.json"))


def test_help_says_where_adopt_writes_and_what_a_dry_run_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli_run import run_cli

    _, adopt_help, _ = run_cli(monkeypatch, capsys, "adopt", "--help")
    assert "else NAME.yaml in your profile folder: ~/.config/servectl/profiles, or $SERVECTL_HOME/profiles" in (
        " ".join(adopt_help.replace("│", " ").split())
    )
    _, up_help, _ = run_cli(monkeypatch, capsys, "up", "--help")
    assert "changes nothing but the plan cache (cache/plans in the state folder" in " ".join(
        up_help.replace("│", " ").split()
    )
    state = tmp_path / "home"
    monkeypatch.setenv("SERVECTL_HOME", str(state))
    monkeypatch.delenv("SERVECTL_NO_PLAN_CACHE", raising=False)
    monkeypatch.chdir(tmp_path)
    code, _, _ = run_cli(monkeypatch, capsys, "up", "demo", "--dry-run")
    assert code == 0
    written = sorted(p.relative_to(state).parts[:2] for p in state.rglob("*") if p.is_file())
    assert written and set(written) == {("cache", "plans")}, written  # what the help says, nothing else


SIDE = """
name: side
extends: demo
rollback: null
model: {served_name: side}
serve: {port: 8191}
"""


def test_swap_says_what_it_replaced_and_why_and_names_what_it_left_running(
    profile_dir: Path, write_profile: Callable[[str, str], Path]
) -> None:
    write_profile("side", SIDE)
    with FakeHost(state_dir=profile_dir.parent / "home") as host:
        host.up(name="side")
        beside = host.swap(name="demo")  # port 8190, no cards: side is in nobody's way
        assert beside.outcome == "started"
        assert "it stopped no servectl service: none held its port or cards" in beside.message, beside.message
        assert "side still serves beside it (a swap replaces only the service on its port or cards" in beside.message
        replaced = host.swap(name="demo-rollback")
        assert "replacing demo (it held port 8190); downtime" in replaced.message, replaced.message
        assert "side still serves beside it" in replaced.message
        assert sorted(s.profile for s in host.status().services) == ["demo-rollback", "side"]


BROKEN = """
name: broken
extends: demo
rollback: null
model: {served_name: broken}
"""


def test_a_restore_after_a_failed_swap_is_no_step_in_the_rollback_chain(
    profile_dir: Path, write_profile: Callable[[str, str], Path]
) -> None:
    from servectl.errors import SwapRolledBack
    from servectl.testing.docker import FakeDockerEngine
    from servectl.testing.engine_script import sglang_like_script
    from servectl.testing.host import STANDIN_IMAGE

    write_profile("side", SIDE)
    write_profile("broken", BROKEN)
    engine = FakeDockerEngine(
        images={STANDIN_IMAGE},
        script_for=lambda spec: sglang_like_script(0.1, crash_at="weights" if "broken" in spec.name else None),
        sleep=lambda s: None,
    )
    with FakeHost(state_dir=profile_dir.parent / "home", engine=engine) as host:
        host.up(name="demo")
        host.swap(name="demo-rollback")  # demo-rollback replaced demo: demo is what ran before it
        host.up(name="side")  # another port: ran beside it, then stopped
        host.down(name="side")
        with pytest.raises(SwapRolledBack):
            host.swap(name="broken")  # fails; demo-rollback is restored
        assert [s.profile for s in host.status().services] == ["demo-rollback"]
        back = host.rollback()
        assert (back.from_profile, back.to_profile) == ("demo-rollback", "demo"), back.message
        assert [s.profile for s in host.status().services] == ["demo"]


KEYED = """
name: keyed
extends: demo
rollback: demo
model: {served_name: keyed}
serve: {api_key_env: I44_ENGINE_KEY}
engine:
  env: {HF_TOKEN: "${HF_TOKEN}"}
"""


def test_unset_variables_the_service_needs_fail_preflight_before_anything_stops(
    profile_dir: Path, write_profile: Callable[[str, str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from servectl.errors import PreflightFailed
    from servectl.testing.docker import FakeDockerEngine
    from servectl.testing.host import STANDIN_IMAGE

    write_profile("keyed", KEYED)
    for name in ("I44_ENGINE_KEY", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    engine = FakeDockerEngine(images={STANDIN_IMAGE}, sleep=lambda s: None)
    state = profile_dir.parent / "home"
    with_both = {**os.environ, "I44_ENGINE_KEY": "k-123", "HF_TOKEN": "hf_x"}
    with FakeHost(state_dir=state, engine=engine, environ=with_both) as host:
        host.up(name="keyed")
        host.swap(name="demo")  # demo replaced keyed: a rollback goes back to keyed
    for environ, unset in (
        ({**os.environ, "HF_TOKEN": "hf_x"}, "I44_ENGINE_KEY (serve.api_key_env names it)"),
        ({**os.environ, "I44_ENGINE_KEY": "k-123"}, "HF_TOKEN (engine.env.HF_TOKEN passes ${HF_TOKEN})"),
    ):
        with FakeHost(state_dir=state, engine=engine, environ=environ) as host:
            report = host.preflight(name="keyed")
            (check,) = [c for c in report.checks if c.id == "env.set"]
            assert check.result == "fail" and f"not set in servectl's environment: {unset}" in check.message
            assert "k-123" not in str(report.to_dict()) and "hf_x" not in str(report.to_dict())
            running = {c.id for c in engine.containers.values() if c.stopped_at is None}
            with pytest.raises(PreflightFailed, match=r"env\.set"):
                host.rollback()  # used to stop demo, fail reading the key, start demo again (exit 4)
            assert {c.id for c in engine.containers.values() if c.stopped_at is None} == running  # nothing stopped
            assert [s.profile for s in host.status().services] == ["demo"]


def test_an_engine_401_through_the_gateway_is_the_gateway_s_own_error_with_its_reason_and_the_fix(
    tmp_path: Path,
) -> None:
    import httpx

    from servectl.gateway.config import GatewayConfig
    from servectl.gateway.keys import create_key
    from servectl.gateway.routes import Upstream
    from servectl.paths import DEMO_MODEL_DIR
    from servectl.standin.process import HostStandin, free_port
    from servectl.testing.gateway import GatewayThread

    config = GatewayConfig.model_validate({"listen": f"127.0.0.1:{free_port()}", "aliases": {"chat": ["keyed"]}})
    key, _ = create_key(config.keys_path({"SERVECTL_HOME": str(tmp_path)}), name="laptop", clock=time.time)
    flags = ["--model-path", str(DEMO_MODEL_DIR), "--served-model-name", "keyed", "--api-key", "engine-secret"]
    with HostStandin(flags) as engine:
        engine.wait_ready()
        # the gateway started before the profile's api_key_env was exported: it has no key for the engine
        up = Upstream(profile="keyed", url=engine.base_url, served_name="keyed", ready=True, api_key=None)
        with GatewayThread(config, upstreams=lambda: [up], state_dir=tmp_path) as gw:
            chat = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
            answer = httpx.post(gw.base_url + "/v1/chat/completions", json=chat,
                                headers={"Authorization": f"Bearer {key}"}, timeout=10)  # fmt: skip
    assert answer.status_code == 502 and answer.headers["X-Servectl-Reason"] == "upstream_auth", answer.text
    error = answer.json()["error"]
    assert error["code"] == "upstream_auth"
    assert error["message"].startswith("the engine of keyed refused the gateway (401: the gateway has no key for it)")
    assert (
        "serve.api_key_env" in error["message"]
        and "servectl gateway down, then servectl gateway up" in (error["message"])
    )
    assert "engine-secret" not in answer.text


def _servectl_on_a_pipe(*args: str, columns: str | None, home: Path) -> subprocess.CompletedProcess[str]:
    """``servectl ARGS`` with stdout a pipe, and COLUMNS as given (None: not set, as on a plain pipe)."""
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin", "HOME": str(home), "SERVECTL_HOME": str(home)}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "servectl", *args], capture_output=True, text=True, env=env,
                          cwd=home, timeout=60, check=False)  # fmt: skip


def test_on_a_pipe_a_table_keeps_every_column_and_whole_values_space_separated(tmp_path: Path) -> None:
    piped = _servectl_on_a_pipe("profiles", columns=None, home=tmp_path)
    assert piped.returncode == 0, piped.stderr
    header = next(line for line in piped.stdout.splitlines() if line.split()[:2] == ["name", "status"])
    assert header.split() == ["name", "status", "TP", "context", "port", "role", "model", "headline", "source"]
    assert not set("│┃━─┏┡") & set(piped.stdout) and "…" not in piped.stdout and "hidden" not in piped.stdout
    demo = next(line for line in piped.stdout.splitlines() if line.split()[:1] == ["demo"])
    assert demo.split()[-1].endswith("demo.yaml"), demo  # the source path, whole
    # a terminal 80 columns wide drops columns by priority, and says which and how to see them
    narrow = _servectl_on_a_pipe("profiles", columns="80", home=tmp_path)
    assert "(role, model, source hidden to fit 80 columns; a wider terminal or a pipe (| cat) shows all)" in (
        " ".join(narrow.stdout.replace("│", " ").split())
    ), narrow.stdout


def test_a_preflight_fix_is_never_cut_even_in_a_narrow_table() -> None:
    import io

    from rich.console import Console

    from servectl.cli.views.preflight import report_table
    from servectl.preflight.model import CheckResult, PreflightReport

    digest = "sha256:" + "0123456789abcdef" * 4
    fix = f"pin it: image.digest: {digest}"
    check = CheckResult(id="image.pinned", title="Image pinned", result="warn", message="not pinned", fix=fix)
    report = PreflightReport(profile_name="demo", checks=[check])
    out = io.StringIO()
    Console(file=out, width=60, color_system=None).print(report_table(report, width=60))
    cells = "".join(line.split("│")[-2].strip() for line in out.getvalue().splitlines() if line.count("│") >= 4)
    assert "…" not in out.getvalue() and digest in cells, out.getvalue()


def test_status_watch_on_a_pipe_prints_each_refresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from servectl.cli import service as service_cli
    from servectl.service.clocks import Clocks

    slept: list[float] = []

    def sleep(seconds: float) -> None:  # the third wait is the user's Ctrl-C
        slept.append(seconds)
        if len(slept) == 3:
            raise KeyboardInterrupt

    with FakeHost(state_dir=tmp_path / "state", clocks=Clocks(sleep=sleep)) as host:  # the CLI pauses on it
        host.up(name="demo")
        monkeypatch.setattr("servectl.host.from_env", lambda: host)
        service_cli._watch_status(0.5)  # stdout is captured: a pipe, not a terminal
    out = capsys.readouterr().out
    refreshes = re.findall(r"^servectl status --watch  \d\d:\d\d:\d\d  \(Ctrl-C to stop\)$", out, flags=re.M)
    assert len(refreshes) == 3 and out.count("demo ") >= 3 and slept == [0.5] * 3, out


def test_gateway_run_s_help_says_one_gateway_per_state_folder(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli_run import run_cli

    _, text, _ = run_cli(monkeypatch, capsys, "gateway", "run", "--help")
    flat = " ".join(text.replace("│", " ").split())
    assert "one gateway per state folder: a second one, on any address, is refused" in flat, flat


def test_a_404_for_a_key_granted_none_of_the_gateway_s_aliases_says_so_instead_of_aliases_none(
    tmp_path: Path,
) -> None:
    import httpx

    from servectl.gateway.config import GatewayConfig
    from servectl.gateway.keys import create_key
    from servectl.standin.process import free_port
    from servectl.testing.gateway import GatewayThread

    config = GatewayConfig.model_validate({"listen": f"127.0.0.1:{free_port()}", "aliases": {"small": ["demo"]}})
    # made while the gateway file had `chat`; the file has changed since
    key, _ = create_key(
        config.keys_path({"SERVECTL_HOME": str(tmp_path)}), name="laptop", aliases=["chat"], clock=time.time
    )
    with GatewayThread(config, upstreams=lambda: [], state_dir=tmp_path) as gw:
        chat = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
        answer = httpx.post(gw.base_url + "/v1/chat/completions", json=chat,
                            headers={"Authorization": f"Bearer {key}"}, timeout=10)  # fmt: skip
    assert answer.status_code == 404 and answer.headers["X-Servectl-Reason"] == "unknown_alias"
    message = answer.json()["error"]["message"]
    assert message.startswith("no alias 'chat'; key 'laptop' is granted chat, none of which this gateway has now")
    assert "aliases: none" not in message


def test_the_dashboard_does_not_tell_a_gateway_without_nvml_to_pip_install_it() -> None:
    from servectl.errors import GpuUnavailable
    from servectl.gateway.dashboard import gpu_document

    def no_pynvml() -> object:
        raise GpuUnavailable(
            "NVML unavailable: the Python package nvidia-ml-py is not installed; "
            "install it with: pip install nvidia-ml-py"
        )

    document = gpu_document(no_pynvml)  # type: ignore[arg-type]
    assert document["available"] is False and "pip install" not in document["problem"]
    assert "servectl status --watch on the host shows the cards" in document["problem"]


@pytest.mark.parametrize("value", ["x-${HF_TOKEN}", "${OTHER_TOKEN}", "Bearer ${HF_TOKEN}"])
def test_an_env_value_docker_would_pass_as_literal_text_is_a_profile_error_at_its_line(
    profile_dir: Path, write_profile: Callable[[str, str], Path], value: str
) -> None:
    """Docker takes a variable from servectl's environment only for a value that is exactly ``${ITS_NAME}``;
    ``x-${VAR}`` reached the engine as the literal text ``x-${VAR}`` (validate ok, up exit 0)."""
    from servectl.errors import ProfileError

    write_profile("literal", f'name: literal\nextends: demo\nengine:\n  env: {{HF_TOKEN: "{value}"}}\n')
    environ = {**os.environ, "HF_TOKEN": "hf_x"}
    with (
        FakeHost(state_dir=profile_dir.parent / "home", environ=environ) as host,
        pytest.raises(ProfileError) as raised,
    ):
        host.load_profile(name="literal")
    (line,) = [ln for ln in str(raised.value).splitlines() if "engine.env" in ln]
    assert re.search(
        r"literal\.yaml:4: engine\.env.*would reach the engine as literal text.*write \$\{HF_TOKEN\}", line
    )
