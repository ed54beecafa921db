"""The public API: every name in ``servectl.__all__`` imports, functions are keyword-only, import stays light."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import servectl

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = (
    "load_profile",
    "compile_plan",
    "run_preflight",
    "up",
    "down",
    "services",
    "status",
    "swap",
    "rollback",
    "rollback_check",
    "recover",
    "logs",
    "doctor",
    "adopt",
)


@pytest.mark.parametrize("name", sorted(servectl.__all__))
def test_each_public_name_imports(name: str) -> None:
    value = getattr(servectl, name)
    assert value is not None
    if callable(value) and not inspect.isclass(value):
        assert value.__doc__, f"servectl.{name} has no docstring"


@pytest.mark.parametrize("name", [*FUNCTIONS, "run_bench", "run_profile_bench", "run_qualify", "run_profile_qualify"])
def test_public_functions_take_keyword_arguments_only(name: str) -> None:
    parameters = inspect.signature(getattr(servectl, name)).parameters.values()
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters), name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'api_v2'"):
        _ = servectl.api_v2  # type: ignore[attr-defined]


def test_import_servectl_loads_no_heavy_module() -> None:
    code = "import json, sys, servectl; print(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    loaded = set(json.loads(out))
    heavy = {"docker", "pynvml", "httpx", "matplotlib", "pydantic", "yaml", "typer", "rich"}
    assert sorted(loaded & heavy) == []
    # only the lazy-export mechanism itself (standard library only) loads with the package
    assert sorted(m for m in loaded if m.startswith("servectl.")) == ["servectl.lazy"]


def test_readme_python_example_runs(profile_dir: Path) -> None:
    """The README's example, up to (not including) the lines that start a service."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(import servectl\n.*?)```", readme, re.S)
    assert block is not None, "README.md lost its Python API example"
    lines = block.group(1).splitlines()
    pure = "\n".join(lines[: next(i for i, line in enumerate(lines) if "servectl.up(" in line)])
    namespace: dict[str, object] = {}
    exec(compile(pure, "README.md", "exec"), namespace)  # our own README, on purpose
    plan = namespace["plan"]
    assert isinstance(plan, servectl.LaunchPlan) and plan.profile == "demo"
    assert plan.engine_argv and plan.plan_hash
