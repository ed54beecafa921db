"""Test images of the real SGLang 0.5.23 parser, built here without a registry or a Dockerfile.

``upstream``: the host's Python 3.11 (interpreter, standard library, the libraries ``ldd`` lists, as the
stand-in image has them) plus the published ``sglang==0.5.23`` wheel and the packages its
``sglang.srt.server_args`` needs to import on a CPU: a CPU build of torch 2.13 (the file on this machine kind's
disk) and a few pure or small packages from PyPI. Triton is not installed (1 GB, GPU only): a
``sitecustomize`` installs SGLang's own Triton stand-in (``sglang/_platform_stubs.py``, what SGLang uses where
Triton does not exist) the first time something imports ``triton``.

``patched``: the upstream image plus one changed ``server_args.py`` (a committed layer on top, seconds to
build), standing for a custom engine build: one added flag (:data:`PATCH_ADDED_FLAG`), one added choice
(:data:`PATCH_ADDED_CHOICE` for ``--quantization``), one removed flag (:data:`PATCH_REMOVED_FLAG`).

Images are tagged by a hash of what goes in, so a second run finds them; the downloads and the installed
packages are cached under :func:`cache_dir` (``$SERVECTL_CI_CACHE`` or ``~/.cache/servectl-ci``).
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servectl.errors import ServectlError
from servectl.standin import image as standin_image

REPOSITORY = "servectl-sglang-test"
LABEL = "servectl.sglang-test"
SGLANG_VERSION = "0.5.23"
SITE = "/opt/sglang/site"  # in the image: the packages, sglang included, and sitecustomize.py
_LAYOUT_VERSION = "2"

#: What ``sglang.srt.server_args`` imports on a CPU (found by importing it until nothing was missing),
#: pinned so the image is the same on every machine. torch 2.13.0 is the CPU build pip finds on this machine
#: kind's disk; from PyPI it would be a CUDA build of several GB.
REQUIREMENTS = (
    "torch==2.13.0",
    "numpy==2.4.6",
    "orjson==3.13.0",
    "psutil==7.2.2",
    "pybase64==1.5.1",
    "requests==2.34.2",
    "packaging==26.4",
    "pillow==13.0.0",
    "starlette==1.10.0",
    "msgspec==0.23.0",
    "pydantic==2.14.4",
    "pyzmq==27.3.0",
    "tqdm==4.70.1",
    "ipython==9.18.1",
    "aiohttp==3.14.5",
)

PATCH_ADDED_FLAG = "--exl3-cache-mode"
PATCH_ADDED_CHOICE = ("--quantization", "exl3")
PATCH_REMOVED_FLAG = "--enable-flashinfer-allreduce-fusion"

_SITECUSTOMIZE = '''"""servectl test image: SGLang's own Triton stand-in where Triton is not installed (CPU-only image)."""

import importlib.abc
import importlib.util
import os
import sys


class _TritonStubLoader(importlib.abc.MetaPathFinder):
    _busy = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "triton" or self._busy:
            return None
        type(self)._busy = True
        try:
            return _install()
        finally:
            type(self)._busy = False


def _install():
    import platform

    import torch

    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sglang", "_platform_stubs.py")
    spec = importlib.util.spec_from_file_location("_sglang_platform_stubs", here)
    stubs = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = stubs  # its dataclasses look their module up while it executes
    spec.loader.exec_module(stubs)
    # install_platform_stubs() installs the Triton stand-in on Apple Silicon only; let it think it is there.
    saved = (sys.platform, platform.machine, torch.backends.mps.is_available)
    sys.platform, platform.machine = "darwin", lambda: "arm64"
    torch.backends.mps.is_available = lambda: True
    try:
        stubs.install_platform_stubs()
    finally:
        sys.platform, platform.machine, torch.backends.mps.is_available = saved
    return sys.modules["triton"].__spec__


if "triton" not in sys.modules:
    sys.meta_path.append(_TritonStubLoader())
'''

_PATCH_ANCHOR = "        add_cli_args_from_dataclass(parser, ServerArgs)\n"
_PATCH_INSERT = f'''        # servectl test image "patched": a custom build's parser.
        parser.add_argument("{PATCH_ADDED_FLAG}", type=str, choices=["fp16", "q8"], default="fp16")
        for _action in parser._actions:
            if "{PATCH_ADDED_CHOICE[0]}" in _action.option_strings:
                _action.choices = list(_action.choices) + ["{PATCH_ADDED_CHOICE[1]}"]
'''
_REMOVED_BLOCK = f'''        parser.add_argument(
            "{PATCH_REMOVED_FLAG}",
            action="store_true",
            help="(Deprecated: use --flashinfer-allreduce-fusion-backend=auto) "
            "Enable FlashInfer allreduce fusion with Residual RMSNorm.",
        )
'''


@dataclass(frozen=True)
class TestImages:
    """References of the two built images and how long building took (0 when both were found)."""

    upstream: str
    patched: str
    build_seconds: float


def cache_dir() -> Path:
    """Where downloads and installed packages are kept between runs."""
    root = os.environ.get("SERVECTL_CI_CACHE") or str(Path.home() / ".cache" / "servectl-ci")
    return Path(root) / "sglang-image"


def _pip(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = " ".join(proc.stderr.strip().splitlines()[-2:])
        raise ServectlError(f"building the SGLang test image: pip {args[0]} failed: {tail}")


def wheel_path() -> Path:
    """The ``sglang==0.5.23`` wheel from PyPI, downloaded once."""
    folder = cache_dir() / "wheels"
    found = sorted(folder.glob(f"sglang-{SGLANG_VERSION}-*.whl"))
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        _pip("download", "-q", f"sglang=={SGLANG_VERSION}", "--no-deps", "-d", str(folder))
        found = sorted(folder.glob(f"sglang-{SGLANG_VERSION}-*.whl"))
    if not found:
        raise ServectlError(f"building the SGLang test image: pip left no sglang wheel in {folder}")
    return found[0]


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _deps_dir() -> Path:
    """The pinned packages, installed once into a folder named by their hash."""
    key = hashlib.sha256(f"{sys.version}\n{chr(10).join(REQUIREMENTS)}".encode()).hexdigest()[:12]
    target = cache_dir() / f"deps-{key}"
    if not (target / ".complete").exists():
        shutil.rmtree(target, ignore_errors=True)
        _pip("install", "-q", "--no-compile", "--target", str(target), *REQUIREMENTS)
        (target / ".complete").write_text("ok\n")
    return target


def content_hash(wheel: Path) -> str:
    """12 hex digits over everything that decides the upstream image."""
    digest = hashlib.sha256()
    runtime = standin_image.host_python()
    digest.update(f"layout={_LAYOUT_VERSION}\npython={sys.version}\nexe={runtime.executable}\n".encode())
    digest.update(_file_sha256(wheel).encode())
    digest.update("\n".join(REQUIREMENTS).encode())
    digest.update(_SITECUSTOMIZE.encode())
    return digest.hexdigest()[:12]


def patched_server_args(source: str) -> str:
    """``server_args.py`` of the patched build: one flag added, one choice added, one flag removed.

    Raises:
        ServectlError: the upstream source no longer has the places the patch edits.
    """
    if _PATCH_ANCHOR not in source or _REMOVED_BLOCK not in source:
        raise ServectlError("building the patched SGLang test image: server_args.py changed; update the patch")
    return source.replace(_PATCH_ANCHOR, _PATCH_ANCHOR + _PATCH_INSERT, 1).replace(_REMOVED_BLOCK, "", 1)


# -- the staged site folder ----------------------------------------------------------------------------------

_SKIP_SITE_DIRS = frozenset({"test", "tests", "include", "pip", "setuptools", "_distutils_hack"})


def _stage_site(wheel: Path, deps: Path, staging: Path) -> None:
    """``staging`` = the packages + the wheel's ``sglang`` package + sitecustomize, ready to be warmed."""
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(deps, staging, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", ".complete"))
    with zipfile.ZipFile(wheel) as whl:
        for member in whl.namelist():
            if member.startswith("sglang/") and "/__pycache__/" not in member:
                whl.extract(member, staging)
    (staging / "sitecustomize.py").write_text(_SITECUSTOMIZE)


def _warm(staging: Path) -> set[Path]:
    """Import what the probe imports, in an interpreter that sees only ``staging``; return the stdlib files.

    Python writes the bytecode of every module it imports next to the source (``__pycache__``), so the
    image imports SGLang from bytecode; its read-only root file system could not take it later.
    """
    from servectl.adapters import sglang_probe

    probe = Path(sglang_probe.__file__).read_text()
    code = (
        f"import sys; sys.path.insert(0, {str(staging)!r}); import sitecustomize\n"
        f"sys.argv = ['probe', 'catalog']\nexec(compile({probe!r}, 'probe', 'exec'))\n"
        "print('\\n'.join(getattr(m, '__file__', None) or '' for m in list(sys.modules.values())))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, cwd=staging, check=False
    )
    failed = proc.returncode != 0 or sglang_probe.END not in proc.stdout or '"error":' in proc.stdout
    if failed:
        tail = " ".join((proc.stderr + proc.stdout).strip().splitlines()[-3:])[-500:]
        raise ServectlError(f"building the SGLang test image: sglang.srt.server_args does not import: {tail}")
    return {Path(line).resolve() for line in proc.stdout.splitlines() if line.endswith(".py")}


def _site_files(staging: Path) -> Iterator[tuple[Path, str]]:
    for dirpath, dirnames, filenames in os.walk(staging):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_SITE_DIRS)
        for name in sorted(filenames):
            if name.endswith((".a", ".whl")):
                continue
            path = here / name
            yield path, path.relative_to(staging).as_posix()


def _write_rootfs(fileobj: Any, staging: Path, imported: set[Path]) -> list[str]:
    """The root file system tar: the stand-in image's Python (as it builds it) plus the staged site folder."""
    runtime = standin_image.host_python()
    stdlib_in_image = f"{standin_image.PREFIX}/{runtime.platlibdir}/python{runtime.version}"
    extensions = sorted(p for p in runtime.dynload_dir.glob("*.so") if not standin_image._SKIP_EXTENSIONS.match(p.name))
    site_elves = [p for p, _ in _site_files(staging) if p.suffix == ".so" or ".so." in p.name]
    deps = standin_image._ldd([runtime.executable, *extensions, *site_elves])
    libraries = set(deps[runtime.executable][0])
    for ext in extensions:
        libs, complete = deps.get(ext, (set(), False))
        if complete:
            libraries |= libs
    for elf in site_elves:  # libraries the packages bring themselves (numpy.libs, torch/lib) are in the site
        libraries |= {lib for lib in deps.get(elf, (set(), True))[0] if not lib.is_relative_to(staging)}
    writer = standin_image._RootfsWriter(fileobj)
    for folder, mode in (("/tmp", 0o1777), ("/root", 0o700), ("/etc", 0o755), ("/usr/bin", 0o755)):
        writer.directory(folder, mode)
    writer.data("/etc/passwd", standin_image._PASSWD.encode())
    writer.data("/etc/group", standin_image._GROUP.encode())
    writer.data("/etc/nsswitch.conf", standin_image._NSSWITCH.encode())
    writer.file(f"{standin_image.PREFIX}/bin/python{runtime.version}", runtime.executable)
    writer.symlink(f"{standin_image.PREFIX}/bin/python3", f"python{runtime.version}")
    writer.symlink(f"{standin_image.PREFIX}/bin/python", f"python{runtime.version}")
    for library in sorted(libraries):
        writer.file(str(library), library)
    for source, relative in standin_image._stdlib_files(runtime):
        writer.file(f"{stdlib_in_image}/{relative}", source)
        if source.resolve() in imported:
            writer.data(*standin_image._bytecode(f"{stdlib_in_image}/{relative}", source.read_bytes()))
    writer.directory(f"{stdlib_in_image}/lib-dynload")
    for ext in extensions:
        writer.file(f"{stdlib_in_image}/lib-dynload/{ext.name}", ext)
    for source, relative in _site_files(staging):
        if source.is_symlink():
            writer.symlink(f"{SITE}/{relative}", os.readlink(source))
        else:
            writer.file(f"{SITE}/{relative}", source)
    writer.close()
    return sorted({str(lib.parent) for lib in libraries})


# -- Docker --------------------------------------------------------------------------------------------------


def _exists(client: Any, ref: str) -> bool:
    import docker.errors  # type: ignore[import-untyped]  # docker-py ships no type information

    try:
        client.images.get(ref)
    except docker.errors.ImageNotFound:
        return False
    return True


def _build_upstream(client: Any, ref: str, wheel: Path) -> None:
    deps = _deps_dir()
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        staging = Path(tmp) / "site"
        _stage_site(wheel, deps, staging)
        imported = _warm(staging)
        with tempfile.TemporaryFile(dir=tmp) as rootfs:
            lib_dirs = _write_rootfs(rootfs, staging, imported)
            rootfs.seek(0)
            repository, tag = ref.split(":", 1)
            changes = [
                'CMD ["python3", "-m", "sglang.launch_server", "--help"]',
                "ENV PATH=/usr/local/bin:/usr/bin:/bin",
                f"ENV PYTHONHOME={standin_image.PREFIX}",
                f"ENV PYTHONPATH={SITE}",
                f"ENV LD_LIBRARY_PATH={':'.join(lib_dirs)}",
                "ENV PYTHONDONTWRITEBYTECODE=1",
                "ENV LANG=C.UTF-8",
                "WORKDIR /",
                f"LABEL {LABEL}=upstream",
            ]
            client.api.import_image(src=rootfs, repository=repository, tag=tag, changes=changes)


def _build_patched(client: Any, upstream: str, ref: str, wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        source = whl.read("sglang/srt/server_args.py").decode()
    patched = patched_server_args(source).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("server_args.py")
        info.size, info.mode, info.mtime = len(patched), 0o644, int(time.time())
        tar.addfile(info, io.BytesIO(patched))
    container = client.containers.create(upstream, command=["true"], labels={LABEL: "patch-build"})
    try:
        container.put_archive(f"{SITE}/sglang/srt", buffer.getvalue())
        repository, tag = ref.split(":", 1)
        container.commit(repository=repository, tag=tag, changes=[f"LABEL {LABEL}=patched"])
    finally:
        container.remove(force=True)


def build_test_images(*, docker_client: Any = None) -> TestImages:
    """Build (or find) the upstream and patched SGLang test images.

    Raises:
        ServectlError: a download or install fails, the parser does not import, or Docker refuses the image.
    """
    import docker  # type: ignore[import-untyped]  # docker-py ships no type information

    client = docker_client if docker_client is not None else docker.from_env()
    started = time.monotonic()
    cache_dir().mkdir(parents=True, exist_ok=True)
    wheel = wheel_path()
    key = content_hash(wheel)
    upstream = f"{REPOSITORY}:upstream-{key}"
    patched = f"{REPOSITORY}:patched-{key}"
    built = False
    if not _exists(client, upstream):
        _build_upstream(client, upstream, wheel)
        built = True
    if not _exists(client, patched):
        _build_patched(client, upstream, patched, wheel)
        built = True
    return TestImages(upstream=upstream, patched=patched, build_seconds=time.monotonic() - started if built else 0.0)


def main() -> int:
    """``python -m servectl.testing.sglang_image``: build the images, print their references and the time."""
    images = build_test_images()
    print(f"upstream {images.upstream}\npatched  {images.patched}\nbuild_seconds {images.build_seconds:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
