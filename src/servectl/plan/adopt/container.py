"""Inspect -> profile: ``docker inspect`` of a container servectl did not start -> a profile that reproduces it.

:func:`adopt_container` refuses what cannot be adopted, then fills the profile one section at a time in file
order (each section's detail lives in :mod:`servectl.plan.adopt.sections`). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from servectl.plan.adopt.draft import AdoptError, Adoption, Draft, profile_name_for
from servectl.plan.adopt.sections import (
    container_section,
    env_section,
    gpu_via,
    gpus_section,
    image_section,
    model_section,
    read_flags,
    serve_section,
    typed_engine,
    unsupported_notes,
)
from servectl.plan.container_match import EngineCommand, container_mounts, scan_engine_args, split_engine_command
from servectl.plan.labels import LABEL_MANAGED, LABEL_PROFILE
from servectl.profile.catalog import DEFAULT_CATALOG, FlagCatalog

_PROFILE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def adopt_container(
    data: Mapping[str, Any],
    *,
    image: Mapping[str, Any] | None = None,
    name: str | None = None,
    catalog: str = DEFAULT_CATALOG,
    origin: str | None = None,
    compose: tuple[str, str] | None = None,
) -> Adoption:
    """Translate ``docker inspect`` of one container into a profile that reproduces it. Pure.

    Args:
        data: ``docker inspect`` of the container (one document).
        image: ``docker image inspect`` of the image it runs (its id), for the repo digest and to tell the
            image's own environment, labels and entrypoint from the container's; None when not known.
        name: the profile name (default: from the container name).
        catalog: the flag catalog the engine's argv is read with.
        origin: how the container is named in the header (default ``container NAME``).
        compose: (compose file, service) when the container is described by a compose file.

    Raises:
        AdoptError: servectl started it, it runs no SGLang entry point, its model is not mounted from the
            host, or a flag cannot be written in a profile - one line saying which and what to do.
    """
    config: Mapping[str, Any] = data.get("Config") or {}
    host: Mapping[str, Any] = data.get("HostConfig") or {}
    container_name = str(data.get("Name") or "").lstrip("/")
    container_id = str(data.get("Id") or "")
    shown = container_name or container_id[:12]
    command = _sglang_command(config, shown)
    profile_name = _profile_name(name or profile_name_for(container_name))
    draft = Draft()
    where = origin or f"container {shown}"
    image_config: Mapping[str, Any] = (image or {}).get("Config") or {}
    _check_entrypoint(command, config, image_config, shown, draft)

    cat = FlagCatalog.load(catalog)
    uses, stray = scan_engine_args(command.args, cat)
    if stray:
        raise AdoptError(f"container {shown}: engine argv has values that belong to no flag: {' '.join(stray[:3])}")
    settings, args, extension, unknown = read_flags(uses, cat, draft)

    profile: dict[str, Any] = {
        "name": profile_name,
        "description": f"adopted from {where}",
        "status": "candidate",
        "adopted": _adopted(container_name or shown, container_id, compose),
        "image": image_section(config, image, draft),
    }
    profile["image"]["entrypoint"] = list(command.entrypoint)
    draft.source("image.entrypoint", f"{where} command")
    profile["model"], rest = _model(settings, data, shown, draft)

    engine: dict[str, Any] = {"catalog": catalog}
    if extension["choices"] or extension["options"]:
        engine["catalog_extend"] = {k: v for k, v in extension.items() if v}
    profile["gpus"] = gpus_section(data, int(settings.get("tp_size", 1)) * int(settings.get("dp_size", 1)), draft)
    profile["serve"] = serve_section(host, settings, draft)
    typed_engine(engine, settings, args)
    env = env_section(data, image, draft, via_runtime=gpu_via(data) == "nvidia-runtime")
    if env:
        engine["env"] = env
    if args:
        engine["args"] = args
    profile["engine"] = engine
    draft.source("engine", f"{where} argv after {' '.join(command.entrypoint)}")
    profile["container"] = container_section(data, container_name, rest, image_config, draft)
    unsupported_notes(host, data, draft)
    return Adoption(
        name=profile_name,
        data=profile,
        sources=tuple(draft.sources),
        notes=tuple(draft.notes),
        exports=tuple(dict.fromkeys(draft.exports)),
        unknown_flags=tuple(unknown),
        container_name=container_name,
        container_id=container_id,
        origin=where,
    )


def _sglang_command(config: Mapping[str, Any], shown: str) -> EngineCommand:
    """The container's SGLang command; refused when servectl started it or it runs no SGLang entry point."""
    labels = config.get("Labels") or {}
    if labels.get(LABEL_MANAGED) == "1":
        raise AdoptError(
            f"container {shown} was started by servectl (profile {labels.get(LABEL_PROFILE, '?')}); "
            "it needs no adopting: see `servectl status`"
        )
    argv = [str(t) for t in (*(config.get("Entrypoint") or ()), *(config.get("Cmd") or ()))]
    command = split_engine_command(argv)
    if command is None:
        first = " ".join(argv[:3]) or "(no command)"
        raise AdoptError(
            f"container {shown} does not run SGLang (its command starts `{first}`, not "
            "`python3 -m sglang.launch_server`); only SGLang services can be adopted"
        )
    return command


def _profile_name(profile_name: str) -> str:
    if not _PROFILE_NAME.fullmatch(profile_name) or len(profile_name) > 63:
        raise AdoptError(
            f"--name {profile_name!r}: profile names are lower-case letters, digits, '.', '_', '-' (63 at most)"
        )
    return profile_name


def _check_entrypoint(
    command: EngineCommand, config: Mapping[str, Any], image_config: Mapping[str, Any], shown: str, draft: Draft
) -> None:
    """Refuse an SGLang entry point inside ENTRYPOINT; note an entrypoint override that is not kept."""
    entry_end = len(command.prefix) + 3
    if entry_end <= len(config.get("Entrypoint") or ()):
        raise AdoptError(
            f"container {shown}: the SGLang entry point is part of its ENTRYPOINT; servectl passes the entry "
            "point in the command, so recreate the container with the entry point in the command first"
        )
    if command.prefix and list(command.prefix) != list(image_config.get("Entrypoint") or command.prefix):
        draft.notes.append(f"the entrypoint override {' '.join(command.prefix)} is not kept (the image's own runs)")


def _adopted(container: str, container_id: str, compose: tuple[str, str] | None) -> dict[str, Any]:
    """The profile's ``adopted`` section: which container (and compose service) it reproduces."""
    adopted: dict[str, Any] = {"container": container}
    if re.fullmatch(r"[0-9a-f]{12,64}", container_id):
        adopted["container_id"] = container_id
    if compose is not None:
        adopted["compose_file"], adopted["compose_service"] = compose
    return adopted


def _model(
    settings: dict[str, Any], data: Mapping[str, Any], shown: str, draft: Draft
) -> tuple[dict[str, Any], list[tuple[str, str, bool]]]:
    """The ``model`` section (from ``--model-path`` and the mount holding it) and the other mounts."""
    model_path = settings.pop("model_path", None)
    if not isinstance(model_path, str) or not model_path:
        raise AdoptError(f"container {shown}: the engine argv has no --model-path; SGLang cannot have started")
    model, rest = model_section(model_path, container_mounts(data), shown, draft)
    served = settings.pop("served_model_name", None)
    model["served_name"] = served if isinstance(served, str) else model_path
    draft.source("model.served_name", "argv --served-model-name" if served else "argv --model-path (SGLang's default)")
    return model, rest


__all__ = ["adopt_container"]
