"""No core function takes more than 8 parameters: ``(ctx, business arguments, opts)`` instead of a long list.

The core functions are the public (no leading ``_``) module-level functions of the stages that act and
measure: every module under ``service/`` and ``preflight/``, and the entry points of ``bench/``
(:data:`BENCH_ENTRY_MODULES`: a whole bench run, a qualify run, the runner, compare, promote). Every
parameter counts (positional, keyword-only, ``*args``, ``**kwargs``). A function over the limit takes the
:class:`servectl.service.context.Context` (the adapters and state) and an options object for its knobs
(``SwapOptions``, ``UpOptions``, ``DownOptions``, ``GateOptions``, ``AdoptOptions``).

Not counted: methods and constructors (``Context``'s and the option dataclasses' are records of what they
hold, not calls with business arguments), private helpers, and the layers above (``host/``, ``api.py``,
``cli/``: the front door, whose shape ``tests/unit/test_public_api.py`` pins).

Functions another piece of work reshapes are listed in :data:`NOT_YET`, each with its owner; the list may only
shrink (a test fails on an entry that is gone or within the limit).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "servectl"
MAX_PARAMETERS = 8
CORE_FOLDERS = ("service", "preflight")
BENCH_ENTRY_MODULES = (
    "bench/profile_run.py",
    "bench/qualify/profile_run.py",
    "bench/runner.py",
    "bench/compare.py",
    "bench/promote.py",
)

NOT_YET: dict[str, str] = {
    # path::function -> who reshapes it (empty: every core function is within the limit)
}


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    return (
        len(args.posonlyargs)
        + len(args.args)
        + len(args.kwonlyargs)
        + (args.vararg is not None)
        + (args.kwarg is not None)
    )


def wide_functions(root: Path, modules: list[Path]) -> dict[str, int]:
    """Public module-level functions of ``modules`` with more than :data:`MAX_PARAMETERS`: name -> count."""
    found: dict[str, int] = {}
    for path in modules:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_"):
                count = parameter_count(node)
                if count > MAX_PARAMETERS:
                    found[f"{path.relative_to(root).as_posix()}::{node.name}"] = count
    return found


def core_modules(root: Path) -> list[Path]:
    """The modules whose public functions are core functions (see the module docstring)."""
    paths = [p for folder in CORE_FOLDERS for p in sorted((root / folder).rglob("*.py"))]
    return paths + [root / m for m in BENCH_ENTRY_MODULES if (root / m).exists()]


def test_no_core_function_takes_more_than_8_parameters() -> None:
    wide = {name: n for name, n in wide_functions(SRC, core_modules(SRC)).items() if name not in NOT_YET}
    assert wide == {}, (
        f"core functions with more than {MAX_PARAMETERS} parameters: {wide}; take the Context first, keyword-only "
        "business arguments, and an options dataclass for the knobs"
    )


def test_the_scope_covers_the_transactions_and_the_bench_entry_points() -> None:
    """The scope is what it says: the check would see swap, up, the gate and a bench run."""
    names = {p.relative_to(SRC).as_posix() for p in core_modules(SRC)}
    assert {"service/swap.py", "service/runtime.py", "service/health.py", "preflight/request.py"} <= names
    assert set(BENCH_ENTRY_MODULES) <= names  # a moved entry module must be named again here


def test_the_not_yet_list_only_names_functions_that_are_still_too_wide() -> None:
    wide = wide_functions(SRC, core_modules(SRC))
    done = sorted(name for name in NOT_YET if name not in wide)
    assert done == [], f"{done} are within {MAX_PARAMETERS} parameters now (or gone): remove them from NOT_YET"


def test_the_check_sees_a_wide_function_and_lets_the_narrow_and_the_private_pass(tmp_path: Path) -> None:
    root = tmp_path / "servectl"
    (root / "service").mkdir(parents=True)
    module = root / "service" / "synthetic.py"
    module.write_text(
        "def swap(*, target, docker, gpus, preflight, on_phase, clock, force, scope, state_dir):\n    pass\n"
        "def swap_narrow(ctx, *, target, opts=None):\n    pass\n"
        "def _helper(a, b, c, d, e, f, g, h, i, j):\n    pass\n"
        "def spread(a, *args, b, c, d, e, f, g, **kwargs):\n    pass\n"
        "class Record:\n    def __init__(self, a, b, c, d, e, f, g, h, i):\n        pass\n",
        encoding="utf-8",
    )
    assert wide_functions(root, [module]) == {"service/synthetic.py::swap": 9, "service/synthetic.py::spread": 9}
