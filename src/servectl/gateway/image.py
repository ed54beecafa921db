"""The gateway's container image, built locally from the servectl that runs this (no registry, no Dockerfile).

The root filesystem is the stand-in's (this interpreter, its libraries and standard library: see
:func:`servectl.standin.image.write_rootfs`) plus this servectl package and the installed distributions the
gateway imports (aiohttp, pydantic, the Docker SDK, httpx, typer and what they require), copied file by file
from their install records. The tag is a hash of all of it, so a changed servectl or dependency builds anew.

The servectl package sits in the image at the path it has on this host (:func:`package_dir`), so every path
servectl derives from its own files - a shipped profile's ``model.path: ../examples/demo-model``, the demo
model, the catalogs - is the host's path inside the container too: a swap on request in the gateway container
hands Docker bind mounts that exist on the host (from ``/opt/servectl/...`` Docker made an empty folder on the
host and the engine found no ``config.json``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerEngine

IMAGE_REPOSITORY = "servectl-gateway"
IMAGE_LABEL = "servectl.gateway-image"
#: The gateway's dependencies (``APP_DIR/site-packages``).
APP_DIR = "/opt/servectl"
#: What ``python -m servectl gateway run`` imports, as distribution names (their requirements follow).
ROOT_DISTRIBUTIONS = ("aiohttp", "pydantic", "PyYAML", "platformdirs", "docker", "httpx", "typer", "rich", "psutil")
_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _closure(roots: tuple[str, ...]) -> list[importlib.metadata.Distribution]:
    """The installed distributions ``roots`` need (requirements behind an ``extra`` left out)."""
    seen: dict[str, importlib.metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # a requirement for another platform or Python
        seen[key] = dist
        for requirement in dist.requires or []:
            if "extra ==" in requirement.partition(";")[2]:
                continue
            match = _REQUIREMENT_NAME.match(requirement)
            if match:
                todo.append(match.group(1))
    return [seen[k] for k in sorted(seen)]


def package_dir() -> Path:
    """This servectl package's folder on the host: its path in the image as well."""
    return Path(__file__).resolve().parents[1]


def image_files() -> list[tuple[str, Path]]:
    """``(path in image, host file)`` for servectl and every distribution it needs to run the gateway."""
    package = package_dir()
    files = [
        (p.as_posix(), p)
        for p in sorted(package.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    ]
    for dist in _closure(ROOT_DISTRIBUTIONS):
        for record in dist.files or []:
            if record.parts[0] == ".." or "__pycache__" in record.parts or record.suffix == ".pyc":
                continue  # scripts installed outside site-packages, bytecode
            source = Path(str(dist.locate_file(record)))
            if source.is_file():
                files.append((f"{APP_DIR}/site-packages/{record.as_posix()}", source))
    return files


def gateway_image_ref(files: list[tuple[str, Path]] | None = None) -> str:
    """``servectl-gateway:<12 hex digits>``: a hash of the interpreter and every file that goes in."""
    digest = hashlib.sha256(f"python={sys.version}\nexe={Path(sys.executable).resolve()}\n".encode())
    for path, source in files if files is not None else image_files():
        digest.update(path.encode() + b"\0" + hashlib.sha256(source.read_bytes()).digest())
    return f"{IMAGE_REPOSITORY}:{digest.hexdigest()[:12]}"


def build_gateway_image(*, docker: DockerEngine, force: bool = False) -> str:
    """Build (or find) the gateway image on ``docker`` and return its reference.

    Raises:
        EngineUnavailable: no Docker engine answers. ServectlError: the engine refused the import.
    """
    from servectl.standin.image import PREFIX, host_python, write_rootfs

    files = image_files()
    ref = gateway_image_ref(files)
    if not force and docker.image_present(ref):
        return ref

    def write(rootfs: BinaryIO) -> list[str]:
        lib_dirs = write_rootfs(rootfs, host_python(), extra_files=files)
        return [
            'ENTRYPOINT ["python3", "-m", "servectl"]',
            'CMD ["gateway", "run"]',
            "ENV PATH=/usr/local/bin:/usr/bin:/bin",
            f"ENV PYTHONHOME={PREFIX}",
            f"ENV PYTHONPATH={package_dir().parent.as_posix()}:{APP_DIR}/site-packages",
            f"ENV LD_LIBRARY_PATH={':'.join(lib_dirs)}",
            "ENV PYTHONUNBUFFERED=1",
            "ENV LANG=C.UTF-8",
            "WORKDIR /",
            f"LABEL {IMAGE_LABEL}=1",
        ]

    docker.import_image(ref, write_rootfs=write)
    return ref
