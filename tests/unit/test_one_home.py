"""Facts with one home: a document schema, the default catalog name and the GPU request reader are each
defined once in src/servectl, so two copies cannot drift apart (as EVIDENCE_SCHEMA did: two constants of
that name held "servectl.evidence/v1" and "servectl.qualify/v1")."""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "servectl"


def _python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "catalogs" not in p.parts)


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def schema_constants(root: Path) -> dict[str, list[tuple[str, str]]]:
    """Module-level ``*_SCHEMA = "..."`` constants: name -> [(file, value)]."""
    found: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for path in _python_files(root):
        for node in _tree(path).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id.endswith("_SCHEMA"):
                        found[target.id].append((path.relative_to(root).as_posix(), str(node.value.value)))
    return found


def test_each_schema_constant_has_one_name_and_one_value() -> None:
    constants = schema_constants(SRC)
    assert constants, "the scan found no *_SCHEMA constants"
    twice = {name: homes for name, homes in constants.items() if len(homes) > 1}
    assert twice == {}, f"one schema constant per name: {twice}"
    values: dict[str, list[str]] = defaultdict(list)
    for name, homes in constants.items():
        values[homes[0][1]].append(name)
    assert {v: n for v, n in values.items() if len(n) > 1} == {}, "one constant per schema value"


def test_the_schema_check_sees_a_second_home(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text('EVIDENCE_SCHEMA = "x/v1"\n', encoding="utf-8")
    (tmp_path / "b.py").write_text('EVIDENCE_SCHEMA = "y/v1"\nOTHER = 1\n', encoding="utf-8")
    assert schema_constants(tmp_path) == {"EVIDENCE_SCHEMA": [("a.py", "x/v1"), ("b.py", "y/v1")]}


def test_the_default_catalog_name_is_spelled_once() -> None:
    spelled = [
        path.relative_to(SRC).as_posix()
        for path in _python_files(SRC)
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"sglang-\d+\.\d+\.\d+", node.value)
    ]
    assert spelled == ["profile/catalog.py"], "use servectl.profile.catalog.DEFAULT_CATALOG"


def test_one_module_reads_gpu_requests_from_inspect_documents() -> None:
    """``DeviceRequests`` (how ``--gpus`` reads in ``docker inspect``) is parsed in one place."""
    readers = sorted(
        path.relative_to(SRC).as_posix()
        for path in _python_files(SRC)
        if "testing" not in path.parts and '"DeviceRequests"' in path.read_text(encoding="utf-8")
    )
    # the compose translation writes the key (compose -> inspect); it does not read it
    assert readers == ["plan/adopt/compose.py", "plan/gpu_request.py"]


#: The settings objects that hold the bench and qualify defaults (their one home), by module.
SETTINGS = {"bench/settings.py": "BenchSettings", "bench/qualify/settings.py": "QualifySettings"}
#: Where bench and qualify options are taken, passed on or used: the commands, the front door, the bench.
SETTINGS_USERS = ("cli/bench.py", "cli/qualify.py", "host/measure.py", "api.py", "bench")
#: A command-line parameter named otherwise than its field.
OPTION_FIELDS = {"timeout": "timeout_s"}


def _is_literal(node: ast.expr) -> bool:
    """A value written out (``3``, ``"1"``, ``(4096, 65536)``), not ``None`` and not a name read off elsewhere."""
    if isinstance(node, ast.Constant):
        return node.value is not None
    if isinstance(node, ast.Tuple | ast.List):
        return all(isinstance(e, ast.Constant) for e in node.elts)
    return isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant)  # -1


def settings_fields(root: Path, settings: dict[str, str]) -> set[str]:
    """The fields of the settings classes that have a default."""
    fields: set[str] = set()
    for module, cls in settings.items():
        for node in _tree(root / module).body:
            if isinstance(node, ast.ClassDef) and node.name == cls:
                fields |= {
                    n.target.id
                    for n in node.body
                    if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value is not None
                }
    return fields


def second_default_homes(root: Path, settings: dict[str, str], users: tuple[str, ...]) -> list[str]:
    """Parameters (and dataclass fields) of the settings users that are named after a settings field and write
    their own default value: ``module::function(name=value)``."""
    fields = settings_fields(root, settings)
    modules = [p for u in users for p in ([root / u] if u.endswith(".py") else _python_files(root / u))]
    found: list[str] = []
    for path in modules:
        module = path.relative_to(root).as_posix()
        if module in settings:
            continue
        for node in ast.walk(_tree(path)):
            pairs: list[tuple[str, ast.expr]] = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                defaulted = (a.posonlyargs + a.args)[len(a.posonlyargs + a.args) - len(a.defaults) :]
                pairs += [(arg.arg, d) for arg, d in zip(defaulted, a.defaults, strict=True)]
                pairs += [(arg.arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None]
            elif isinstance(node, ast.ClassDef):
                pairs += [
                    (n.target.id, n.value)
                    for n in node.body
                    if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value is not None
                ]
            for name, default in pairs:
                if OPTION_FIELDS.get(name, name) in fields and _is_literal(default):
                    found.append(f"{module}::{node.name}({name}={ast.unparse(default)})")
    return sorted(found)


def test_each_bench_and_qualify_default_has_one_home() -> None:
    """``BenchSettings``/``QualifySettings`` hold the defaults; a command option, a Host or api signature, the
    bench run or the runner that writes one of them out again is a second home that can drift."""
    assert {"repeats", "max_tokens", "timeout_s", "prompt_tokens", "seed", "via_gateway"} <= settings_fields(
        SRC, SETTINGS
    )
    twice = second_default_homes(SRC, SETTINGS, SETTINGS_USERS)
    assert twice == [], f"take these defaults from the settings object's fields (e.g. `= _DEFAULT.repeats`): {twice}"


def test_the_commands_show_the_settings_defaults() -> None:
    """The defaults `--help` shows are the settings' own (read off them, not written again)."""
    import inspect

    from servectl.bench.qualify.settings import QualifySettings
    from servectl.bench.settings import BenchSettings
    from servectl.cli.bench import bench_command
    from servectl.cli.qualify import qualify_command

    bench, qualify = BenchSettings(), QualifySettings()
    options = inspect.signature(bench_command).parameters
    assert options["prompt_tokens"].default == ",".join(map(str, bench.prompt_tokens))
    assert options["concurrency"].default == ",".join(map(str, bench.concurrency))
    assert options["timeout"].default == bench.timeout_s
    for name in ("repeats", "max_tokens", "warmup", "seed"):
        assert options[name].default == getattr(bench, name), name
    options = inspect.signature(qualify_command).parameters
    assert (options["seed"].default, options["via_gateway"].default) == (qualify.seed, qualify.via_gateway)


def test_the_default_check_sees_a_second_home(tmp_path: Path) -> None:
    (tmp_path / "settings.py").write_text(
        "class S:\n    url: str = ''\n    repeats: int = 3\n    seed: int = 0\n    model: str | None = None\n",
        encoding="utf-8",
    )
    (tmp_path / "cli.py").write_text(
        "D = S()\n"
        "def command(repeats: int = 3, timeout: float = 1.0, *, seed: int = D.seed, model=None, other=5):\n"
        "    pass\n"
        "class Options:\n    repeats: int = 4\n",
        encoding="utf-8",
    )
    found = second_default_homes(tmp_path, {"settings.py": "S"}, ("cli.py",))
    assert found == ["cli.py::Options(repeats=4)", "cli.py::command(repeats=3)"]


def public_classes(root: Path) -> dict[str, list[str]]:
    """Module-level public classes: name -> the files defining one of that name."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in _python_files(root):
        for node in _tree(path).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found[node.name].append(path.relative_to(root).as_posix())
    return found


#: Class names still defined twice, each with who renames one (the list may only shrink).
TWICE_NOT_YET: dict[str, str] = {
    # name -> who renames one of its homes
}


def test_each_public_class_name_has_one_home() -> None:
    """One name, one class (issue 40): ``GateResult`` was the health gate's passage and a qualify gate's
    verdict, ``Endpoint`` a gateway file's endpoint and what an agent client is pointed at."""
    classes = public_classes(SRC)
    assert len(classes) > 100, "the scan found the package's classes"
    twice = {name: homes for name, homes in classes.items() if len(homes) > 1}
    assert {n: h for n, h in twice.items() if n not in TWICE_NOT_YET} == {}
    assert set(TWICE_NOT_YET) <= set(twice), f"renamed: remove from TWICE_NOT_YET: {set(TWICE_NOT_YET) - set(twice)}"


def test_the_class_name_check_sees_a_second_home(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("class GateResult:\n    pass\n\n\nclass _Private:\n    pass\n", encoding="utf-8")
    (tmp_path / "b.py").write_text("class GateResult:\n    pass\n\n\nclass _Private:\n    pass\n", encoding="utf-8")
    twice = {name: homes for name, homes in public_classes(tmp_path).items() if len(homes) > 1}
    assert twice == {"GateResult": ["a.py", "b.py"]}
