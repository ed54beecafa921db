"""``servectl --help`` and ``up --dry-run`` stay light: no Docker SDK, no NVML, no HTTP client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")
HEAVY = ("docker", "pynvml", "httpx", "requests")

_PROBE = """
import json, sys
sys.argv = ["servectl", *json.loads(sys.argv[1])]
from servectl.cli.app import main
try:
    main()
except SystemExit as e:
    code = e.code
else:
    code = 0
sys.stderr.write("MODULES " + json.dumps({"code": code, "modules": sorted(sys.modules)}) + "\\n")
"""


def _modules_after(args: list[str], tmp_path: Path) -> tuple[int, set[str], str]:
    env = {**os.environ, "PYTHONPATH": SRC, "SERVECTL_HOME": str(tmp_path)}
    env.pop("SERVECTL_PROFILES", None)
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    line = next(line for line in proc.stderr.splitlines() if line.startswith("MODULES "))
    data = json.loads(line[len("MODULES ") :])
    return data["code"], set(data["modules"]), proc.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["up", "demo", "--dry-run"],
        ["up", "--help"],
        ["status", "--help"],
        ["down", "--help"],
        ["logs", "--help"],
    ],
)
def test_command_does_not_import_docker_nvml_or_http(args: list[str], tmp_path: Path) -> None:
    code, modules, stdout = _modules_after(args, tmp_path)
    assert code in (0, None), stdout
    loaded = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert loaded == []
    if "--dry-run" in args:
        assert "docker run -d" in stdout


@pytest.mark.parametrize("args", [["--help"], ["version"], ["status", "--help"], ["bench", "--help"]])
def test_help_and_version_load_neither_pydantic_nor_rich_nor_typer_coercion(args: list[str], tmp_path: Path) -> None:
    code, modules, _ = _modules_after(args, tmp_path)
    assert code in (0, None)
    loaded = sorted(m for m in modules if m.split(".")[0] in ("pydantic", "rich", "yaml") or m == "typer._adapters")
    assert loaded == []


def test_status_with_no_service_loads_neither_the_profile_models_nor_the_compiler(tmp_path: Path) -> None:
    """Only what listing containers needs; the models and compiler load once a service's drift is computed."""
    probe = _PROBE.replace(
        "from servectl.cli.app import main",
        "import servectl.service.context as h\n"
        "class NoContainers:\n"
        "    def list_managed(self, label_filter=None):\n"
        "        return []\n"
        "h.Context.docker = property(lambda self: NoContainers())\n"
        "from servectl.cli.app import main",
    )
    env = {**os.environ, "PYTHONPATH": SRC, "SERVECTL_HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(["status"])], capture_output=True, text=True, env=env, timeout=60
    )
    line = next(line for line in proc.stderr.splitlines() if line.startswith("MODULES "))
    data = json.loads(line[len("MODULES ") :])
    assert data["code"] in (0, None) and "no servectl services" in proc.stdout
    modules = set(data["modules"])
    assert not {"servectl.profile.models", "servectl.plan.compile", "pydantic", "typer._adapters"} & modules


def test_dry_run_loads_no_pydantic_coercion_and_bad_values_still_fail(tmp_path: Path) -> None:
    code, modules, _ = _modules_after(["up", "demo", "--dry-run"], tmp_path)
    assert code in (0, None) and "typer._adapters" not in modules
    env = {**os.environ, "PYTHONPATH": SRC, "SERVECTL_HOME": str(tmp_path)}
    for args, message in ((["logs"], "Missing argument"), (["logs", "x", "--tail", "abc"], "'abc' is not a valid int")):
        proc = subprocess.run(
            [sys.executable, "-m", "servectl", *args], capture_output=True, text=True, env=env, timeout=60
        )
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr


_UNTOUCHED = """
import click, typer.core, typer.main
classes = (typer.core.TyperArgument, typer.core.TyperOption, typer.core.TyperGroup, typer.core.TyperCommand,
           click.Parameter, click.Option, click.Argument, click.Group, click.Context)
snapshot = lambda: {(c.__name__, k): v for c in classes for k, v in vars(c).items()}
before = snapshot()
from servectl.cli import app
group = typer.main.get_group(app.app)
ctx = click.Context(group)
built = [group.get_command(ctx, name) for name in group.list_commands(ctx)]
assert all(built) and len(built) > 20, built
after = snapshot()
print("CHANGED", sorted(k for k in before.keys() | after.keys() if before.get(k) is not after.get(k)))
"""


def test_the_cli_leaves_typer_and_click_as_they_ship() -> None:
    """No patch of typer's or click's internals: with every command built, their classes are as shipped."""
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.run([sys.executable, "-c", _UNTOUCHED], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "CHANGED []" in proc.stdout, proc.stdout


def test_the_typer_installed_is_one_that_coerces_without_pydantic() -> None:
    """typer 0.29 builds a pydantic TypeAdapter per parameter (``typer._adapters``); pyproject keeps it below."""
    from importlib.metadata import requires, version

    pin = next(r for r in requires("servectl") or [] if r.startswith("typer"))
    assert "<0.29" in pin
    major, minor = (int(p) for p in version("typer").split(".")[:2])
    assert (major, minor) < (0, 29)


def test_a_warm_dry_run_loads_neither_pydantic_nor_the_profile_models(tmp_path: Path) -> None:
    """The second dry-run of an unchanged profile reads its plan from the cache (servectl.adapters.plan_cache)."""
    _, cold, first = _modules_after(["up", "demo", "--dry-run"], tmp_path)
    assert "servectl.profile.models" in cold  # compiled, and cached
    code, warm, second = _modules_after(["up", "demo", "--dry-run"], tmp_path)
    assert code in (0, None) and second == first
    assert not {m for m in warm if m.split(".")[0] in ("pydantic", "yaml") or m == "servectl.profile.models"}


def test_a_run_imports_only_the_module_of_its_command(tmp_path: Path) -> None:
    _, modules, _ = _modules_after(["up", "demo", "--dry-run"], tmp_path)
    cli_modules = sorted(m for m in modules if m.startswith("servectl.cli.") and ".views" not in m)
    # options: the shared option declarations (a few Annotated aliases), loaded with any command that uses one
    assert cli_modules == ["servectl.cli.app", "servectl.cli.complete", "servectl.cli.options", "servectl.cli.service"]
    _, every, _ = _modules_after(["--help"], tmp_path)  # the list names them all: all are loaded
    assert {"servectl.cli.gateway", "servectl.cli.bench", "servectl.cli.swap"} <= every


def test_validate_of_named_profiles_loads_no_pydantic_coercion(tmp_path: Path) -> None:
    code, modules, stdout = _modules_after(["validate", "demo", "demo-rollback"], tmp_path)
    assert code in (0, None), stdout
    assert "typer._adapters" not in modules
    assert stdout.splitlines()[:2] == ["ok      demo", "ok      demo-rollback"] or "ok      demo-rollback" in stdout


def test_status_of_a_local_engine_reads_it_without_the_docker_sdk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``status`` lists and inspects over the engine's unix socket (adapters.docker.engine_socket); here no
    engine answers at the socket named, and the error says so without the SDK having been imported."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-engine.sock'}")
    code, modules, _ = _modules_after(["status"], tmp_path)
    assert code == 1  # EngineUnavailable: the engine is unreachable at that socket
    assert sorted(m for m in modules if m.split(".")[0] in HEAVY) == []
    # nor http.client (email.parser, ssl): the socket speaks HTTP through servectl.adapters.plain_http
    assert sorted(m for m in modules if m in ("http.client", "ssl", "email.parser")) == []


def test_the_status_table_of_running_services_imports_no_rich() -> None:
    """``status`` prints its services as plain text (cli/views/columns.py): of rich, only its cell widths
    (``rich.cells``, what importing it alone loads); its console, text and tables are for --watch and prose."""
    probe = (
        "import sys\n"
        "from service_samples import sample_service\n"
        "from servectl.cli.views.runtime import status_text\n"
        "found = [sample_service('a'), sample_service('b', state='starting')]\n"
        "text = status_text(found, width=80, bold_header=False)\n"
        "print(text)\n"
        "loaded = {m for m in sys.modules if m.split('.')[0] == 'rich'}\n"
        "for m in loaded: sys.modules.pop(m)\n"
        "import rich.cells\n"
        "alone = {m for m in sys.modules if m.split('.')[0] == 'rich'}\n"
        "print('RICH', sorted(loaded - alone), 'rich.cells' in loaded)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, str(Path(__file__).parent)])}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].split()[:2] == ["PROFILE", "STATE"] and "starting" in proc.stdout
    assert "RICH [] True" in proc.stdout
