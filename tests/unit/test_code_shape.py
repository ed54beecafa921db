"""Code shape: no function in src/ over 80 lines unless a comment right above it says why, and no module over
600 lines (split a larger one along its seams).

The marker is a comment line ``# over 80 lines: <why>`` in the comment block right above the ``def`` (or its
decorators). Functions
that another piece of work owns and has not split yet are listed in :data:`NOT_YET_SPLIT`, each with its owner;
the list may only shrink (a test fails when an entry is gone or short enough).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "servectl"
MAX_LINES = 80
MARKER = "# over 80 lines:"
MAX_MODULE_LINES = 600

NOT_YET_SPLIT: dict[str, str] = {
    # qualified name -> who splits it (other areas of issue 10 and of other issues)
}


def _functions(path: Path) -> list[tuple[str, int, int]]:
    """(name, first line incl. decorators, length in lines) of every function in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            out.append((node.name, first, (node.end_lineno or node.lineno) - first + 1))
    return out


def long_functions(root: Path) -> dict[str, int]:
    """Functions over :data:`MAX_LINES` lines without the marker comment above them: name -> length."""
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for name, first, length in _functions(path):
            comments = []  # the comment block right above the def (or its decorators)
            at = first - 2
            while at >= 0 and lines[at].lstrip().startswith("#"):
                comments.append(lines[at].strip())
                at -= 1
            if length > MAX_LINES and not any(c.startswith(MARKER) for c in comments):
                found[f"{path.relative_to(root).as_posix()}::{name}"] = length
    return found


def test_no_function_in_src_is_over_80_lines_without_a_reason() -> None:
    unexplained = {name: n for name, n in long_functions(SRC).items() if name not in NOT_YET_SPLIT}
    assert unexplained == {}, (
        f"functions over {MAX_LINES} lines: {unexplained}; split them, or put '{MARKER} <why>' right above the def"
    )


def test_the_not_yet_split_list_only_names_functions_that_are_still_long() -> None:
    still_long = long_functions(SRC)
    stale = sorted(name for name in NOT_YET_SPLIT if name not in still_long)
    assert stale == [], f"no longer over {MAX_LINES} lines (or gone): remove {stale} from NOT_YET_SPLIT"


def test_the_check_sees_a_long_function_and_accepts_a_reason(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))
    (tmp_path / "a.py").write_text(f"def long():\n{body}\n\n{MARKER} a table\ndef told():\n{body}", encoding="utf-8")
    (tmp_path / "b.py").write_text("def short():\n    return 1\n", encoding="utf-8")
    assert long_functions(tmp_path) == {"a.py::long": MAX_LINES + 1}


def long_modules(root: Path) -> dict[str, int]:
    """Modules over :data:`MAX_MODULE_LINES` lines: path -> lines."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            found[path.relative_to(root).as_posix()] = lines
    return found


def test_no_module_in_src_is_over_600_lines() -> None:
    assert long_modules(SRC) == {}, f"modules over {MAX_MODULE_LINES} lines: split them along their seams"


def test_the_module_check_counts_lines(tmp_path: Path) -> None:
    (tmp_path / "big.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1), encoding="utf-8")
    (tmp_path / "small.py").write_text("x = 1\n" * MAX_MODULE_LINES, encoding="utf-8")
    assert long_modules(tmp_path) == {"big.py": MAX_MODULE_LINES + 1}


def test_no_two_test_files_share_a_name() -> None:
    """The test folders are not packages: pytest imports each file by its name, and refuses the whole run when
    two files share one (a unit and an integration test of the same subject did)."""
    from collections import Counter

    tests = Path(__file__).resolve().parents[1]
    counts = Counter(p.name for p in tests.rglob("test_*.py"))
    assert [name for name, n in counts.items() if n > 1] == []
