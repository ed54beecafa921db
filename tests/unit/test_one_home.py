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
