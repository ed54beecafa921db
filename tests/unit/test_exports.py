"""Each lazily re-exporting package writes its public names once, in ``_EXPORTS`` (name -> defining module).

``__all__`` is derived from it (``[*_EXPORTS]``, plus ``__version__`` at the top); the ``TYPE_CHECKING`` block
is the one copy a type checker needs (mypy strict reads neither ``_EXPORTS`` nor a computed ``__all__``), and
this test holds it to the table: exactly one ``from MODULE import NAME as NAME`` per entry, nothing else.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGES = sorted(
    p.parent for p in (SRC / "servectl").rglob("__init__.py") if "lazy_exports(" in p.read_text(encoding="utf-8")
)


def drift(source: str, allowed_extra: tuple[str, ...] = ()) -> list[str]:
    """What in ``source`` (a package's ``__init__.py``) says something other than its ``_EXPORTS`` table."""
    tree = ast.parse(source)
    exports: dict[str, str] | None = None
    problems: list[str] = []
    typed: set[tuple[str, str]] = set()
    for node in tree.body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        if "_EXPORTS" in names and isinstance(node.value, ast.Dict):
            exports = {k.value: v.value for k, v in zip(node.value.keys, node.value.values, strict=True)}
        if "__all__" in names:
            wanted = f"[{''.join(f'{n!r}, ' for n in allowed_extra)}*_EXPORTS]".replace("'", '"')
            if ast.unparse(node.value).replace("'", '"') != wanted:
                problems.append(f"line {node.lineno}: __all__ must be derived: __all__ = {wanted}")
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                if not isinstance(sub, ast.ImportFrom) or any(a.asname != a.name for a in sub.names):
                    problems.append(f"line {sub.lineno}: only `from MODULE import NAME as NAME` under TYPE_CHECKING")
                    continue
                typed |= {(a.name, str(sub.module)) for a in sub.names}
    if exports is None:
        return ["no _EXPORTS table"]
    table = set(exports.items())
    problems += [f"add under TYPE_CHECKING: from {m} import {n} as {n}" for n, m in sorted(table - typed)]
    problems += [f"remove from TYPE_CHECKING: from {m} import {n} as {n}" for n, m in sorted(typed - table)]
    return problems


@pytest.mark.parametrize("folder", PACKAGES, ids=lambda p: str(p.relative_to(SRC)))
def test_the_typing_block_and_all_say_what_the_export_table_says(folder: Path) -> None:
    extra = ("__version__",) if folder == SRC / "servectl" else ()
    assert drift((folder / "__init__.py").read_text(encoding="utf-8"), extra) == []
    package = importlib.import_module(".".join(folder.relative_to(SRC).parts))
    assert package.__all__ == [*extra, *package._EXPORTS]
    assert len(PACKAGES) >= 5  # servectl, bench, bench.qualify, adapters.docker, plan.adopt


def test_the_check_names_each_drift() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        '_EXPORTS = {"up": "servectl.api", "Host": "servectl.host", "Gone": "servectl.old"}\n'
        '__all__ = ["up", "Host"]\n'
        "if TYPE_CHECKING:\n"
        "    from servectl.api import up as up\n"
        "    from servectl.host import Host\n"
        "    from servectl.plan import Extra as Extra\n"
    )
    assert drift(source) == [
        "line 3: __all__ must be derived: __all__ = [*_EXPORTS]",
        "line 6: only `from MODULE import NAME as NAME` under TYPE_CHECKING",
        "add under TYPE_CHECKING: from servectl.old import Gone as Gone",
        "add under TYPE_CHECKING: from servectl.host import Host as Host",
        "remove from TYPE_CHECKING: from servectl.plan import Extra as Extra",
    ]
