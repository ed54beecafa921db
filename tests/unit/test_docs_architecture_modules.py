"""docs/architecture.md lists every module of src/servectl (and names none that is gone)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "servectl"
SECTION = "## Every module"


def modules(package: Path) -> set[str]:
    """Each module by its path under the package folder; a package (``__init__.py``) by its folder ``x/``."""
    names = set()
    for path in package.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(package)
        if path.name == "__init__.py" and rel.parent != Path("."):
            names.add(rel.parent.as_posix() + "/")
        else:
            names.add(rel.as_posix())
    return names


def listed(text: str) -> set[str]:
    """The modules the "Every module" section names: one ``- `path`: ...`` line each."""
    body = text.split(SECTION, 1)[1] if SECTION in text else ""
    body = re.split(r"\n## |\nConventions the layers rely on", body, maxsplit=1)[0]
    return set(re.findall(r"^- `([\w/.]+)`:", body, flags=re.MULTILINE))


def test_architecture_doc_lists_every_module() -> None:
    wanted = modules(PACKAGE)
    named = listed((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert len(wanted) > 100  # the scan found the package
    missing, gone = sorted(wanted - named), sorted(named - wanted)
    assert missing == [], f"add a line '- `PATH`: what it is' under '{SECTION}' in docs/architecture.md: {missing}"
    assert gone == [], f"docs/architecture.md '{SECTION}' names modules that do not exist: {gone}"


def test_the_module_check_reads_paths_and_folders(tmp_path: Path) -> None:
    for rel in ("__init__.py", "api.py", "bench/__init__.py", "bench/runner.py", "bench/__pycache__/x.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("", encoding="utf-8")
    assert modules(tmp_path) == {"__init__.py", "api.py", "bench/", "bench/runner.py"}
    text = f"# x\n{SECTION}\n\n- `api.py`: the API\n- `bench/`: measuring\n\n## Next\n- `other.py`: no\n"
    assert listed(text) == {"api.py", "bench/"}
