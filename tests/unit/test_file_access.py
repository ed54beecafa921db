"""Issue 39: every file servectl reads at run time goes through the one bounded reader, and every file it writes
through the one writer (``servectl.files``). This test fails when a module opens a file another way.

A file on the search path, in the state folder or in an output folder may be a FIFO (``open`` blocks for good),
a device (``/dev/zero`` never ends), a folder or a link loop; ``read_bounded``/``read_text_bounded`` refuse them
before reading and bound the size, ``write_atomic`` writes only over a regular file or nothing. The few
exceptions below each carry their reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "servectl"

#: Path methods and functions that open a file.
_OPENING_METHODS = frozenset({"read_text", "read_bytes", "write_text", "write_bytes", "open"})
_OPENING_FUNCTIONS = frozenset({"open"})
_OPENING_MODULE_CALLS = frozenset(
    {("os", "open"), ("io", "open"), ("os", "fdopen")}
    | {("shutil", f) for f in ("copy", "copy2", "copyfile", "copyfileobj", "copytree", "move")}
)

#: Folders that are not servectl at run time on the user's files.
ALLOWED_FOLDERS: dict[str, str] = {
    "standin/": "the stand-in engine runs in its own container on the files servectl put there (its image build "
    "copies the package's own files)",
    "testing/": "fakes and test tools, used by tests only",
}
#: (module, the opening call as written) -> why it may open the file itself.
ALLOWED: dict[tuple[str, str], str] = {
    ("files.py", "os.open"): "the bounded reader itself",
    ("files.py", "os.fdopen"): "the writer itself, on the temporary file it made",
    ("adapters/state.py", "os.open"): "the state lock file: opened O_NONBLOCK for flock, never read or written",
    ("gateway/keys.py", "os.open"): "the key file's lock file: opened for flock, never read or written",
    ("adapters/readahead.py", "open"): "streams weight files of many GiB into the page cache; weight_files() "
    "lists regular files only",
    ("bench/manifest.py", "path.open"): "hashes artifact files of any size in blocks; the manifest lists the "
    "files servectl wrote",
    ("gateway/image.py", "source.read_bytes"): "hashes servectl's own package files for the gateway image",
    ("gateway/dashboard.py", "(UI_DIR / 'index.html').read_text"): "the dashboard page shipped in the package",
    ("gateway/dashboard.py", "(UI_DIR / name).read_text"): "the dashboard's script and style shipped in the package",
    ("adapters/engine_image.py", "Path(module.__file__).read_text"): "servectl's own module source, sent into "
    "the image",
    ("profile/engine_dump.py", "path.read_text"): "runs inside the image, on SGLang's own source files",
    ("profile/engine_dump.py", "server.read_text"): "runs inside the image, on SGLang's own http_server.py",
    ("profile/memory_saver.py", "(root / rel).read_text"): "extraction from the SGLang wheel (scripts/)",
    ("profile/api_routes.py", "(root / rel).read_text"): "extraction from the SGLang wheel (scripts/)",
    ("bench/finding/registry.py", "schema_file.read_text"): "the registry schema shipped in the package",
}


def opening_calls(source: str) -> list[tuple[int, str]]:
    """(line, the call as written) of every call in ``source`` that opens a file without ``servectl.files``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in _OPENING_FUNCTIONS:
            found.append((node.lineno, func.id))
        elif isinstance(func, ast.Attribute):
            owner = func.value
            if isinstance(owner, ast.Name) and (owner.id, func.attr) in _OPENING_MODULE_CALLS:
                found.append((node.lineno, f"{owner.id}.{func.attr}"))
            elif func.attr in _OPENING_METHODS and not (isinstance(owner, ast.Name) and owner.id in _NOT_FILES):
                found.append((node.lineno, ast.unparse(func).replace('"', "'")))
    return found


#: Names whose ``.open`` is no file of the user's (a web browser, an image decoder, a tar archive in memory).
_NOT_FILES = frozenset({"webbrowser", "Image", "tarfile", "gzip", "os", "io"})


def test_every_file_is_read_and_written_through_servectl_files() -> None:
    unexplained = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if any(rel.startswith(folder) for folder in ALLOWED_FOLDERS):
            continue
        for line, call in opening_calls(path.read_text(encoding="utf-8")):
            if (rel, call) not in ALLOWED:
                unexplained.append(f"src/servectl/{rel}:{line}: {call}(...)")
    assert unexplained == [], (
        "read through servectl.files.read_bounded/read_text_bounded and write through write_atomic, or add the "
        "call to ALLOWED with its reason:\n" + "\n".join(unexplained)
    )


def test_every_allowance_is_still_needed() -> None:
    used = set()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        used |= {(rel, call) for _, call in opening_calls(path.read_text(encoding="utf-8"))}
    assert sorted(set(ALLOWED) - used) == []


def test_the_check_finds_each_way_of_opening_a_file() -> None:
    source = """
from pathlib import Path
import os, io
p = Path("x")
open("f")
p.read_text()
p.read_bytes()
p.write_text("t")
p.write_bytes(b"")
with p.open() as f: pass
os.open("f", 0)
io.open("f")
os.fdopen(3)
shutil.copy2("a", "b")
shutil.move("a", "b")
webbrowser.open("http://x")
read_bounded(p, limit_bytes=1)
"""
    assert [call for _, call in sorted(opening_calls(source))] == [
        "open",
        "p.read_text",
        "p.read_bytes",
        "p.write_text",
        "p.write_bytes",
        "p.open",
        "os.open",
        "io.open",
        "os.fdopen",
        "shutil.copy2",
        "shutil.move",
    ]  # in the order of the source; webbrowser.open and read_bounded are not files opened
