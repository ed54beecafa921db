"""One profile section each, read off ``docker inspect`` of a container (and of its image). Pure.

Each helper fills its part of the profile and tells the :class:`~servectl.plan.adopt.draft.Draft` where each
value came from and what could not be carried over.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from servectl.plan.adopt.draft import (
    ADMIN_KEY_ENV,
    API_KEY_ENV,
    SGLANG_DEFAULT_HOST,
    SGLANG_DEFAULT_PORT,
    AdoptError,
    Draft,
)
from servectl.plan.container_match import (
    DOCKER_DEFAULT_SHM_BYTES,
    DOCKER_DEFAULT_STOP_TIMEOUT_S,
    FlagUse,
    container_env,
    format_size,
    looks_secret,
    own_label,
)
from servectl.plan.gpu_request import gpu_request_from_inspect
from servectl.profile.catalog import ArgvError, CatalogOption, FlagCatalog

_HF_SNAPSHOT = re.compile(r"models--([\w.-]+?)--([\w.-]+)/snapshots/([0-9a-f]{40})(?:/|$)")
_ARGS_KEY = re.compile(r"^[a-z0-9][a-z0-9-]*$")
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


def read_flags(
    uses: Sequence[FlagUse], cat: FlagCatalog, draft: Draft
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
        if opt.dest in ("api_key", "admin_api_key"):  # a key is never written: serve_section names a variable
            settings[opt.dest] = True
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


def typed_engine(engine: dict[str, Any], settings: dict[str, Any], args: dict[str, Any]) -> None:
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


def image_section(config: Mapping[str, Any], image: Mapping[str, Any] | None, draft: Draft) -> dict[str, Any]:
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


def model_section(
    model_path: str, mounts: Sequence[tuple[str, str, bool]], shown: str, draft: Draft
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


def gpu_via(data: Mapping[str, Any]) -> str | None:
    """How the container asked for its GPUs (``device-request``, ``cdi``, ...); None for no GPU."""
    request = gpu_request_from_inspect(data)
    return request.via if request is not None else None


def gpus_section(data: Mapping[str, Any], cards: int, draft: Draft) -> dict[str, Any]:
    request = gpu_request_from_inspect(data)
    if request is None:
        if cards > 1:
            draft.notes.append(f"the container asks for no GPU but tp x dp = {cards}; set gpus.devices")
        return {"devices": []}
    devices, via = list(request.ids), request.via
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


def serve_section(host: Mapping[str, Any], settings: Mapping[str, Any], draft: Draft) -> dict[str, Any]:
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
    for setting, variable, what in (("api_key", API_KEY_ENV, "API key"), ("admin_api_key", ADMIN_KEY_ENV, "admin key")):
        if not settings.get(setting):
            continue
        flag = "--" + setting.replace("_", "-")
        serve[f"{setting}_env"] = variable
        draft.exports.append(variable)
        draft.notes.append(f"the {what} ({flag}) is not written: export {variable} with the key the container uses")
        draft.source(f"serve.{setting}_env", f"argv {flag} (the key itself is never written)")
    return serve


def env_section(
    data: Mapping[str, Any], image: Mapping[str, Any] | None, draft: Draft, *, via_runtime: bool
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


def container_section(
    data: Mapping[str, Any],
    name: str,
    mounts: Sequence[tuple[str, str, bool]],
    image_config: Mapping[str, Any],
    draft: Draft,
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


def unsupported_notes(host: Mapping[str, Any], data: Mapping[str, Any], draft: Draft) -> None:
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


__all__ = [
    "container_section",
    "env_section",
    "gpu_via",
    "gpus_section",
    "image_section",
    "model_section",
    "read_flags",
    "serve_section",
    "typed_engine",
    "unsupported_notes",
]
