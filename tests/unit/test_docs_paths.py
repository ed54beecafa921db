"""The docs name files and modules that exist, and docs/architecture.md covers every layer."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from test_layering import LAYERS

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
STATE_FILES = {"servectl.lock"}  # names of files in the state folder, not modules


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_source_path_the_docs_name_exists(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:src|tests|scripts|benchmarks)/[\w./-]+?)(?:::\w+)?`", text))
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert missing == [], f"{doc.name} names paths that do not exist"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_servectl_module_the_docs_name_imports(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    modules = set(re.findall(r"`(servectl(?:\.[a-z_]+)+)", text)) - STATE_FILES
    missing = []
    for name in sorted(modules):
        parts = name.split(".")
        # `servectl.service.runtime.up`: the longest prefix that is a module must have the rest as attributes
        for cut in range(len(parts), 0, -1):
            module = ".".join(parts[:cut])
            try:
                spec = importlib.util.find_spec(module)
            except (ImportError, AttributeError):  # a parent is a module, not a package
                spec = None
            if spec is not None:
                obj: object = importlib.import_module(module)
                for attr in parts[cut:]:
                    obj = getattr(obj, attr, None)
                if obj is None:
                    missing.append(name)
                break
        else:
            missing.append(name)
    assert missing == [], f"{doc.name} names modules or functions that do not exist"


def test_architecture_doc_names_every_layer_folder() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for parts in LAYERS:
        for part in parts:
            if part != "__main__":
                assert re.search(rf"`{part}(/|\.py)`", text), f"docs/architecture.md does not describe {part}"


def test_architecture_doc_names_only_files_that_exist_in_their_folder() -> None:
    """Each row of the folder table names files of that folder (or below it): the table follows moves."""
    missing = []
    for line in (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").splitlines():
        row = re.match(r"\| `(\w+)/` \|(.*)", line)
        if row is None:
            continue
        folder = ROOT / "src" / "servectl" / row.group(1)
        for name in re.findall(r"`([\w/]+\.py|[\w]+/)`", row.group(2)):
            if not any(folder.rglob(name.rstrip("/"))):
                missing.append(f"{row.group(1)}/: {name}")
    assert missing == []
