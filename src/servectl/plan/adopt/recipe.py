"""Registry recipe -> profile: a ``local-ai-registry/v1`` recipe's docker launch, checked against the engine. Pure.

A registry recipe (0xSero/local-ai-registry, ``registry/recipe/*.json``) records how a model was served: the
image, the engine's argv (``launch.arguments``, a "mechanical split of the source command" the registry says
is *unverified against the engine CLI*), environment, mounts and the serving facts it was measured with. This
module reads the fields that matter (:class:`Recipe`, pydantic), writes the launch as the compose service
``docker compose`` would run (:func:`recipe_service`), and hands it to the one adoption path
(:func:`~servectl.plan.adopt.compose.compose_service_inspect` ->
:func:`~servectl.plan.adopt.container.adopt_container`): the flag mapping, GPU request and mounts are read
exactly as for a hand-started container. What the recipe gets wrong is named one line each
(:attr:`Adoption.problems`): a flag the engine's parser does not know (with "did you mean"), a value it
rejects, an image without a digest pin, a model without a revision, a serving fact the argv contradicts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servectl.plan.adopt.compose import compose_service_inspect
from servectl.plan.adopt.container import adopt_container
from servectl.plan.adopt.draft import AdoptError, Adoption, profile_name_for
from servectl.plan.container_match import FlagUse, parse_size, scan_engine_args
from servectl.profile.catalog import DEFAULT_CATALOG, ArgvError, FlagCatalog
from servectl.profile.container_risks import UNCARRIED, container_risks

#: The registry's record format this reader understands.
RECIPE_SCHEMA = "local-ai-registry/v1"
#: The command a recipe's ``launch.arguments`` follow (the registry records engine flags only).
SGLANG_ENTRY = ("python3", "-m", "sglang.launch_server")
_SERVICE = "recipe"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_HF_URL = re.compile(r"^https?://huggingface\.co/([\w.-]+/[\w.-]+?)/?$")
_HF_REPO = re.compile(r"^[\w.-]+/[\w.-]+$")
_VAR = re.compile(r"\$\{(\w+)\}")
#: More accelerators than any one host has: a larger count is a mistake (or an attack on the GPU request).
MAX_HARDWARE_COUNT = 1024


class _Part(BaseModel):
    """Recipe sections keep what servectl does not read (metadata, facts, ...): ignored, not refused."""

    model_config = ConfigDict(extra="ignore")


class RecipeMount(_Part):
    source: str = Field(min_length=1)
    target: str = Field(pattern=r"^/")
    read_only: bool = False


class RecipeContainer(_Part):
    image: str | None = None
    digest: str | None = None
    state: str | None = None
    reason: str | None = None


class RecipeLaunch(_Part):
    kind: str
    image: str | None = None
    accelerator_backend: str | None = None
    arguments: list[str] = Field(default_factory=list)
    environment: dict[str, str] = Field(default_factory=dict)
    mounts: list[RecipeMount] = Field(default_factory=list)
    ipc: Literal["host", "private", "shareable"] | None = None
    shm_size: str | None = Field(default=None, pattern=r"^\d{1,18}[bkmgBKMG]?$")
    network_mode: str | None = None
    container_port: int | None = Field(default=None, ge=1, le=65535)
    host_port: int | None = Field(default=None, ge=1, le=65535)
    container: RecipeContainer | None = None
    # settings a profile cannot carry (UNCARRIED): read only to refuse a recipe that sets one, never dropped
    privileged: Any = None
    cap_add: Any = None
    devices: Any = None
    security_opt: Any = None
    pid: Any = None
    userns: Any = None
    user: Any = None


class RecipeEngine(_Part):
    name: str
    version: str | None = None


class RecipeServing(_Part):
    tensor_parallel: int | None = None
    expert_parallel: int | None = None
    kv_cache_dtype: str | None = None
    max_context_tokens: int | None = None
    max_concurrency: int | None = None


class RecipeSource(_Part):
    kind: str | None = None
    url: str | None = None


class RecipeProvenance(_Part):
    sources: list[RecipeSource] = Field(default_factory=list)


class Recipe(_Part):
    """The fields of a ``local-ai-registry/v1`` recipe that a profile is made of."""

    schema_version: Literal["local-ai-registry/v1"]
    id: str = Field(min_length=1)
    status: str | None = None
    description: str = ""
    model_instance_id: str | None = None
    hardware_id: str | None = None
    hardware_count: int = Field(default=0, ge=0, le=MAX_HARDWARE_COUNT)
    engine: RecipeEngine
    serving: RecipeServing = Field(default_factory=RecipeServing)
    launch: RecipeLaunch
    provenance: RecipeProvenance = Field(default_factory=RecipeProvenance)


def read_recipe(data: Any, *, file: str) -> Recipe:
    """The recipe in ``data`` (the parsed JSON of ``file``), or one line saying what is wrong and where.

    Raises:
        AdoptError: not a ``local-ai-registry/v1`` recipe, not an SGLang docker launch - nothing is written.
    """
    if not isinstance(data, Mapping):
        raise AdoptError(f"{file}: a recipe is a JSON object, not {type(data).__name__}")
    if data.get("schema_version") != RECIPE_SCHEMA:
        raise AdoptError(
            f"{file}: /schema_version: {data.get('schema_version')!r} is not {RECIPE_SCHEMA!r}; "
            "servectl reads local-ai-registry/v1 recipe records (registry/recipe/*.json)"
        )
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        pointer = "/" + "/".join(str(p) for p in first["loc"])
        more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
        raise AdoptError(f"{file}: {pointer}: {first['msg'].lower()}{more}; fix the recipe") from None
    if recipe.engine.name.lower() != "sglang":
        raise AdoptError(f"{file}: /engine/name: {recipe.engine.name!r}; servectl serves SGLang recipes only")
    if recipe.launch.kind != "docker":
        hint = " (adopt its compose file with --compose FILE SERVICE)" if recipe.launch.kind == "docker-compose" else ""
        raise AdoptError(f"{file}: /launch/kind: {recipe.launch.kind!r} is not a docker launch{hint}")
    if not (recipe.launch.image or (recipe.launch.container and recipe.launch.container.image)):
        raise AdoptError(f"{file}: /launch/image: the recipe names no image; add the image it was run with")
    if not recipe.launch.arguments:
        raise AdoptError(f"{file}: /launch/arguments: no engine argv; the recipe does not say how SGLang ran")
    for key, why in UNCARRIED.items():
        if getattr(recipe.launch, key) not in (None, False, "", [], {}):
            raise AdoptError(
                f"{file}: /launch/{key} is set, and {why}; a profile cannot carry it and servectl never runs it: "
                "remove it from the recipe if the engine runs without it (nothing is written)"
            )
    return recipe


def recipe_service(recipe: Recipe) -> dict[str, Any]:
    """The recipe's launch as a compose service (``docker compose config`` form). Pure."""
    launch = recipe.launch
    image = launch.image or (launch.container.image if launch.container else None) or ""
    digest = launch.container.digest if launch.container else None
    if digest and "@" not in image:
        image = f"{image}@{digest}"
    service: dict[str, Any] = {
        "image": image,
        "command": [*SGLANG_ENTRY, *launch.arguments],
        "environment": dict(launch.environment),
        "volumes": [
            {"type": "bind", "source": m.source, "target": m.target, "read_only": m.read_only} for m in launch.mounts
        ],
    }
    if launch.ipc:
        service["ipc"] = launch.ipc
    if launch.shm_size:
        service["shm_size"] = parse_size(launch.shm_size)
    service["network_mode"] = launch.network_mode or "bridge"
    if launch.container_port and launch.network_mode != "host":
        service["ports"] = [{"target": launch.container_port, "published": launch.host_port or launch.container_port}]
    if recipe.hardware_count and (launch.accelerator_backend or "nvidia") == "nvidia":
        device = {"driver": "nvidia", "count": recipe.hardware_count, "capabilities": ["gpu"]}
        service["deploy"] = {"resources": {"reservations": {"devices": [device]}}}
    return service


def adopt_recipe(
    recipe: Recipe,
    *,
    file: str,
    image: Mapping[str, Any] | None = None,
    name: str | None = None,
    catalog: str = DEFAULT_CATALOG,
    image_verdict: tuple[bool, str] | None = None,
) -> Adoption:
    """Translate a registry recipe into a profile, with every problem of the recipe named (one line each). Pure.

    Args:
        recipe: the recipe (:func:`read_recipe`).
        file: how the recipe file is named in messages.
        image: ``docker image inspect`` of its image when it is on this host (entrypoint, repo digest).
        name: the profile name (default: the recipe id).
        catalog: the flag catalog the argv is checked against.
        image_verdict: (accepted, detail) of the image's own SGLang parser on the argv (detail: its version, or
            its error); it overrides the catalog's verdict on flags and values. None: the image was not asked.

    Raises:
        AdoptError: the recipe cannot become a profile (its model is not mounted from the host, a flag cannot
            be written in a profile) - one line.
    """
    where = f"registry recipe {recipe.id} ({file})"
    _check_model_mounted(recipe, file)
    data = recipe_inspect(recipe, image=image)
    profile_name = name or profile_name_for(recipe.id)
    adoption = adopt_container(data, image=image, name=profile_name, catalog=catalog, origin=where)
    profile = dict(adoption.data)
    profile.pop("adopted", None)  # no container to recognise: the recipe is how to start one
    profile["description"] = f"from {where}" + (f", registry status {recipe.status}" if recipe.status else "")
    repo = _model_repo(recipe)
    if repo and "repo" not in profile["model"]:
        profile["model"] = {**profile["model"], "repo": repo}
    cat = FlagCatalog.load(catalog)
    uses, _ = scan_engine_args(recipe.launch.arguments, cat)
    exports = [*adoption.exports, *_variables(recipe)]
    notes = [n for n in adoption.notes if "image.digest is left unset" not in n]
    problems = _flag_problems(recipe.launch.arguments, uses, cat, file)
    ref = str(data["Config"]["Image"])
    if image_verdict is not None and image_verdict[0]:
        notes.append(f"image {ref}'s own SGLang {image_verdict[1]} parses the argv (it decides over the catalog)")
        problems = []
    elif image_verdict is not None:
        problems.append(f"{file}: /launch/arguments: image {ref}'s own SGLang rejects the argv: {image_verdict[1]}")
    return replace(
        adoption,
        data=profile,
        sources=_sources(recipe, profile),
        notes=tuple(notes),
        exports=tuple(dict.fromkeys(exports)),
        problems=(*problems, *_problems(recipe, profile, uses, cat, file)),
    )


def recipe_inspect(recipe: Recipe, *, image: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``docker inspect`` document of the container the recipe's launch would create (unnamed). Pure."""
    data = compose_service_inspect({"name": "", "services": {_SERVICE: recipe_service(recipe)}}, _SERVICE, image=image)
    data["Name"] = ""
    return data


def _check_model_mounted(recipe: Recipe, file: str) -> None:
    """Refuse a model the engine downloads by name: servectl mounts models from host folders."""
    args = recipe.launch.arguments
    at = _flag_index(args, "--model-path")
    if at is None or at + 1 >= len(args):
        raise AdoptError(f"{file}: /launch/arguments: no --model-path; SGLang cannot start without a model")
    path = args[at + 1]
    mounted = any(path == m.target or path.startswith(m.target.rstrip("/") + "/") for m in recipe.launch.mounts)
    if mounted:
        return
    if _HF_REPO.fullmatch(path):
        raise AdoptError(
            f"{file}: /launch/arguments/{at + 1}: --model-path {path} is a tag-only model (a Hugging Face name, no "
            f"revision, downloaded at start); download a pinned snapshot (huggingface-cli download {path} --revision "
            "SHA --local-dir DIR), mount DIR at /model in /launch/mounts and pass --model-path /model"
        )
    raise AdoptError(
        f"{file}: /launch/arguments/{at + 1}: --model-path {path} is in no folder of /launch/mounts; add the mount "
        "that holds the model"
    )


def _problems(
    recipe: Recipe, profile: Mapping[str, Any], uses: Sequence[FlagUse], cat: FlagCatalog, file: str
) -> list[str]:
    problems = _image_problems(recipe, profile, file)
    model = profile["model"]
    if not model.get("revision"):
        at = next((i for i, m in enumerate(recipe.launch.mounts) if m.source == model.get("path")), None)
        pointer = f"/launch/mounts/{at}" if at is not None else "/launch/mounts"
        named = f" ({model['repo']})" if model.get("repo") else ""
        problems.append(
            f"{file}: {pointer}: the model {model['path']}{named} is named by tag only, with no revision, so the "
            "weights behind the name can change; pin it: set model.revision to the commit the weights were "
            "downloaded at (huggingface-cli download REPO --revision SHA)"
        )
    problems += _serving_problems(recipe, uses, cat, file)
    return problems + _risk_problems(recipe, file)


def _risk_problems(recipe: Recipe, file: str) -> list[str]:
    """The recipe's dangerous container settings, carried into the profile, each with its problem line."""
    launch = recipe.launch
    pointers = {("serve", "network"): "/launch/network_mode", ("container", "ipc"): "/launch/ipc"}
    risks = container_risks(
        network=launch.network_mode,
        ipc=launch.ipc,
        mounts=[(m.source, m.target, m.read_only) for m in launch.mounts],
        env=launch.environment,
    )
    problems = []
    for risk in risks:
        if risk.path[:2] == ("container", "mounts"):
            pointer = f"/launch/mounts/{risk.path[2]}"
        elif risk.path[:2] == ("engine", "env"):
            pointer = f"/launch/environment/{risk.path[2]}"
        else:
            pointer = pointers[(str(risk.path[0]), str(risk.path[1]))]
        kind = "refused by servectl validate" if risk.error else "carried into the profile"
        problems.append(f"{file}: {pointer}: {risk.message} ({kind})")
    return problems


def _flag_problems(args: Sequence[str], uses: Sequence[FlagUse], cat: FlagCatalog, file: str) -> list[str]:
    """Unknown flags (with close matches) and values the catalog's parser rejects, one line each."""
    problems: list[str] = []
    engine = f"SGLang {cat.version} ({cat.name})"
    for use in uses:
        at = _flag_index(args, use.flag)
        pointer = f"/launch/arguments/{at}" if at is not None else "/launch/arguments"
        if use.option is None:
            near = cat.close_matches(use.flag)
            hint = f"did you mean {' or '.join('--' + n for n in near)}? " if near else ""
            problems.append(
                f"{file}: {pointer}: {use.flag} is no flag of {engine}; {hint}remove it, or check it with the "
                "image's own parser (servectl catalog extract IMAGE) and keep it in engine.catalog_extend"
            )
            continue
        for raw in use.values:
            try:
                cat.convert(use.option, raw)
            except ArgvError as err:
                choices = use.option.choices or ()
                near = [c for c in choices if c.lower() == raw.lower()] or _close(raw, choices)
                hint = f"did you mean {' or '.join(near)}? " if near else ""
                problems.append(
                    f"{file}: {pointer}: {use.flag} {raw}: {engine} rejects it ({_short(str(err))}); {hint}check "
                    "the image's own parser (servectl catalog extract IMAGE); it is declared in "
                    "engine.catalog_extend meanwhile"
                )
    return problems


def _image_problems(recipe: Recipe, profile: Mapping[str, Any], file: str) -> list[str]:
    launch = recipe.launch
    digest = launch.container.digest if launch.container else None
    ref = profile["image"]["ref"]
    if digest and not _DIGEST.fullmatch(digest):
        return [f"{file}: /launch/container/digest: {digest!r} is not a digest (sha256: and 64 hex digits)"]
    if profile["image"].get("digest"):
        return []
    pointer = "/launch/container/digest" if launch.container is not None else "/launch/image"
    why = f" ({launch.container.reason})" if launch.container and launch.container.reason else ""
    return [
        f"{file}: {pointer}: image {ref} has no digest pin{why}, so the tag can be moved to other bits; pin it: "
        f"docker pull {ref} (or build it), then set image.digest to its repo digest (docker inspect --format "
        "'{{index .RepoDigests 0}}' " + ref + ")"
    ]


def _serving_problems(recipe: Recipe, uses: Sequence[FlagUse], cat: FlagCatalog, file: str) -> list[str]:
    """Serving facts the recipe was measured with that its own argv contradicts."""
    given: dict[str, str] = {u.option.dest: u.values[0] for u in uses if u.option is not None and u.values}
    serving = recipe.serving
    facts: list[tuple[str, object, str]] = [
        ("tensor_parallel", serving.tensor_parallel, "tp_size"),
        ("expert_parallel", serving.expert_parallel, "ep_size"),
        ("kv_cache_dtype", serving.kv_cache_dtype, "kv_cache_dtype"),
        ("max_context_tokens", serving.max_context_tokens, "context_length"),
    ]
    problems: list[str] = []
    for fact, value, dest in facts:
        if value is None:
            continue
        opt = cat.option(dest)
        flag = opt.primary_flag if opt is not None else "--" + dest.replace("_", "-")
        written = given.get(dest)
        default = opt.default if opt is not None else None
        if str(value) != str(written if written is not None else default):
            said = f"{flag} {written}" if written is not None else f"no {flag} (SGLang's default {default})"
            problems.append(
                f"{file}: /serving/{fact}: the recipe was measured with {value}, but its argv has {said}; "
                f"make them agree (add {flag} {value} to /launch/arguments, or correct the fact)"
            )
    cards = int(given.get("tp_size", 1)) * int(given.get("dp_size", 1)) if _ints(given, "tp_size", "dp_size") else 0
    if recipe.hardware_count and cards and recipe.hardware_count != cards:
        problems.append(
            f"{file}: /hardware_count: {recipe.hardware_count} GPUs, but the argv's tp x dp uses {cards}; "
            "gpus.devices follows hardware_count: make them agree"
        )
    return problems


def _ints(given: Mapping[str, str], *dests: str) -> bool:
    return all(given.get(d, "1").isdigit() for d in dests)


def _model_repo(recipe: Recipe) -> str | None:
    """The Hugging Face repository of the recipe's weights, from its ``artifact`` provenance source."""
    for source in recipe.provenance.sources:
        match = _HF_URL.match(source.url or "")
        if match and source.kind in (None, "artifact"):
            return match.group(1)
    return None


def _variables(recipe: Recipe) -> list[str]:
    """``${NAME}`` references in the recipe's mount sources: the user exports them before servectl starts it."""
    return [v for m in recipe.launch.mounts for v in _VAR.findall(m.source)]


def _sources(recipe: Recipe, profile: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """Where each profile value came from, as JSON pointers into the recipe."""
    launch = recipe.launch
    out = [("image.ref", "/launch/image" if launch.image else "/launch/container/image")]
    if profile["image"].get("digest"):
        out.append(("image.digest", "/launch/container/digest"))
    out.append(("image.entrypoint", "SGLang's entry point (the recipe lists engine flags only)"))
    model_at = next((i for i, m in enumerate(launch.mounts) if m.source == profile["model"]["path"]), None)
    out.append(("model.path", f"/launch/mounts/{model_at}" if model_at is not None else "/launch/arguments"))
    if profile["model"].get("repo"):
        out.append(("model.repo", "/provenance/sources (kind artifact)"))
    out.append(("model.served_name", "/launch/arguments --served-model-name"))
    out.append(("gpus.devices", "/hardware_count, /launch/accelerator_backend"))
    out.append(("serve.port", "/launch/arguments --port" + (", /launch/host_port" if launch.host_port else "")))
    out.append(("engine", "/launch/arguments"))
    if launch.environment:
        out.append(("engine.env", "/launch/environment"))
    out.append(("container", "/launch/ipc, /launch/shm_size, /launch/mounts (the rest: Docker's defaults)"))
    return tuple(out)


def _flag_index(args: Sequence[str], flag: str) -> int | None:
    """Where ``flag`` is first written in the argv (as ``--flag`` or ``--flag=value``)."""
    for i, token in enumerate(args):
        if token == flag or token.startswith(flag + "="):
            return i
    return None


def _close(raw: str, choices: Sequence[str]) -> list[str]:
    import difflib

    return difflib.get_close_matches(raw, list(choices), n=2, cutoff=0.75)


def _short(message: str) -> str:
    """An argparse message without its (long) list of choices."""
    return message.split(" (choose from", 1)[0]


__all__ = ["RECIPE_SCHEMA", "SGLANG_ENTRY", "Recipe", "adopt_recipe", "read_recipe", "recipe_inspect", "recipe_service"]
