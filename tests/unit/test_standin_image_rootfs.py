"""The stand-in image's root filesystem is assembled from this interpreter without Docker (needs only ldd)."""

from __future__ import annotations

import io
import shutil
import sys
import tarfile

import pytest

from servectl.standin import image
from servectl.standin.image import APP_DIR, DEMO_MODEL_PATH, PREFIX, host_python, standin_digest, write_rootfs

pytestmark = pytest.mark.skipif(shutil.which("ldd") is None, reason="ldd (glibc) is needed to collect libraries")


@pytest.fixture(scope="module")
def rootfs() -> dict[str, tarfile.TarInfo]:
    buffer = io.BytesIO()
    write_rootfs(buffer)
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        return {member.name: member for member in tar.getmembers()}


def test_rootfs_has_python3_on_path_and_the_stdlib(rootfs: dict[str, tarfile.TarInfo]) -> None:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    binary = rootfs[f"{PREFIX.strip('/')}/bin/python{version}"]
    assert binary.isfile() and binary.mode & 0o111
    assert rootfs[f"{PREFIX.strip('/')}/bin/python3"].linkname == f"python{version}"
    stdlib = f"{PREFIX.strip('/')}/{sys.platlibdir}/python{version}"
    for module in ("os.py", "json/__init__.py", "http/server.py", "socketserver.py"):
        assert f"{stdlib}/{module}" in rootfs
    assert any(name.startswith(f"{stdlib}/lib-dynload/_json") for name in rootfs)
    assert rootfs["tmp"].mode == 0o1777
    assert "etc/passwd" in rootfs


def test_rootfs_leaves_out_tests_ides_and_site_packages(rootfs: dict[str, tarfile.TarInfo]) -> None:
    parts = {part for name in rootfs for part in name.split("/")}
    for unwanted in ("test", "tests", "idlelib", "tkinter", "ensurepip", "site-packages"):
        assert unwanted not in parts


def test_only_modules_the_engine_imports_get_bytecode(rootfs: dict[str, tarfile.TarInfo]) -> None:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stdlib = f"{PREFIX.strip('/')}/{sys.platlibdir}/python{version}"
    tag = sys.implementation.cache_tag
    assert f"{APP_DIR.strip('/')}/servectl/standin/__pycache__/engine.{tag}.pyc" in rootfs
    assert f"{stdlib}/http/__pycache__/server.{tag}.pyc" in rootfs
    assert f"{stdlib}/__pycache__/tarfile.{tag}.pyc" not in rootfs  # in the image, never imported by the engine
    assert f"{stdlib}/tarfile.py" in rootfs
    pyc = [name for name in rootfs if name.endswith(".pyc")]
    assert 50 < len(pyc) < 400


def test_rootfs_carries_the_standin_catalog_shim_and_demo_model(rootfs: dict[str, tarfile.TarInfo]) -> None:
    app = APP_DIR.strip("/")
    paths = [
        "servectl/profile/catalog.py",
        "servectl/profile/catalogs/sglang-0.5.23.json",
        "servectl/standin/engine.py",
    ]
    paths += ["sglang/__init__.py", "sglang/launch_server.py"]
    for path in paths:
        assert f"{app}/{path}" in rootfs
    assert f"{DEMO_MODEL_PATH.strip('/')}/config.json" in rootfs


def test_rootfs_has_the_interpreters_shared_libraries(rootfs: dict[str, tarfile.TarInfo]) -> None:
    libc = [name for name in rootfs if name.rsplit("/", 1)[-1].startswith("libc.so")]
    assert libc, "libc must be in the image"
    total = sum(member.size for member in rootfs.values())
    assert total < 150 * 1024 * 1024


def test_digest_changes_when_a_standin_source_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = host_python()
    before = standin_digest(runtime)
    assert before == standin_digest(runtime)
    original = image._app_files
    monkeypatch.setattr(image, "_app_files", lambda: [*original(), (f"{APP_DIR}/extra.py", b"x = 1\n")])
    assert standin_digest(runtime) != before


def test_every_servectl_module_the_engine_can_import_is_in_the_image() -> None:
    """Lazy imports count: the catalog imports SGLang's type functions only when it converts a value."""
    import ast

    shipped = {path.removeprefix(f"{APP_DIR}/") for path, _ in image._app_files() if path.endswith(".py")}
    host_only = {"servectl/standin/image.py"}  # builds the image on the host; never runs inside it
    missing = []
    for path, content in image._app_files():
        rel = path.removeprefix(f"{APP_DIR}/")
        if not rel.startswith("servectl/") or not rel.endswith(".py") or rel in host_only:
            continue
        for node in ast.walk(ast.parse(content)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("servectl"):
                module = (node.module or "").replace(".", "/")
                if f"{module}.py" not in shipped and f"{module}/__init__.py" not in shipped:
                    missing.append(f"{rel}:{node.lineno}: {node.module}")
    assert missing == []
