"""Adoption: ``docker inspect`` of a container servectl did not start -> a profile that reproduces it. Pure.

Why it lives in ``plan/``: it is the compiler read backwards. It needs the flag catalog (``profile/``) to
read the engine's argv and the compiler's conventions (entry point, API-key wrapper, mounts, labels) to
write a profile that compiles back to the same container - and nothing of the runtime. The adapters hand
over plain ``docker inspect`` data (dicts); :mod:`servectl.service.adopt` reads Docker, checks the result
with the loader and the diff of :mod:`servectl.plan.container_match`, and writes the file.

What is translated, and from where (each value's source is kept for the file's comment header):

* image: ``Config.Image``, pinned by the repo digest of the image the container runs (said when none);
* engine: the argv after ``python -m sglang.launch_server``, parsed with the catalog into the typed keys
  (``tp``, ``context_length``, ``speculative``, ...) and ``args``; flags and choices the catalog lacks
  are kept and declared in ``catalog_extend``; ``--api-key`` becomes ``serve.api_key_env``;
* env: what the container sets beyond its image; secret-looking values become ``${NAME}`` references;
* the mount that holds ``--model-path`` becomes ``model`` (with repo and revision for a Hugging Face
  snapshot folder); other mounts, ports or host network, GPUs (device requests, CDI, device nodes,
  ``NVIDIA_VISIBLE_DEVICES``), IPC, shared memory, ulimits, name, restart policy, init, stop timeout, labels.

What cannot be carried over is said in :attr:`Adoption.notes`, never dropped silently.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from servectl.errors import UsageError
from servectl.plan.container_match import (
    DOCKER_DEFAULT_SHM_BYTES,
    DOCKER_DEFAULT_STOP_TIMEOUT_S,
    FlagUse,
    container_env,
    container_mounts,
    format_size,
    gpu_devices,
    looks_secret,
    own_label,
    scan_engine_args,
    split_engine_command,
)
from servectl.plan.labels import LABEL_MANAGED, LABEL_PROFILE
from servectl.profile.catalog import ArgvError, CatalogOption, FlagCatalog

DEFAULT_CATALOG = "sglang-0.5.23"
#: The variable an adopted ``--api-key`` is read from (the key itself is never written).
API_KEY_ENV = "SERVECTL_API_KEY"
#: SGLang's defaults for what the argv may leave out.
SGLANG_DEFAULT_HOST = "127.0.0.1"
SGLANG_DEFAULT_PORT = 30000

_HF_SNAPSHOT = re.compile(r"models--([\w.-]+?)--([\w.-]+)/snapshots/([0-9a-f]{40})(?:/|$)")
_ARGS_KEY = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_PROFILE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH")
#: dest -> (profile field, type) for the flags the profile has typed keys for.
_TYPED: dict[str, tuple[tuple[str, ...], type]] = {
    "tp_size": (("engine", "tp"), int),
    "dp_size": (("engine", "dp"), int),
    "context_length": (("engine", "context_length"), int),
    "max_total_tokens": (("engine", "max_total_tokens"), int),
    "max_running_requests": (("engine", "max_running_requests"), int),
    "mem_fraction_static": (("engine", "mem_fraction_static"), float),
    "kv_cache_dtype": (("engine", "kv_cache_dtype"), str),
    "quantization": (("engine", "quantization"), str),
    "speculative_num_steps": (("engine", "speculative", "num_steps"), int),
    "speculative_eagle_topk": (("engine", "speculative", "eagle_topk"), int),
    "speculative_num_draft_tokens": (("engine", "speculative", "num_draft_tokens"), int),
    "speculative_draft_model_path": (("engine", "speculative", "draft_model_path"), str),
}
#: HostConfig settings a profile cannot express: reported when set.
_UNSUPPORTED_HOST: tuple[tuple[str, str], ...] = (
    ("Privileged", "--privileged"),
    ("CapAdd", "--cap-add"),
    ("SecurityOpt", "--security-opt"),
    ("Sysctls", "--sysctl"),
    ("ExtraHosts", "--add-host"),
    ("Dns", "--dns"),
    ("Tmpfs", "--tmpfs"),
    ("PidMode", "--pid"),
    ("GroupAdd", "--group-add"),
    ("CpusetCpus", "--cpuset-cpus"),
    ("Memory", "--memory"),
    ("NanoCpus", "--cpus"),
)


class AdoptError(UsageError):
    """The container cannot be adopted (not SGLang, already servectl's, model not on the host, ...)."""


@dataclass(frozen=True)
class Adoption:
    """A profile that reproduces a container, with where each value came from and what needs the user.

    Attributes:
        name: the profile name.
        data: the profile, as it is written (keys in the order of the shipped profiles).
        sources: (profile field, where its value came from), for the file's comment header.
        notes: what could not be carried over exactly, or needs doing (one line each).
        exports: environment variables the user must export before servectl starts the profile.
        unknown_flags: engine flags the catalog does not know (kept in ``args`` and ``catalog_extend``).
    """

    name: str
    data: dict[str, Any]
    sources: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]
    exports: tuple[str, ...]
    unknown_flags: tuple[str, ...]
    container_name: str
    container_id: str
    origin: str = ""


@dataclass
class _Draft:
    """The profile being built, and what is said about it."""

    sources: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    exports: list[str] = field(default_factory=list)

    def source(self, path: str, where: str) -> None:
        self.sources.append((path, where))


def profile_name_for(container_name: str) -> str:
    """A valid profile name from a container name (lower case, other characters as ``-``)."""
    name = re.sub(r"[^a-z0-9._-]+", "-", container_name.lower()).lstrip("._-")[:63].rstrip("._-")
    return name or "adopted"


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
    # Long on purpose: the refusals, then one short step per profile section in file order, so the function
    # reads as the outline of the profile it writes; each section's detail lives in its own helper below.
    config: Mapping[str, Any] = data.get("Config") or {}
    host: Mapping[str, Any] = data.get("HostConfig") or {}
    container_name = str(data.get("Name") or "").lstrip("/")
    container_id = str(data.get("Id") or "")
    shown = container_name or container_id[:12]
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
    profile_name = name or profile_name_for(container_name)
    if not _PROFILE_NAME.fullmatch(profile_name) or len(profile_name) > 63:
        raise AdoptError(
            f"--name {profile_name!r}: profile names are lower-case letters, digits, '.', '_', '-' (63 at most)"
        )
    draft = _Draft()
    where = origin or f"container {shown}"
    image_config: Mapping[str, Any] = (image or {}).get("Config") or {}
    entry_end = len(command.prefix) + 3
    if entry_end <= len(config.get("Entrypoint") or ()):
        raise AdoptError(
            f"container {shown}: the SGLang entry point is part of its ENTRYPOINT; servectl passes the entry "
            "point in the command, so recreate the container with the entry point in the command first"
        )
    if command.prefix and list(command.prefix) != list(image_config.get("Entrypoint") or command.prefix):
        draft.notes.append(f"the entrypoint override {' '.join(command.prefix)} is not kept (the image's own runs)")

    cat = FlagCatalog.load(catalog)
    uses, stray = scan_engine_args(command.args, cat)
    if stray:
        raise AdoptError(f"container {shown}: engine argv has values that belong to no flag: {' '.join(stray[:3])}")
    settings, args, extension, unknown = _read_flags(uses, cat, draft)

    profile: dict[str, Any] = {
        "name": profile_name,
        "description": f"adopted from {where}",
        "status": "candidate",
    }
    adopted: dict[str, Any] = {"container": container_name or shown}
    if re.fullmatch(r"[0-9a-f]{12,64}", container_id):
        adopted["container_id"] = container_id
    if compose is not None:
        adopted["compose_file"], adopted["compose_service"] = compose
    profile["adopted"] = adopted
    profile["image"] = _image(config, image, draft)
    profile["image"]["entrypoint"] = list(command.entrypoint)
    draft.source("image.entrypoint", f"{where} command")

    model_path = settings.pop("model_path", None)
    if not isinstance(model_path, str) or not model_path:
        raise AdoptError(f"container {shown}: the engine argv has no --model-path; SGLang cannot have started")
    mounts = container_mounts(data)
    model, rest = _model(model_path, mounts, shown, draft)
    served = settings.pop("served_model_name", None)
    model["served_name"] = served if isinstance(served, str) else model_path
    draft.source("model.served_name", "argv --served-model-name" if served else "argv --model-path (SGLang's default)")
    profile["model"] = model

    engine: dict[str, Any] = {"catalog": catalog}
    if extension["choices"] or extension["options"]:
        engine["catalog_extend"] = {k: v for k, v in extension.items() if v}
    tp = int(settings.get("tp_size", 1))
    dp = int(settings.get("dp_size", 1))
    profile["gpus"] = _gpus(data, tp * dp, draft)
    profile["serve"] = _serve(host, settings, draft)
    _typed_engine(engine, settings, args)
    env = _env(data, image, draft, via_runtime=_gpu_via(data) == "nvidia-runtime")
    if env:
        engine["env"] = env
    if args:
        engine["args"] = args
    profile["engine"] = engine
    draft.source("engine", f"{where} argv after {' '.join(command.entrypoint)}")
    profile["container"] = _container(data, container_name, rest, image_config, draft)
    _unsupported(host, data, draft)
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


# -- pieces ---------------------------------------------------------------------------------------------------
def _read_flags(
    uses: Sequence[FlagUse], cat: FlagCatalog, draft: _Draft
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], list[str]]:
    """(typed settings by dest, ``args``, catalog extension, unknown flags) of the engine's flags."""
    settings: dict[str, Any] = {}
    args: dict[str, Any] = {}
    choices: dict[str, list[str]] = {}
    options: list[dict[str, Any]] = []
    unknown: list[str] = []
    for use in uses:
        opt = use.option
        if opt is None:
            key = use.flag[2:]
            if not _ARGS_KEY.match(key):
                raise AdoptError(f"engine flag {use.flag} cannot be written in a profile (flags are lower-case words)")
            unknown.append(use.flag)
            new: dict[str, Any] = {"flags": [use.flag], "kind": "switch" if not use.values else "value"}
            if len(use.values) > 1:
                new["nargs"] = "+"
            if new not in options:
                options.append(new)
            args[key] = True if not use.values else (use.values[0] if len(use.values) == 1 else list(use.values))
            continue
        if opt.dest == "api_key":
            settings["api_key"] = True
            continue
        if not opt.takes_value:
            on = use.flag != "--no-" + opt.flags[0][2:]
            args[opt.primary_flag[2:]] = on if opt.kind == "bool-optional" else True
            continue
        values: list[Any] = []
        for raw in use.values:
            try:
                cat.convert(opt, raw)
            except ArgvError as err:
                if opt.choices is not None and "invalid choice" in str(err):
                    extra = choices.setdefault(opt.primary_flag[2:], [])
                    if raw not in extra:
                        extra.append(raw)
                else:
                    draft.notes.append(f"{use.flag} {raw!r}: {err} (kept as written)")
            values.append(_yaml_value(opt, raw))
        value: Any = (values[0] if values else True) if opt.nargs in (None, "?") else values
        if opt.dest in ("model_path", "served_model_name", "host", "port", "speculative_algorithm", *_TYPED):
            settings[opt.dest] = value
        else:
            args[opt.primary_flag[2:]] = value
    if unknown:
        draft.notes.append(
            f"flags the {cat.name} catalog does not know, kept in engine.args and declared in "
            f"engine.catalog_extend: {', '.join(dict.fromkeys(unknown))}"
        )
    if choices:
        spelled = ", ".join(f"--{k} {' '.join(v)}" for k, v in choices.items())
        draft.notes.append(
            f"values the {cat.name} catalog does not accept, declared in engine.catalog_extend: {spelled}"
        )
    return settings, args, {"choices": choices, "options": options}, unknown


def _yaml_value(opt: CatalogOption, raw: str) -> Any:
    """A flag value as it reads best in YAML and compiles back to the same token."""
    if opt.type in ("int", "human_readable_int") and re.fullmatch(r"-?\d+", raw):
        return int(raw)
    if opt.type == "float" and re.fullmatch(r"-?\d+\.\d+", raw) and repr(float(raw)) == raw:
        return float(raw)
    return raw


def _typed_engine(engine: dict[str, Any], settings: dict[str, Any], args: dict[str, Any]) -> None:
    """Typed engine keys where the value fits the profile's type; ``args`` otherwise."""
    algorithm = settings.get("speculative_algorithm")
    speculative_ok = isinstance(algorithm, str) and algorithm in _SPECULATIVE_ALGORITHMS
    if speculative_ok:
        engine["speculative"] = {"algorithm": algorithm}
    elif algorithm is not None:
        args["speculative-algorithm"] = algorithm
    for dest, (path, kind) in _TYPED.items():
        if dest not in settings:
            continue
        value = settings[dest]
        fits = _fits(value, kind)
        if path[1] == "speculative" and not speculative_ok:
            fits = False
        if not fits:
            args[dest.replace("_", "-")] = value
            continue
        value = kind(value)
        if path[1] == "speculative":
            engine["speculative"][path[2]] = value
        elif not (path[1] == "dp" and value == 1):
            engine[path[1]] = value


def _fits(value: Any, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 1
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and 0 < float(value) <= 1
    return isinstance(value, str)


def _image(config: Mapping[str, Any], image: Mapping[str, Any] | None, draft: _Draft) -> dict[str, Any]:
    ref = str(config.get("Image") or "")
    digest: str | None = None
    if "@" in ref:
        ref, digest = ref.split("@", 1)
        draft.source("image.digest", "the container's image reference")
    tags = [str(t) for t in (image or {}).get("RepoTags") or ()]
    if not ref or ref.startswith("sha256:") or re.fullmatch(r"[0-9a-f]{12,64}", ref):
        if not tags:
            raise AdoptError(f"the container's image {ref or '(none)'} has no name; tag it (docker tag ID NAME:TAG)")
        draft.notes.append(f"the container was started from image id {ref}; written as its tag {tags[0]}")
        ref = tags[0]
    draft.source("image.ref", "Config.Image")
    repository = ref.rsplit(":", 1)[0] if ":" in ref.rsplit("/", 1)[-1] else ref
    if digest is None and image is not None:
        repo_digests = [str(d) for d in image.get("RepoDigests") or ()]
        same_repo = [d for d in repo_digests if d.split("@", 1)[0] == repository]
        chosen = next(iter(same_repo or repo_digests), None)
        if chosen is not None:
            digest = chosen.split("@", 1)[1]
            draft.source("image.digest", f"repo digest of the image it runs ({image.get('Id', '?')})")
        else:
            image_id = str(image.get("Id") or "?")
            draft.notes.append(
                f"image {ref} has no repo digest (built or loaded on this host, never pulled): image.digest is "
                f"left unset; the container runs local image {image_id[:19]}"
            )
        ref_tag = ref if ":" in ref.rsplit("/", 1)[-1] else ref + ":latest"
        if tags and ref_tag not in tags:
            draft.notes.append(f"tag {ref} no longer points at the image the container runs; the digest pins that one")
    elif digest is None:
        draft.notes.append(f"image {ref} is not on this host: image.digest is left unset")
    out: dict[str, Any] = {"ref": ref}
    if digest:
        out["digest"] = digest
    return out


def _model(
    model_path: str, mounts: Sequence[tuple[str, str, bool]], shown: str, draft: _Draft
) -> tuple[dict[str, Any], list[tuple[str, str, bool]]]:
    """``model`` from the mount that holds ``--model-path``, and the other mounts."""
    holders = [m for m in mounts if model_path == m[1] or model_path.startswith(m[1].rstrip("/") + "/")]
    if not holders:
        raise AdoptError(
            f"container {shown}: --model-path {model_path} is not inside a folder mounted from the host; servectl "
            "mounts the model from a host folder (adopting a model baked into the image or downloaded by "
            "name is not supported)"
        )
    source, target, read_only = max(holders, key=lambda m: len(m[1]))
    model: dict[str, Any] = {}
    rest = [m for m in mounts if m != (source, target, read_only)]
    if model_path == target:
        model["path"] = source
        model["container_path"] = target
        draft.source("model.path", f"mount {source} -> {target} (argv --model-path {model_path})")
    else:
        model["path"] = source.rstrip("/") + model_path[len(target.rstrip("/")) :]
        model["container_path"] = model_path
        rest.append((source, target, read_only))
        draft.source("model.path", f"argv --model-path {model_path}, inside mount {source} -> {target}")
    snapshot = _HF_SNAPSHOT.search(model["path"]) or _HF_SNAPSHOT.search(model_path)
    if snapshot:
        owner, repo, revision = snapshot.groups()
        model["repo"] = f"{owner}/{repo}"
        model["revision"] = revision
        draft.source("model.revision", "the Hugging Face snapshot folder name")
    if not read_only:
        model["read_only"] = False
    return model, rest


def _gpu_via(data: Mapping[str, Any]) -> str | None:
    return gpu_devices(data)[1]


def _gpus(data: Mapping[str, Any], cards: int, draft: _Draft) -> dict[str, Any]:
    devices, via = gpu_devices(data)
    if via is None:
        if cards > 1:
            draft.notes.append(f"the container asks for no GPU but tp x dp = {cards}; set gpus.devices")
        return {"devices": []}
    if all(d.isdigit() for d in devices):
        indices = [int(d) for d in devices]
        draft.source("gpus.devices", _GPU_SOURCES[via])
    else:
        indices = list(range(cards))
        draft.notes.append(
            f"GPUs {','.join(devices)} ({_GPU_SOURCES[via]}) are not card indices; gpus.devices is set to "
            f"the first {cards} cards: check it"
        )
    if via != "device-request":
        draft.notes.append(f"GPUs were given by {_GPU_SOURCES[via]}; servectl requests them as --gpus device=...")
    draft.notes.append(
        "gpus.vram_reserve_mib is servectl's default (3072 MiB free per card once it runs): "
        "`servectl rollback-check` shows whether preflight would let this profile start"
    )
    return {"devices": indices}


_GPU_SOURCES = {
    "device-request": "HostConfig.DeviceRequests (--gpus)",
    "cdi": "CDI devices (nvidia.com/gpu=...)",
    "device-node": "/dev/nvidia* device nodes",
    "nvidia-runtime": "NVIDIA_VISIBLE_DEVICES with the nvidia runtime",
}


def _serve(host: Mapping[str, Any], settings: Mapping[str, Any], draft: _Draft) -> dict[str, Any]:
    network = str(host.get("NetworkMode") or "bridge")
    engine_host = str(settings.get("host") or SGLANG_DEFAULT_HOST)
    port = int(settings.get("port") or SGLANG_DEFAULT_PORT)
    port_from = "argv --port" if "port" in settings else "SGLang's default port"
    serve: dict[str, Any]
    if network == "host":
        serve = {"host": engine_host, "port": port}
        draft.source("serve.network", "HostConfig.NetworkMode host")
        draft.source("serve.port", port_from)
        draft.source("serve.host", "argv --host" if "host" in settings else "SGLang's default host")
    else:
        bindings = (host.get("PortBindings") or {}).get(f"{port}/tcp") or []
        if bindings:
            bind = bindings[0]
            publish_ip = str(bind.get("HostIp") or "") or "0.0.0.0"
            host_port = int(str(bind.get("HostPort") or port) or port)
            if host_port != port:
                draft.notes.append(
                    f"the engine's port {port} was published as {host_port}; servectl publishes one port on both "
                    f"sides: serve.port is {host_port} (what clients use)"
                )
            serve = {"host": publish_ip, "port": host_port}
            draft.source("serve.host", f"HostConfig.PortBindings {port}/tcp")
            draft.source("serve.port", f"HostConfig.PortBindings {port}/tcp ({port_from} {port})")
        else:
            serve = {"host": "127.0.0.1", "port": port}
            draft.notes.append(f"the engine's port {port} was not published; servectl publishes it on 127.0.0.1")
            draft.source("serve.port", port_from)
        if engine_host not in ("0.0.0.0", "::"):
            draft.notes.append(f"--host {engine_host} in a bridge network: servectl binds 0.0.0.0 inside the container")
        if network not in ("bridge", "default"):
            draft.notes.append(
                f"network {network}: servectl runs it on the default bridge network (same published port)"
            )
        others = sorted(k for k in (host.get("PortBindings") or {}) if k != f"{port}/tcp")
        if others:
            draft.notes.append(f"other published ports are left out: {', '.join(others)}")
    serve["role"] = "production"
    serve["production_ports"] = [serve["port"]]
    if network == "host":
        serve["network"] = "host"
    draft.source("serve.role", "an adopted service already serves clients; change to bench if it does not")
    if settings.get("api_key"):
        serve["api_key_env"] = API_KEY_ENV
        draft.exports.append(API_KEY_ENV)
        draft.notes.append(
            f"the API key (--api-key) is not written: export {API_KEY_ENV} with the key the container uses"
        )
        draft.source("serve.api_key_env", "argv --api-key (the key itself is never written)")
    return serve


def _env(
    data: Mapping[str, Any], image: Mapping[str, Any] | None, draft: _Draft, *, via_runtime: bool
) -> dict[str, str]:
    env = container_env(data, image)
    if via_runtime:
        env.pop("NVIDIA_VISIBLE_DEVICES", None)
    out: dict[str, str] = {}
    for name, value in sorted(env.items()):
        if looks_secret(name, value):
            out[name] = "${" + name + "}"
            draft.exports.append(name)
            draft.notes.append(
                f"{name} looks like a secret and is not written: export {name} before servectl starts it"
            )
        else:
            out[name] = value
    if out:
        draft.source("engine.env", "Config.Env less the image's own" if image is not None else "Config.Env")
    return out


def _container(
    data: Mapping[str, Any],
    name: str,
    mounts: Sequence[tuple[str, str, bool]],
    image_config: Mapping[str, Any],
    draft: _Draft,
) -> dict[str, Any]:
    host: Mapping[str, Any] = data.get("HostConfig") or {}
    config: Mapping[str, Any] = data.get("Config") or {}
    out: dict[str, Any] = {}
    if name:
        out["name"] = name
        draft.source("container.name", "the container's name")
    ipc = str(host.get("IpcMode") or "private")
    if ipc in ("host", "shareable"):
        out["ipc"] = ipc
    elif ipc != "private":
        draft.notes.append(f"--ipc {ipc} is left out (a profile sets host, private or shareable)")
    shm = int(host.get("ShmSize") or DOCKER_DEFAULT_SHM_BYTES)
    if ipc != "host" and shm != DOCKER_DEFAULT_SHM_BYTES:
        out["shm_size"] = format_size(shm)
    draft.source("container.ipc/shm_size", "HostConfig.IpcMode, HostConfig.ShmSize")
    if mounts:
        out["mounts"] = []
        for source, target, read_only in sorted(mounts, key=lambda m: m[1]):
            mount: dict[str, Any] = {"source": source, "target": target}
            if read_only:
                mount["read_only"] = True
            out["mounts"].append(mount)
        draft.source("container.mounts", "Mounts (bind mounts and named volumes by their host folder)")
    stop = config.get("StopTimeout")
    out["stop_grace_s"] = DOCKER_DEFAULT_STOP_TIMEOUT_S if stop is None else int(stop)
    draft.source("container.stop_grace_s", "Config.StopTimeout" if stop is not None else "Docker's default (10 s)")
    image_labels = image_config.get("Labels") or {}
    labels = {
        str(k): str(v)
        for k, v in (config.get("Labels") or {}).items()
        if own_label(str(k)) and image_labels.get(k) != v
    }
    if labels:
        out["labels"] = dict(sorted(labels.items()))
    out["ulimits"] = {
        str(u["Name"]): int(u["Soft"]) if u["Soft"] == u["Hard"] else [int(u["Soft"]), int(u["Hard"])]
        for u in host.get("Ulimits") or ()
    }
    draft.source("container.ulimits", "HostConfig.Ulimits")
    policy = host.get("RestartPolicy") or {}
    restart = str(policy.get("Name") or "no")
    if restart not in ("", "no"):
        retries = int(policy.get("MaximumRetryCount") or 0)
        out["restart"] = f"{restart}:{retries}" if restart == "on-failure" and retries else restart
        draft.source("container.restart", "HostConfig.RestartPolicy")
    if not host.get("Init"):
        out["init"] = False
    return out


def _unsupported(host: Mapping[str, Any], data: Mapping[str, Any], draft: _Draft) -> None:
    for key, flag in _UNSUPPORTED_HOST:
        value = host.get(key)
        if value and value not in ("", "host" if key == "PidMode" else None):
            draft.notes.append(f"{flag} ({key}) is not carried over: a profile has no field for it")
    for m in data.get("Mounts") or ():
        if str(m.get("Type") or "bind") not in ("bind", "volume"):
            draft.notes.append(f"{m.get('Type')} mount at {m.get('Destination')} is not carried over")
    devices = [str(d.get("PathOnHost")) for d in host.get("Devices") or () if "nvidia" not in str(d.get("PathOnHost"))]
    if devices:
        draft.notes.append(f"devices {', '.join(devices)} are not carried over")


# -- the file -------------------------------------------------------------------------------------------------
def adoption_yaml(adoption: Adoption, *, schema_line: str | None = None) -> str:
    """The profile file: a comment header (origin, each value's source, notes), then the YAML."""
    lines: list[str] = []
    if schema_line:
        lines.append(f"# yaml-language-server: $schema={schema_line}")
    lines.append(
        f"# Written by `servectl adopt` from container {adoption.container_name} ({adoption.container_id[:12]})."
    )
    lines.append("# Where each value came from (docker inspect of the container and of its image):")
    width = max((len(f) for f, _ in adoption.sources), default=0)
    lines.extend(f"#   {path.ljust(width)}  {where}" for path, where in adoption.sources)
    if adoption.notes:
        lines.append("# Notes:")
        lines.extend(f"#   - {note}" for note in adoption.notes)
    if adoption.exports:
        lines.append(f"# Before servectl starts it: export {' '.join(adoption.exports)}")
    body = yaml.safe_dump(adoption.data, sort_keys=False, width=110, default_flow_style=False)
    return "\n".join(lines) + "\n" + body


# -- compose ---------------------------------------------------------------------------------------------------
def compose_service_inspect(
    config: Mapping[str, Any],
    service: str,
    *,
    image: Mapping[str, Any] | None = None,
    volume_folders: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``docker inspect`` document of the container ``docker compose up`` would create for ``service``. Pure.

    Args:
        config: ``docker compose config --format json`` of the compose file (paths already absolute).
        service: the service name.
        image: the service image's inspect (its entrypoint applies when the service sets none).
        volume_folders: named volume (its full name, e.g. ``proj_cache``) -> host folder (its Mountpoint).

    Raises:
        AdoptError: no such service in the file.
    """
    # Long on purpose: one inspect field per compose key, side by side, so the mapping can be checked against
    # the Compose Specification in one read.
    services = config.get("services") or {}
    if service not in services:
        known = ", ".join(sorted(services)) or "none"
        raise AdoptError(f"the compose file has no service {service!r} (services: {known})")
    svc: Mapping[str, Any] = services[service]
    project = str(config.get("name") or "")
    folders = volume_folders or {}
    top_volumes = config.get("volumes") or {}
    mounts: list[dict[str, Any]] = []
    for v in svc.get("volumes") or ():
        kind = str(v.get("type") or "bind")
        read_only = bool(v.get("read_only"))
        if kind == "volume":
            full = str((top_volumes.get(v.get("source")) or {}).get("name") or f"{project}_{v.get('source')}")
            source = folders.get(full) or f"/var/lib/docker/volumes/{full}/_data"
            mounts.append(
                {"Type": "volume", "Name": full, "Source": source, "Destination": v.get("target"), "RW": not read_only}
            )
        else:
            mounts.append(
                {"Type": kind, "Source": v.get("source"), "Destination": v.get("target"), "RW": not read_only}
            )
    ports: dict[str, list[dict[str, str]]] = {}
    for p in svc.get("ports") or ():
        key = f"{p.get('target')}/{p.get('protocol') or 'tcp'}"
        ports.setdefault(key, []).append(
            {"HostIp": str(p.get("host_ip") or ""), "HostPort": str(p.get("published") or "")}
        )
    device_requests = []
    for d in ((((svc.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices")) or ():
        count = d.get("count")
        device_requests.append(
            {
                "Driver": str(d.get("driver") or ""),
                "Count": -1 if count == "all" else int(count or 0),
                "DeviceIDs": [str(i) for i in d.get("device_ids") or ()],
                "Capabilities": [list(d.get("capabilities") or ())],
            }
        )
    env = [f"{k}={v}" for k, v in (svc.get("environment") or {}).items() if v is not None]
    image_config: Mapping[str, Any] = (image or {}).get("Config") or {}
    env += [e for e in image_config.get("Env") or () if e.split("=", 1)[0] not in (svc.get("environment") or {})]
    restart = str(svc.get("restart") or "no")
    policy, _, retries = restart.partition(":")
    ulimits = []
    for limit, value in (svc.get("ulimits") or {}).items():
        soft, hard = (value, value) if isinstance(value, int) else (value.get("soft"), value.get("hard"))
        ulimits.append({"Name": limit, "Soft": int(soft), "Hard": int(hard)})
    network = str(svc.get("network_mode") or f"{project}_default")
    entrypoint = svc.get("entrypoint")
    command = svc.get("command")
    name = str(svc.get("container_name") or f"{project}-{service}-1")
    grace = svc.get("stop_grace_period")
    return {
        "Id": "",
        "Name": "/" + name,
        "Config": {
            "Image": str(svc.get("image") or ""),
            "Entrypoint": _argv(entrypoint) if entrypoint else image_config.get("Entrypoint"),
            "Cmd": _argv(command) if command else image_config.get("Cmd"),
            "Env": env,
            "Labels": {**dict(image_config.get("Labels") or {}), **dict(svc.get("labels") or {})},
            "StopTimeout": None if grace is None else _duration_s(str(grace)),
        },
        "HostConfig": {
            "NetworkMode": network,
            "PortBindings": ports if network != "host" else {},
            "RestartPolicy": {"Name": policy, "MaximumRetryCount": int(retries or 0)},
            "IpcMode": str(svc.get("ipc") or "private"),
            "ShmSize": int(svc.get("shm_size") or DOCKER_DEFAULT_SHM_BYTES),
            "Runtime": svc.get("runtime") or "runc",
            "DeviceRequests": device_requests or None,
            "Devices": [
                {"PathOnHost": str(d.get("source") if isinstance(d, Mapping) else str(d).split(":", 1)[0])}
                for d in svc.get("devices") or ()
            ],
            "Ulimits": ulimits,
            "Init": svc.get("init"),
            "Privileged": svc.get("privileged"),
            "CapAdd": svc.get("cap_add"),
        },
        "Mounts": mounts,
    }


def _argv(value: Any) -> list[str]:
    """A compose command or entrypoint (a list, or a string in shell form) as an argv."""
    return shlex.split(value) if isinstance(value, str) else [str(t) for t in value]


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|ns)")


def _duration_s(text: str) -> int:
    """A compose duration (``1m30s``, ``45s``) in whole seconds."""
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
    return int(sum(float(n) * scale[u] for n, u in _DURATION.findall(text)))
