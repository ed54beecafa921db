"""The stand-in engine's container image, built without a registry or a Dockerfile.

The image is a root filesystem assembled here, in Python, from the interpreter that runs servectl: its
binary, the shared libraries ``ldd`` lists for it and for the standard library's extension modules, the
standard library (without test suites, ``__pycache__``, IDLE, tkinter, ensurepip, site-packages), a few
``/etc`` files, the stand-in package with :mod:`servectl.profile.catalog` and the flag catalogs, and an
``sglang/launch_server.py`` shim so that ``python3 -m sglang.launch_server ...`` runs
:func:`servectl.standin.main`. The modules the engine imports get bytecode compiled here (the host's
``__pycache__`` is not copied), so that the engine starts in a fraction of a second. The tarball is imported
through the host's Docker engine interface (``docker import``). A demo model is baked in at :data:`DEMO_MODEL_PATH`.

The tag is a hash of everything that goes in (stand-in sources, catalog, interpreter version), so a changed
stand-in gets a new tag and is rebuilt; ``servectl-standin:latest`` points at the last build.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import py_compile
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

IMAGE_REPOSITORY = "servectl-standin"
IMAGE_LABEL = "servectl.standin"
PREFIX = "/usr/local"
APP_DIR = "/opt/servectl-standin"
DEMO_MODEL_PATH = f"{APP_DIR}/demo-model"
_LAYOUT_VERSION = "2"  # bump when the rootfs layout changes in a way the hashed sources do not show

#: The demo model's ``config.json`` (the same as ``examples/demo-model/config.json``; a unit test checks it).
DEMO_MODEL_CONFIG: dict[str, Any] = {
    "architectures": ["Glm4MoeForCausalLM"],
    "model_type": "glm4_moe",
    "torch_dtype": "bfloat16",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "moe_intermediate_size": 768,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "n_routed_experts": 64,
    "n_shared_experts": 1,
    "num_experts_per_tok": 4,
    "first_k_dense_replace": 1,
    "num_nextn_predict_layers": 1,
    "max_position_embeddings": 202752,
    "rope_theta": 1000000,
    "rms_norm_eps": 1e-05,
    "vocab_size": 151552,
    "tie_word_embeddings": False,
    "pad_token_id": 151329,
    "eos_token_id": [151329, 151336, 151338],
    "_comment": "servectl stand-in model: a config with no weights, for the demo profiles and tests",
}

_SKIP_DIRS = frozenset(
    {"__pycache__", "test", "tests", "idle_test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
     "site-packages", "dist-packages", "pydoc_data", "distutils"}
)  # fmt: skip
_SKIP_SUFFIXES = (".pyc", ".pyo", ".exe", ".a", ".whl")
_SKIP_EXTENSIONS = re.compile(r"^(_test|_xx|xxlimited|_tkinter|_ctypes_test|_curses|readline)")
_LDD_PATH = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")

_SHIM_INIT = '"""Stand-in for the ``sglang`` package (servectl test image): only ``launch_server``."""\n\n' \
    '__version__ = "0.5.23"\n'  # fmt: skip
_SHIM_LAUNCH = '''"""Stand-in for ``python -m sglang.launch_server``: runs servectl's stand-in engine."""

import sys

from servectl.standin.engine import run_process

if __name__ == "__main__":
    run_process(sys.argv[1:])
'''
_PASSWD = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
_GROUP = "root:x:0:\nnogroup:x:65534:\n"
_NSSWITCH = "passwd: files\ngroup: files\nhosts: files dns\n"


@dataclass(frozen=True)
class PythonRuntime:
    """Where the interpreter that goes into the image lives on this host."""

    executable: Path  # the real binary, symlinks resolved
    version: str  # "3.11"
    stdlib_dir: Path
    dynload_dir: Path
    platlibdir: str  # "lib" (or "lib64" on some distributions)


def host_python() -> PythonRuntime:
    """The running interpreter, as a :class:`PythonRuntime`."""
    paths = sysconfig.get_paths()
    stdlib = Path(paths["stdlib"])
    dynload = Path(str(sysconfig.get_config_var("DESTSHARED") or Path(paths["platstdlib"]) / "lib-dynload"))
    return PythonRuntime(
        executable=Path(os.path.realpath(sys.executable)),
        version=f"{sys.version_info.major}.{sys.version_info.minor}",
        stdlib_dir=stdlib,
        dynload_dir=dynload,
        platlibdir=sys.platlibdir,
    )


def _package_dir() -> Path:
    return Path(__file__).resolve().parents[1]  # src/servectl


def _app_files() -> list[tuple[str, bytes]]:
    """The stand-in's own files as ``(path in image, content)``: package subset, shim, demo model."""
    pkg = _package_dir()
    from servectl.version import __version__

    files: list[tuple[str, bytes]] = [
        (
            f"{APP_DIR}/servectl/__init__.py",
            f'"""servectl: the stand-in image\'s subset."""\n\n__version__ = "{__version__}"\n'.encode(),
        ),
        (f"{APP_DIR}/servectl/profile/__init__.py", b""),
        # the catalog reads its files through the one bounded reader (stdlib only)
        (f"{APP_DIR}/servectl/files.py", (pkg / "files.py").read_bytes()),
        (f"{APP_DIR}/servectl/profile/catalog.py", (pkg / "profile" / "catalog.py").read_bytes()),
        # the catalog converts values with SGLang's own type functions, imported when it parses argv
        (f"{APP_DIR}/servectl/profile/sglang_types.py", (pkg / "profile" / "sglang_types.py").read_bytes()),
    ]
    # the memory saver's routes and tags, read from SGLang's source (standin/memory.py answers them)
    files.append((f"{APP_DIR}/servectl/profile/memory_saver.py", (pkg / "profile" / "memory_saver.py").read_bytes()))
    # the route table and the Anthropic/Ollama/embeddings shapes, read from SGLang's source (standin/families.py)
    files.append((f"{APP_DIR}/servectl/profile/api_routes.py", (pkg / "profile" / "api_routes.py").read_bytes()))
    # ... whose route-table reader is the in-image dumper's (stdlib only; the stand-in only loads the catalog)
    files.append((f"{APP_DIR}/servectl/profile/engine_dump.py", (pkg / "profile" / "engine_dump.py").read_bytes()))
    files += [
        (
            f"{APP_DIR}/servectl/profile/catalogs/{p.relative_to(pkg / 'profile' / 'catalogs').as_posix()}",
            p.read_bytes(),
        )
        for p in sorted(
            [
                *pkg.glob("profile/catalogs/*.json"),
                *pkg.glob("profile/catalogs/memory_saver/*.json"),
                *pkg.glob("profile/catalogs/routes/*.json"),
            ]
        )
    ]
    files += [
        (f"{APP_DIR}/servectl/standin/{p.name}", p.read_bytes())
        for p in sorted([*pkg.glob("standin/*.py"), *pkg.glob("standin/*.json")])  # json: the code solutions
    ]
    files += [
        (f"{APP_DIR}/sglang/__init__.py", _SHIM_INIT.encode()),
        (f"{APP_DIR}/sglang/launch_server.py", _SHIM_LAUNCH.encode()),
        (f"{DEMO_MODEL_PATH}/config.json", (json.dumps(DEMO_MODEL_CONFIG, indent=2) + "\n").encode()),
    ]
    return files


def standin_digest(runtime: PythonRuntime | None = None) -> str:
    """A hash of everything that decides the image's content: 12 hex digits."""
    runtime = runtime or host_python()
    digest = hashlib.sha256()
    digest.update(f"layout={_LAYOUT_VERSION}\npython={sys.version}\nexe={runtime.executable}\n".encode())
    for name, content in _app_files():
        digest.update(name.encode() + b"\0" + hashlib.sha256(content).digest())
    return digest.hexdigest()[:12]


def standin_image_ref() -> str:
    """``servectl-standin:<hash of the stand-in sources>``: the tag :func:`build_standin_image` builds."""
    return f"{IMAGE_REPOSITORY}:{standin_digest()}"


# -- root filesystem -----------------------------------------------------------------------------------------


def _ldd(paths: Iterable[Path]) -> dict[Path, tuple[set[Path], bool]]:
    """For each ELF file: the libraries it loads (resolved paths) and whether all were found."""
    targets = [str(p) for p in paths]
    if not targets:
        return {}
    if shutil.which("ldd") is None:
        from servectl.errors import ServectlError

        raise ServectlError("cannot build the stand-in image: 'ldd' is not installed (install libc-bin)")
    proc = subprocess.run(["ldd", *targets], capture_output=True, text=True, check=False)
    result: dict[Path, tuple[set[Path], bool]] = {Path(t): (set(), True) for t in targets}
    current = Path(targets[0])
    for line in proc.stdout.splitlines():
        if len(targets) > 1 and not line.startswith(("\t", " ")) and line.endswith(":"):
            current = Path(line[:-1])
            continue
        libs, _complete = result[current]
        if "not found" in line:
            result[current] = (libs, False)
            continue
        match = _LDD_PATH.search(line)
        if match:
            libs.add(Path(match.group(1)))
    return result


def _stdlib_files(runtime: PythonRuntime) -> Iterator[tuple[Path, str]]:
    """Standard-library sources to copy, as ``(host path, path relative to the stdlib folder)``."""
    root = runtime.stdlib_dir
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in _SKIP_DIRS and not d.startswith("config-") and here / d != runtime.dynload_dir
        )  # fmt: skip
        for name in sorted(filenames):
            if name.endswith(_SKIP_SUFFIXES):
                continue
            path = here / name
            if path.is_file():
                yield path, path.relative_to(root).as_posix()


def _engine_import_closure() -> set[Path]:
    """Source files of every module that importing the engine loads (run in a fresh interpreter)."""
    code = (
        "import sys, runpy, servectl.standin.engine\n"
        "for module in list(sys.modules.values()):\n"
        "    print(getattr(module, '__file__', None) or '')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(_package_dir().parent), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    return {Path(line).resolve() for line in proc.stdout.splitlines() if line.endswith(".py")}


def _bytecode(image_path: str, source: bytes) -> tuple[str, bytes]:
    """``(path of the .pyc in the image, content)`` for a source file at ``image_path``.

    Unchecked hash-based bytecode: the image never changes, so Python may skip the source check; starting the
    engine then takes a fraction of a second instead of compiling the imported modules on every start.
    """
    with tempfile.TemporaryDirectory() as tmp:
        source_file = Path(tmp) / "source.py"
        source_file.write_bytes(source)
        compiled = Path(tmp) / "compiled.pyc"
        py_compile.compile(
            str(source_file),
            cfile=str(compiled),
            dfile=image_path,
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
        return importlib.util.cache_from_source(image_path), compiled.read_bytes()


class _RootfsWriter:
    """A tar of a root filesystem: parent folders are added once, before their content."""

    def __init__(self, fileobj: BinaryIO) -> None:
        # Closed by close(): the writer is filled by several calls.
        self.tar = tarfile.open(fileobj=fileobj, mode="w", format=tarfile.PAX_FORMAT)  # noqa: SIM115
        self._dirs: set[str] = set()

    def _parents(self, path: str) -> None:
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            self.directory("/" + "/".join(parts[:i]))

    def directory(self, path: str, mode: int = 0o755) -> None:
        name = path.strip("/")
        if name in self._dirs:
            return
        self._parents(path)
        info = tarfile.TarInfo(name)
        info.type = tarfile.DIRTYPE
        info.mode = mode
        self.tar.addfile(info)
        self._dirs.add(name)

    def data(self, path: str, content: bytes, mode: int = 0o644) -> None:
        self._parents(path)
        info = tarfile.TarInfo(path.strip("/"))
        info.size = len(content)
        info.mode = mode
        self.tar.addfile(info, io.BytesIO(content))

    def file(self, path: str, source: Path) -> None:
        """Copy ``source`` (symlinks followed) to ``path``, keeping its mode and mtime."""
        self._parents(path)
        stat = source.stat()
        info = tarfile.TarInfo(path.strip("/"))
        info.size = stat.st_size
        info.mode = stat.st_mode & 0o7777
        info.mtime = int(stat.st_mtime)
        with source.open("rb") as fh:
            self.tar.addfile(info, fh)

    def symlink(self, path: str, target: str) -> None:
        self._parents(path)
        info = tarfile.TarInfo(path.strip("/"))
        info.type = tarfile.SYMTYPE
        info.linkname = target
        self.tar.addfile(info)

    def close(self) -> None:
        self.tar.close()


def write_rootfs(
    fileobj: BinaryIO, runtime: PythonRuntime | None = None, *, extra_files: Sequence[tuple[str, Path]] = ()
) -> list[str]:
    """Write the image's root filesystem as a tar to ``fileobj``; return the library folders (for LD path).

    ``extra_files`` (``(path in image, host file)``) go in too, with the libraries their ``.so`` files load
    (the gateway image adds servectl and its dependencies this way).

    Raises:
        ServectlError: ``ldd`` is missing or the interpreter's own libraries cannot all be found.
    """
    runtime = runtime or host_python()
    version = runtime.version
    stdlib_in_image = f"{PREFIX}/{runtime.platlibdir}/python{version}"
    extensions = sorted(p for p in runtime.dynload_dir.glob("*.so") if not _SKIP_EXTENSIONS.match(p.name))
    extra_objects = [source for _, source in extra_files if source.name.endswith(".so") or ".so." in source.name]
    deps = _ldd([runtime.executable, *extensions, *extra_objects])
    exe_libs, exe_complete = deps[runtime.executable]
    if not exe_complete:
        from servectl.errors import ServectlError

        raise ServectlError(f"cannot build the stand-in image: ldd {runtime.executable} reports missing libraries")
    libraries = set(exe_libs)
    kept_extensions = []
    for ext in extensions:
        libs, complete = deps.get(ext, (set(), False))
        if complete:  # an extension whose libraries are missing here would not import in the image either
            kept_extensions.append(ext)
            libraries |= libs
    for obj in extra_objects:  # libraries bundled beside a wheel's module (``*.libs``) are copied as its files
        libraries |= {lib for lib in deps.get(obj, (set(), False))[0] if ".libs/" not in str(lib)}

    writer = _RootfsWriter(fileobj)
    # /root is readable: the interpreter's libraries may live under it (pyenv), and the coding sandbox
    # (servectl.adapters.sandbox) runs this image as nobody
    for folder, mode in (("/tmp", 0o1777), ("/root", 0o755), ("/etc", 0o755), ("/usr/bin", 0o755)):
        writer.directory(folder, mode)
    writer.data("/etc/passwd", _PASSWD.encode())
    writer.data("/etc/group", _GROUP.encode())
    writer.data("/etc/nsswitch.conf", _NSSWITCH.encode())
    writer.file(f"{PREFIX}/bin/python{version}", runtime.executable)
    writer.symlink(f"{PREFIX}/bin/python3", f"python{version}")
    writer.symlink(f"{PREFIX}/bin/python", f"python{version}")
    for library in sorted(libraries):
        writer.file(str(library), library)
    engine_modules = _engine_import_closure()
    for source, relative in _stdlib_files(runtime):
        writer.file(f"{stdlib_in_image}/{relative}", source)
        if source.resolve() in engine_modules:
            writer.data(*_bytecode(f"{stdlib_in_image}/{relative}", source.read_bytes()))
    writer.directory(f"{stdlib_in_image}/lib-dynload")
    for ext in kept_extensions:
        writer.file(f"{stdlib_in_image}/lib-dynload/{ext.name}", ext)
    for path, content in _app_files():
        writer.data(path, content)
        if path.endswith(".py"):
            writer.data(*_bytecode(path, content))
    for path, source in extra_files:
        writer.file(path, source)
    writer.close()
    return sorted({str(lib.parent) for lib in libraries})


# -- Docker --------------------------------------------------------------------------------------------------


class ImageStore(Protocol):
    """What the build needs of the Docker engine: the part of ``servectl.adapters.docker.DockerEngine`` it calls
    (the stand-in, which also runs inside its image, imports none of the adapters)."""

    def image_present(self, ref: str) -> bool: ...

    def import_image(self, ref: str, *, write_rootfs: Callable[[BinaryIO], Sequence[str]]) -> None: ...

    def tag_image(self, ref: str, target: str) -> None: ...


def build_standin_image(*, docker: ImageStore, tag: str | None = None, force: bool = False) -> str:
    """Build (or find) the stand-in image on ``docker`` and return its reference.

    Args:
        docker: the engine (the host's ``DockerEngine``; the fake one records the import and writes nothing).
        tag: image reference to build; default :func:`standin_image_ref`, which also gets tagged ``latest``.
        force: build even when an image with that reference exists.

    Raises:
        EngineUnavailable: no Docker engine answers.
        ServectlError: the root filesystem cannot be assembled or the engine refuses the import.
    """
    runtime = host_python()
    digest = standin_digest(runtime)
    ref = tag or f"{IMAGE_REPOSITORY}:{digest}"

    def write(rootfs: BinaryIO) -> list[str]:
        lib_dirs = write_rootfs(rootfs, runtime)
        return [
            'CMD ["python3", "-m", "sglang.launch_server", "--help"]',
            "ENV PATH=/usr/local/bin:/usr/bin:/bin",
            f"ENV PYTHONHOME={PREFIX}",
            f"ENV PYTHONPATH={APP_DIR}",
            f"ENV LD_LIBRARY_PATH={':'.join(lib_dirs)}",
            "ENV PYTHONUNBUFFERED=1",
            "ENV PYTHONDONTWRITEBYTECODE=1",
            "ENV LANG=C.UTF-8",
            "WORKDIR /",
            f"LABEL {IMAGE_LABEL}=1",
            f"LABEL {IMAGE_LABEL}.digest={digest}",
        ]

    if force or not docker.image_present(ref):
        docker.import_image(ref, write_rootfs=write)
    if tag is None:
        docker.tag_image(ref, f"{IMAGE_REPOSITORY}:latest")
    return ref
