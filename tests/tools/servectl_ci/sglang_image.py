"""Test images of the real SGLang 0.5.23 parser, built here without a registry or a Dockerfile.

``upstream``: the host's Python 3.11 (interpreter, standard library, the libraries ``ldd`` lists, as the
stand-in image has them) plus the site-packages of the SGLang parser venv (:mod:`servectl_ci.sglang_venv`:
the published ``sglang==0.5.23`` wheel and, pinned, what its ``sglang.srt.server_args`` imports on a CPU, torch
being the CPU build on this machine kind's disk) without Triton (1 GB, GPU only): a ``sitecustomize`` installs
SGLang's own Triton stand-in (``sglang/_platform_stubs.py``, what SGLang uses where Triton does not exist) the
first time something imports ``triton``.

``patched``: the upstream image plus one changed ``server_args.py`` (a committed layer on top, seconds to
build), standing for a custom engine build: one added flag (:data:`PATCH_ADDED_FLAG`), one added choice
(:data:`PATCH_ADDED_CHOICE` for ``--quantization``), one removed flag (:data:`PATCH_REMOVED_FLAG`).

Images are tagged by a hash of what goes in (the venv's recipe, this layout, the patch), so a second run finds
them; ``python3 -m servectl_ci.sglang_image`` builds both and prints how long that took.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servectl.errors import ServectlError
from servectl.standin import image as standin_image
from servectl_ci import sglang_venv

REPOSITORY = "servectl-sglang-test"
LABEL = "servectl.sglang-test"
SGLANG_VERSION = "0.5.23"
SITE = "/opt/sglang/site"  # in the image: the packages, sglang included, and sitecustomize.py
_LAYOUT_VERSION = "3"

PATCH_ADDED_FLAG = "--exl3-cache-mode"
PATCH_ADDED_CHOICE = ("--quantization", "exl3")
PATCH_REMOVED_FLAG = "--enable-flashinfer-allreduce-fusion"

_SITECUSTOMIZE = '''"""servectl test image: SGLang's own Triton stand-in (Triton is not installed: CPU only)."""

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
class SglangTestImages:
    """References of the two built images and how long building took (0 when both were found)."""

    upstream: str
    patched: str
    build_seconds: float


def _site_packages(venv: Path) -> Path:
    found = sorted((venv / "lib").glob("python3*/site-packages"))
    if not found:
        raise ServectlError(f"building the SGLang test image: no site-packages in the parser venv {venv}")
    return found[0]


def content_hash() -> str:
    """12 hex digits over everything that decides the upstream image."""
    digest = hashlib.sha256()
    runtime = standin_image.host_python()
    digest.update(f"layout={_LAYOUT_VERSION}\npython={sys.version}\nexe={runtime.executable}\n".encode())
    digest.update(f"venv={sglang_venv.recipe_hash()}\n".encode())
    digest.update(_SITECUSTOMIZE.encode())
    digest.update(_PATCH_INSERT.encode())
    return digest.hexdigest()[:12]


def patched_server_args(source: str) -> str:
    """``server_args.py`` of the patched build: one flag added, one choice added, one flag removed.

    Raises:
        ServectlError: the upstream source no longer has the places the patch edits.
    """
    if _PATCH_ANCHOR not in source or _REMOVED_BLOCK not in source:
        raise ServectlError("building the patched SGLang test image: server_args.py changed; update the patch")
    return source.replace(_PATCH_ANCHOR, _PATCH_ANCHOR + _PATCH_INSERT, 1).replace(_REMOVED_BLOCK, "", 1)


# -- the site folder ----------------------------------------------------------------------------------------

_SKIP_SITE_DIRS = frozenset({"test", "tests", "include", "pip", "setuptools", "_distutils_hack", "triton"})


def _warm(site: Path) -> set[Path]:
    """Import what the probes import from ``site`` with Triton stubbed, as in the image; return the stdlib files.

    It proves the parser imports before anything is built, and names the standard-library modules to ship
    as bytecode (the image's read-only root file system cannot take a cache later). The packages' own
    bytecode came with pip.
    """
    from servectl.adapters import sglang_probe

    probe = Path(sglang_probe.__file__).read_text()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "sitecustomize.py").write_text(_SITECUSTOMIZE)
        for entry in site.iterdir():  # the site folder as the image has it: without Triton
            if not entry.name.startswith("triton") and entry.name != "sitecustomize.py":
                (Path(tmp) / entry.name).symlink_to(entry)
        code = (
            f"import sys; sys.path[:0] = [{tmp!r}]; import sitecustomize\n"
            f"sys.argv = ['probe', 'parse', '--model-path', '/model']\nexec(compile({probe!r}, 'probe', 'exec'))\n"
            "print('\\n'.join(getattr(m, '__file__', None) or '' for m in list(sys.modules.values())))\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        proc = subprocess.run(
            [sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, cwd=tmp, check=False
        )
    failed = proc.returncode != 0 or sglang_probe.END not in proc.stdout or '"error":' in proc.stdout
    if failed:
        tail = " ".join((proc.stderr + proc.stdout).strip().splitlines()[-3:])[-500:]
        raise ServectlError(f"building the SGLang test image: sglang.srt.server_args does not import: {tail}")
    return {Path(line).resolve() for line in proc.stdout.splitlines() if line.endswith(".py")}


def _site_files(staging: Path) -> Iterator[tuple[Path, str]]:
    for dirpath, dirnames, filenames in os.walk(staging):
        here = Path(dirpath)
        dirnames[:] = sorted(
            d for d in dirnames if d not in _SKIP_SITE_DIRS and not (here == staging and d.startswith("triton"))
        )
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
    writer.data(f"{SITE}/sitecustomize.py", _SITECUSTOMIZE.encode())
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


def _build_upstream(client: Any, ref: str, site: Path) -> None:
    imported = _warm(site)
    with tempfile.TemporaryFile() as rootfs:
        lib_dirs = _write_rootfs(rootfs, site, imported)
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


def _build_patched(client: Any, upstream: str, ref: str, site: Path) -> None:
    source = (site / "sglang" / "srt" / "server_args.py").read_text()
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


def build_test_images(*, docker_client: Any = None) -> SglangTestImages:
    """Build (or find) the upstream and patched SGLang test images.

    Raises:
        ServectlError: a download or install fails, the parser does not import, or Docker refuses the image.
    """
    import docker

    client = docker_client if docker_client is not None else docker.from_env()
    started = time.monotonic()
    key = content_hash()
    upstream = f"{REPOSITORY}:upstream-{key}"
    patched = f"{REPOSITORY}:patched-{key}"
    built = False
    if not (_exists(client, upstream) and _exists(client, patched)):
        try:
            venv = sglang_venv.ensure_parser_venv()
        except RuntimeError as err:
            raise ServectlError(f"building the SGLang test image: {err}") from err
        site = _site_packages(venv.parent.parent)
        if not _exists(client, upstream):
            _build_upstream(client, upstream, site)
        _build_patched(client, upstream, patched, site)
        built = True
    return SglangTestImages(
        upstream=upstream, patched=patched, build_seconds=time.monotonic() - started if built else 0.0
    )


def main() -> int:
    """``python -m servectl_ci.sglang_image``: build the images, print their references and the time."""
    images = build_test_images()
    print(f"upstream {images.upstream}\npatched  {images.patched}\nbuild_seconds {images.build_seconds:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
