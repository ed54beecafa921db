"""Imports only point down the stages, and no module imports itself back through others.

Layers, lowest first (a module may import its own layer and any layer below it)::

    base (errors, paths, redact, lazy, signals, files, yaml_text, version) < profile < plan < render < adapters
    < preflight < service < gateway < bench < campaign < host < api < cli

The CLI imports no adapter: ``servectl.host.Host`` builds the real ones for it. Outside the chain:
``servectl.testing`` (the fakes) may import anything and only tests import it; ``servectl.standin`` (the
stand-in engine, also run inside its image) imports only ``errors``, ``profile.catalog``, ``version`` and
itself, and is imported from ``adapters`` up; ``servectl/__init__.py`` re-exports the public API (``host``'s
``Host`` and ``api.py``'s functions over it) only lazily, so ``import servectl`` stays light.

No module of the package imports the package itself (``from servectl import __version__``): its face names
every layer up to ``api``, so such an import closes a ring through every public name (it did:
servectl -> api -> host.measure -> bench.profile_run -> bench.runner -> servectl). The version lives in the
leaf ``servectl.version``. The package itself takes part in the cycle search like any module.

A module inside a package never takes names from that package's face (its ``__init__``, or an ancestor's
below ``servectl`` itself): ``from servectl.bench import BenchContext`` in ``bench/target.py`` goes through
``bench/__init__``, which loads the modules that load ``bench/target.py``: an import loop. It imports from
the defining module (``servectl.bench.model``) instead.

Every import counts: module-level, inside functions, under ``TYPE_CHECKING`` and
``importlib.import_module("literal")``. ``from servectl.pkg import name`` resolves ``name`` through a
package's ``_EXPORTS`` table (the lazy re-exports of PEP 562 ``__getattr__``) to the module defining it.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

#: Layer of each top-level part of the package, lowest first.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "paths", "redact", "lazy", "signals", "files", "yaml_text", "version"),
    ("profile",),
    ("plan",),
    ("render",),
    ("adapters",),
    ("preflight",),
    ("service",),
    ("gateway",),
    ("bench",),
    ("campaign",),
    ("host",),
    ("api",),
    ("cli", "__main__"),
)
RANK: dict[str, int] = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}
STANDIN_MAY_IMPORT = frozenset(
    {
        "servectl.errors",
        "servectl.profile.catalog",
        "servectl.profile.memory_saver",
        "servectl.profile.api_routes",
        "servectl.version",
    }
)
STANDIN_IMPORTED_FROM = RANK["adapters"]  # image building is a side effect; nothing below adapters needs it


@dataclass(frozen=True)
class Import:
    """One import statement of a module, already resolved to the servectl module it loads."""

    target: str
    line: int
    lazy: bool  # inside a function or under TYPE_CHECKING (does not run when the module is imported)


# -- reading the package ----------------------------------------------------------------------------------
def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def scan(root: Path) -> dict[str, list[Import]]:
    """Every module under the package folder ``root`` and its imports of the package."""
    trees = {module_name(root, p): (p, ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(root.rglob("*.py"))}
    exports = {name: _exports_table(tree) for name, (_, tree) in trees.items()}
    top = root.name
    graph: dict[str, list[Import]] = {}
    for name, (path, tree) in trees.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = [
            Import(target, line, lazy)
            for raw, names, line, lazy in _raw_imports(tree, package)
            if raw == top or raw.startswith(top + ".")
            for target in _resolve(raw, names, trees, exports)
        ]
    return graph


def _exports_table(tree: ast.Module) -> dict[str, str]:
    """A package's ``_EXPORTS = {"name": "module", ...}`` (lazy re-exports), if it has one."""
    for node in tree.body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        value = getattr(node, "value", None)
        if any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in targets) and isinstance(value, ast.Dict):
            return {
                k.value: v.value
                for k, v in zip(value.keys, value.values, strict=True)
                if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)
            }
    return {}


def _raw_imports(tree: ast.Module, package: str) -> Iterator[tuple[str, tuple[str, ...], int, bool]]:
    """(module, imported names, line, lazy) for every import in ``tree``."""
    RawImport = tuple[str, tuple[str, ...], int, bool]
    scopes = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda

    def visit(node: ast.AST, lazy: bool) -> Iterator[RawImport]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for sub in child.body:
                    yield from one(sub, True)
                for sub in child.orelse:
                    yield from one(sub, lazy)
            else:
                yield from one(child, lazy)

    def one(node: ast.AST, lazy: bool) -> Iterator[RawImport]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, (), node.lineno, lazy
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            yield module, tuple(a.name for a in node.names), node.lineno, lazy
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("importlib.import_module", "import_module"):
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield first.value, (), node.lineno, True
        yield from visit(node, lazy or isinstance(node, scopes))

    yield from visit(tree, False)


def _resolve(
    module: str, names: tuple[str, ...], trees: Mapping[str, object], exports: Mapping[str, Mapping[str, str]]
) -> Iterator[str]:
    """The modules ``from module import names`` loads: submodules, re-exported origins, else the module."""
    if not names:
        yield module
        return
    for name in names:
        if f"{module}.{name}" in trees:
            yield f"{module}.{name}"
        else:
            yield exports.get(module, {}).get(name, module)


# -- the rules --------------------------------------------------------------------------------------------
def part_of(module: str) -> str:
    """The top-level part (``plan``, ``errors``, ...) of a module; "" for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layering_problems(graph: Mapping[str, list[Import]]) -> list[str]:
    """One line per import against the layer order, per module outside any layer, and per cycle."""
    problems = [f"{m}: not in any layer; add its folder to LAYERS in {Path(__file__).name}" for m in _unplaced(graph)]
    for module, imports in sorted(graph.items()):
        for imp in imports:
            why = "no such module" if imp.target not in graph else _why_not(module, imp)
            if why:
                problems.append(f"{module}:{imp.line}: imports {imp.target}: {why}")
    problems.extend(f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(graph))
    return problems


def _unplaced(graph: Mapping[str, list[Import]]) -> list[str]:
    return sorted(m for m in graph if part_of(m) not in (*RANK, "", "testing", "standin"))


def _why_not(module: str, imp: Import) -> str | None:
    src, dst = part_of(module), part_of(imp.target)
    if src == dst and src != "":
        return None
    if src == "testing":
        return None
    if dst == "testing":
        return "only tests import servectl.testing"
    if dst == "" and src != "":  # public names resolve to their modules; what is left is the face itself
        return "imports the package face servectl (a ring through every public name); import the defining module"
    if src == "":
        return None if imp.lazy or dst in LAYERS[0] else "the public API must re-export lazily (PEP 562 __getattr__)"
    if src == "standin":
        return (
            None
            if imp.target in STANDIN_MAY_IMPORT
            else "standin imports only errors, profile.catalog, profile.memory_saver, profile.api_routes and version"
        )
    if dst == "standin":
        return None if RANK.get(src, -1) >= STANDIN_IMPORTED_FROM else "standin is imported from adapters up"
    if src == "cli" and dst == "adapters":
        return "the CLI gets its adapters through servectl.host"
    if src not in RANK or dst not in RANK:
        return None  # reported once by _unplaced
    return None if RANK[dst] <= RANK[src] else f"{src} may not import {dst} (a higher layer)"


def face_imports(root: Path) -> list[str]:
    """One line per import that takes a name from the face of a package the importing module is inside.

    ``from servectl.pkg import submodule`` is fine (it loads the submodule); the root package counts too
    (``from servectl import __version__`` in ``bench/runner.py`` was a ring through every public name).
    """
    trees = {module_name(root, p): (p, ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(root.rglob("*.py"))}
    problems = []
    for name, (path, tree) in trees.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for raw, names, line, _lazy in _raw_imports(tree, package):
            if not name.startswith(raw + "."):
                continue
            through_face = [n for n in names if f"{raw}.{n}" not in trees]
            if through_face:
                problems.append(
                    f"{name}:{line}: takes {', '.join(through_face)} from its own package's face {raw}; "
                    "import from the defining module"
                )
    return problems


def cycles(graph: Mapping[str, list[Import]]) -> list[list[str]]:
    """Each group of modules that import one another in a ring (Tarjan's strongly connected components).

    Every import counts, the lazy ones (inside functions, under ``TYPE_CHECKING``) too, and the package itself
    is a module like the others: its lazy re-exports reach every layer, so importing it from inside closes a ring.
    """
    edges = {m: sorted({i.target for i in imps if i.target in graph and i.target != m}) for m, imps in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges[node]:
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return found


# -- the tests --------------------------------------------------------------------------------------------
def test_servectl_imports_only_point_down_the_layers_and_have_no_cycles() -> None:
    graph = scan(SRC / "servectl")
    assert len(graph) > 50  # the scan found the package
    assert layering_problems(graph) == []


def test_no_module_imports_through_its_own_package_face() -> None:
    assert face_imports(SRC / "servectl") == []


def test_the_face_check_reports_a_name_taken_from_the_own_package_only(tmp_path: Path) -> None:
    pkg = tmp_path / "servectl"
    files = {
        "__init__.py": "__version__ = '1'\n",
        "bench/__init__.py": '_EXPORTS = {"BenchContext": "servectl.bench.model"}\n',
        "bench/model.py": "class BenchContext: ...\n",
        "bench/target.py": "def f():\n    from servectl.bench import BenchContext\n",
        "bench/runner.py": "from servectl import __version__\nfrom servectl.bench import model\nfrom . import target\n",
        "bench/qualify/__init__.py": "",
        "bench/qualify/gate.py": "from ..import BenchContext\nfrom servectl.bench.model import BenchContext\n",
        "cli/__init__.py": "",
        "cli/app.py": "from servectl.bench import BenchContext\n",
    }
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text, encoding="utf-8")
    assert face_imports(pkg) == [
        "servectl.bench.qualify.gate:1: takes BenchContext from its own package's face servectl.bench; "
        "import from the defining module",
        "servectl.bench.runner:1: takes __version__ from its own package's face servectl; "
        "import from the defining module",
        "servectl.bench.target:2: takes BenchContext from its own package's face servectl.bench; "
        "import from the defining module",
    ]


def test_the_check_reports_a_back_import_a_lazy_one_and_a_cycle(tmp_path: Path) -> None:
    """The test of the test: a small fake package with every kind of violation."""
    pkg = tmp_path / "servectl"
    files = {
        "__init__.py": (
            "from typing import TYPE_CHECKING\nfrom servectl.service.runtime import up\n"
            "if TYPE_CHECKING:\n    from servectl.api import measure\n"
        ),
        "errors.py": "",
        "profile/__init__.py": "",
        "profile/loader.py": "def load():\n    from servectl.plan import rules\n",
        "plan/__init__.py": "",
        "plan/rules.py": "from servectl.profile.loader import load\n",
        "service/__init__.py": "",
        "service/runtime.py": "import servectl.errors\nfrom servectl.testing import fakes\n\ndef up(): ...\n",
        "bench/__init__.py": '_EXPORTS = {"run": "servectl.bench.runner"}\n',
        "bench/runner.py": "from servectl.errors import *\n",
        "bench/manifest.py": "def version():\n    from servectl import __version__\n",
        "host/__init__.py": "",
        "host/measure.py": "def bench():\n    from servectl.bench import manifest\n",
        "api.py": "from servectl.host import measure\n",
        "adapters/__init__.py": "",
        "adapters/docker.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from servectl.bench import run\n"
        ),
        "standin/__init__.py": "",
        "standin/image.py": "import importlib\nimportlib.import_module('servectl.plan.rules')\n",
        "testing/__init__.py": "",
        "testing/fakes.py": "from servectl.cli import app\n",
        "cli/__init__.py": "",
        "cli/app.py": "from servectl.bench import run\nfrom servectl.standin import image\n",
        "cli/gone.py": "def f():\n    from servectl.adapters.docker_engine import DockerSdkEngine\n",
        "cli/wired.py": "def f():\n    from servectl.adapters.docker import DockerSdkEngine\n",
        "extras.py": "",
    }
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(textwrap.dedent(text), encoding="utf-8")
    problems = layering_problems(scan(pkg))
    assert problems == [
        "servectl.extras: not in any layer; add its folder to LAYERS in test_layering.py",
        "servectl:2: imports servectl.service.runtime: the public API must re-export lazily (PEP 562 __getattr__)",
        "servectl.adapters.docker:3: imports servectl.bench.runner: adapters may not import bench (a higher layer)",
        "servectl.bench.manifest:2: imports servectl: imports the package face servectl (a ring through every public "
        "name); import the defining module",
        "servectl.cli.gone:2: imports servectl.adapters.docker_engine: no such module",
        "servectl.cli.wired:2: imports servectl.adapters.docker: the CLI gets its adapters through servectl.host",
        "servectl.profile.loader:2: imports servectl.plan.rules: profile may not import plan (a higher layer)",
        "servectl.service.runtime:2: imports servectl.testing.fakes: only tests import servectl.testing",
        "servectl.standin.image:2: imports servectl.plan.rules: "
        "standin imports only errors, profile.catalog, profile.memory_saver, profile.api_routes and version",
        "import cycle: servectl.plan.rules -> servectl.profile.loader",
        "import cycle: servectl -> servectl.api -> servectl.bench.manifest -> servectl.host.measure",
    ]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from servectl.plan.compile import x", "servectl.plan.compile"),
        ("from servectl.service import runtime", "servectl.service.runtime"),
        ("from ..plan import compile", "servectl.plan.compile"),
        ("from . import runtime", "servectl.service.runtime"),
    ],
)
def test_imports_resolve_to_the_module_they_load(tmp_path: Path, source: str, expected: str) -> None:
    pkg = tmp_path / "servectl"
    for rel in ("__init__.py", "plan/__init__.py", "plan/compile.py", "service/__init__.py", "service/runtime.py"):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text("", encoding="utf-8")
    (pkg / "service" / "swap.py").write_text(source + "\n", encoding="utf-8")
    assert [i.target for i in scan(pkg)["servectl.service.swap"]] == [expected]


def ci_tool_imports(root: Path) -> list[str]:
    """One line per import of the CI installers (``servectl_ci``, in tests/tools): test tooling, not servectl."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        name = module_name(root, path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for raw, _names, line, _lazy in _raw_imports(ast.parse(path.read_text(encoding="utf-8")), package):
            if raw == "servectl_ci" or raw.startswith("servectl_ci."):
                problems.append(f"{name}:{line}: imports {raw}: the CI installers are test tooling, not in the wheel")
    return problems


def test_the_package_never_imports_the_ci_installers(tmp_path: Path) -> None:
    assert ci_tool_imports(SRC / "servectl") == []
    pkg = tmp_path / "servectl"
    (pkg / "bench").mkdir(parents=True)
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "bench" / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "bench" / "run.py").write_text("def f():\n    from servectl_ci.sglang_venv import venv_dir\n")
    assert ci_tool_imports(pkg) == [
        "servectl.bench.run:2: imports servectl_ci.sglang_venv: the CI installers are test tooling, not in the wheel"
    ]
