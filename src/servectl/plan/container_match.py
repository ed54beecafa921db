"""The fields servectl controls, read off a container or a launch plan, and the diff between them. Pure.

A container servectl did not start carries none of its labels, so servectl tells that it runs a profile by
its configuration: :func:`container_fields` reads ``docker inspect`` output and :func:`plan_fields` a
:class:`~servectl.plan.compile.LaunchPlan` into the same plain shape (image, SGLang entry point and flags
as the engine's parser reads them, environment, GPUs, network, ports, mounts, IPC and shared memory,
ulimits, restart policy, init, stop timeout, name, labels). :func:`diff_fields` names what differs, with
secret values shown as ``***``. ``servectl adopt`` checks its profile with it, ``status`` and ``swap``
recognise an adopted service with it, and the round-trip tests compare two containers with it.

Flags are compared by meaning, not spelling: each is parsed with the profile's flag catalog, values equal
to the parser's default count as absent, ``--served-model-name`` defaults to the model path as in SGLang,
and the API key counts only as "set" (servectl passes it through a file and a wrapper, never in argv).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servectl.plan.compile import (
    KEY_DESTS,
    KEY_FLAGS,
    LABEL_GPUS,
    LABEL_HOST,
    LABEL_MANAGED,
    LABEL_PLAN_HASH,
    LABEL_PORT,
    LABEL_PROFILE,
    LABEL_ROLE,
    LABEL_SERVED_NAME,
    LABEL_SOURCE,
    LABEL_STOP_GRACE,
    LaunchPlan,
)
from servectl.plan.gpu_request import gpu_request_from_inspect
from servectl.profile.catalog import ArgvError, CatalogOption, FlagCatalog
from servectl.profile.engine_args import ADAPTIVE_CONFIG_CONTAINER_PATH

#: Docker's defaults for what ``docker inspect`` leaves empty.
DOCKER_DEFAULT_SHM_BYTES = 64 * 2**20
DOCKER_DEFAULT_STOP_TIMEOUT_S = 10
#: Labels that say who made a container, not how it runs: compose's, and those servectl's compiler sets.
SERVECTL_LABELS = frozenset(
    {
        LABEL_MANAGED, LABEL_PROFILE, LABEL_PLAN_HASH, LABEL_PORT, LABEL_HOST, LABEL_GPUS, LABEL_ROLE,
        LABEL_SERVED_NAME, LABEL_SOURCE, LABEL_STOP_GRACE,
    }
)  # fmt: skip


def own_label(key: str) -> bool:
    """Whether a label is the container's own (not compose's bookkeeping nor servectl's)."""
    return not key.startswith("com.docker.compose.") and key not in SERVECTL_LABELS


#: Stands for "the engine's default", which a plan cannot know (the daemon chooses it).
ENGINE_DEFAULT = "(engine default)"
REDACTED = "***"

_SECRET_WORDS = frozenset({"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIALS", "PAT"})
_SECRET_VALUE = re.compile(r"^(sk-|hf_|ghp_|gho_|github_pat_|xox[bap]-|AKIA)[A-Za-z0-9_-]{8,}")
_ANONYMOUS_VOLUME = re.compile(r"^[0-9a-f]{64}$")
_EVERY_IMAGE_ENV = frozenset({"PATH", "HOME", "HOSTNAME"})
_WRAPPED_MODULE = re.compile(r"run_module\(\s*'([\w.]+)'")


def looks_secret(name: str, value: str = "") -> bool:
    """Whether an environment variable looks like it holds a secret (by name, or by a known key prefix)."""
    return name.upper().rsplit("_", 1)[-1] in _SECRET_WORDS or bool(_SECRET_VALUE.match(value))


# -- the SGLang command --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EngineCommand:
    """A container's command split into the SGLang entry point and its flags.

    Attributes:
        prefix: what runs before the entry point (an image entrypoint script such as ``nvidia_entrypoint.sh``).
        entrypoint: ``(python, "-m", module)``; servectl's API-key wrapper reads back as the module it runs.
        args: the engine's flags and their values, as written.
        wrapped: the command was servectl's key wrapper (the keys are appended inside the container).
        keys: the settings the wrapper appends (``api_key``, ``admin_api_key``), by the key files it reads.
    """

    prefix: tuple[str, ...]
    entrypoint: tuple[str, ...]
    args: tuple[str, ...]
    wrapped: bool = False
    keys: tuple[str, ...] = ()


def split_engine_command(argv: Sequence[str]) -> EngineCommand | None:
    """Find ``python -m <...>launch_server`` (or servectl's wrapper of it) in ``argv``; None when absent."""
    for i in range(len(argv) - 2):
        python, switch, target = argv[i], argv[i + 1], argv[i + 2]
        if "python" not in python.rsplit("/", 1)[-1]:
            continue
        if switch == "-m" and target.rsplit(".", 1)[-1] == "launch_server":
            return EngineCommand(tuple(argv[:i]), (python, "-m", target), tuple(argv[i + 3 :]))
        wrapped = _WRAPPED_MODULE.search(target) if switch == "-c" else None
        keys = tuple(dest for path, dest in KEY_DESTS.items() if path in target)
        if wrapped and keys:
            return EngineCommand(tuple(argv[:i]), (python, "-m", wrapped.group(1)), tuple(argv[i + 3 :]), True, keys)
    return None


@dataclass(frozen=True)
class FlagUse:
    """One flag on an engine command line: as written, the catalog option (None: unknown) and its values."""

    flag: str
    option: CatalogOption | None
    values: tuple[str, ...]
    inline: bool = False  # written as --flag=value


def scan_engine_args(args: Sequence[str], catalog: FlagCatalog) -> tuple[list[FlagUse], list[str]]:
    """Group engine flags with their values, as the engine's parser would; unknown flags keep what follows.

    Returns:
        The flags in order, and stray tokens that belong to no flag.
    """
    uses: list[FlagUse] = []
    stray: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("--"):
            stray.append(token)
            continue
        flag, eq, inline = token.partition("=")
        try:
            option = catalog.option(flag)
        except ArgvError:
            option = None
        if eq:
            uses.append(FlagUse(flag, option, (inline,), inline=True))
            continue
        values: list[str] = []
        if option is None or option.takes_value:
            single = option is not None and option.nargs in (None, "?")
            while i < len(args) and not _looks_like_flag(args[i]):
                values.append(args[i])
                i += 1
                if single:
                    break
        uses.append(FlagUse(flag, option, tuple(values)))
    return uses, stray


def engine_settings(uses: Sequence[FlagUse], catalog: FlagCatalog) -> dict[str, Any]:
    """``{dest: value}`` as the engine's parser leaves it, defaults dropped; unknown flags keyed ``--flag``."""
    out: dict[str, Any] = {}
    for use in uses:
        opt = use.option
        if opt is None:
            out[use.flag] = list(use.values) if len(use.values) != 1 else use.values[0]
            continue
        if not opt.takes_value:
            out[opt.dest] = use.flag != "--no-" + opt.flags[0][2:] if opt.kind == "bool-optional" else True
            continue
        converted: list[Any] = []
        for raw in use.values:
            try:
                converted.append(catalog.convert(opt, raw))
            except ArgvError:
                converted.append(raw)
        if opt.nargs in (None, "?"):
            out[opt.dest] = converted[0] if converted else opt.default
        else:
            out[opt.dest] = converted
    for secret in ("api_key", "admin_api_key"):
        if secret in out:
            out[secret] = REDACTED
    defaults = {opt.dest: opt.default for opt in catalog.options}
    settled = {k: v for k, v in out.items() if not (k in defaults and _same(v, defaults[k]))}
    if settled.get("served_model_name") is None and out.get("model_path") is not None:
        settled["served_model_name"] = out["model_path"]  # SGLang serves the model path when no name is given
    return settled


# -- fields of a container ---------------------------------------------------------------------------------
def container_env(data: Mapping[str, Any], image: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The container's environment, less what the image sets (same name and value).

    Without the image's inspect, the variables every image sets (``PATH``, ``HOME``, ``HOSTNAME``) are left out.
    """
    if image is None:
        env = _env_list(data.get("Config") or {})
        return {k: v for k, v in env.items() if k not in _EVERY_IMAGE_ENV}
    image_env = _env_list(image.get("Config") or {})
    return {k: v for k, v in _env_list(data.get("Config") or {}).items() if image_env.get(k) != v}


def container_mounts(data: Mapping[str, Any]) -> list[tuple[str, str, bool]]:
    """(host source, container target, read-only) of each bind or named volume; anonymous volumes left out."""
    out: list[tuple[str, str, bool]] = []
    for m in data.get("Mounts") or ():
        kind = str(m.get("Type") or "bind")
        if kind == "volume" and _ANONYMOUS_VOLUME.match(str(m.get("Name") or "")):
            continue
        if kind not in ("bind", "volume"):
            continue
        out.append((str(m.get("Source") or ""), str(m.get("Destination") or ""), not bool(m.get("RW", True))))
    return out


def container_fields(
    data: Mapping[str, Any],
    catalog: FlagCatalog,
    *,
    image: Mapping[str, Any] | None = None,
    default_runtime: str | None = None,
) -> dict[str, Any]:
    """The servectl-controlled fields of one ``docker inspect`` document (``image``: its image's inspect;
    ``default_runtime``: the engine's, when known, for a container that names none - see
    :func:`~servectl.plan.gpu_request.gpu_request_from_inspect`)."""
    config: Mapping[str, Any] = data.get("Config") or {}
    host: Mapping[str, Any] = data.get("HostConfig") or {}
    argv = [*(config.get("Entrypoint") or ()), *(config.get("Cmd") or ())]
    command = split_engine_command([str(t) for t in argv])
    engine: dict[str, Any] = {}
    entrypoint: list[str] = []
    if command is not None:
        uses, stray = scan_engine_args(command.args, catalog)
        engine = engine_settings(uses, catalog)
        if stray:
            engine["(stray)"] = stray
        for secret in command.keys:
            engine[secret] = REDACTED
        entrypoint = list(command.entrypoint)
    gpu_request = gpu_request_from_inspect(data, default_runtime=default_runtime)
    devices = list(gpu_request.ids) if gpu_request is not None else []
    env = container_env(data, image)
    if gpu_request is not None and gpu_request.via == "nvidia-runtime":
        env.pop("NVIDIA_VISIBLE_DEVICES", None)
    network = str(host.get("NetworkMode") or "bridge")
    ipc = str(host.get("IpcMode") or "private")
    restart = host.get("RestartPolicy") or {}
    policy = str(restart.get("Name") or "no")
    if policy == "on-failure" and int(restart.get("MaximumRetryCount") or 0) > 0:
        policy = f"on-failure:{int(restart['MaximumRetryCount'])}"
    image_labels = ((image or {}).get("Config") or {}).get("Labels") or {}
    labels = {
        str(k): str(v)
        for k, v in (config.get("Labels") or {}).items()
        if own_label(str(k)) and image_labels.get(k) != v
    }
    ports = []
    if network != "host":
        for key, binds in sorted(((host.get("PortBindings") or {}) or {}).items()):
            for bind in binds or ():
                ip = str(bind.get("HostIp") or "") or "0.0.0.0"
                ports.append(f"{ip}:{bind.get('HostPort') or ''}:{str(key).split('/', 1)[0]}")
    stop_timeout = config.get("StopTimeout")
    return {
        "name": str(data.get("Name") or "").lstrip("/"),
        "image": image_ref(str(config.get("Image") or "")),
        "entrypoint": entrypoint,
        "engine": engine,
        "env": env,
        "gpus": sorted(devices),
        "network": "host" if network == "host" else "bridge",
        "ports": sorted(ports),
        "mounts": _mount_strings(container_mounts(data)),
        "ipc": ipc,
        "shm_size": None if ipc == "host" else int(host.get("ShmSize") or DOCKER_DEFAULT_SHM_BYTES),
        "ulimits": sorted(f"{u['Name']}={u['Soft']}:{u['Hard']}" for u in host.get("Ulimits") or ()),
        "restart": policy,
        "init": bool(host.get("Init")),
        "stop_timeout_s": DOCKER_DEFAULT_STOP_TIMEOUT_S if stop_timeout is None else int(stop_timeout),
        "labels": labels,
    }


def plan_fields(plan: LaunchPlan, catalog: FlagCatalog) -> dict[str, Any]:
    """The same fields as :func:`container_fields`, for the container ``plan`` would create."""
    spec = plan.docker
    command = split_engine_command(list(spec.command))
    engine: dict[str, Any] = {}
    entrypoint: list[str] = []
    if command is not None:
        uses, _ = scan_engine_args(command.args, catalog)
        engine = engine_settings(uses, catalog)
        entrypoint = list(command.entrypoint)
    for ref in plan.secrets:
        engine[ref.dest] = REDACTED
    ipc = spec.ipc_mode or ENGINE_DEFAULT
    return {
        "name": spec.name,
        "image": image_ref(spec.image),
        "entrypoint": entrypoint,
        "engine": engine,
        "env": {name: value for name, value in spec.environment},  # None: passed through, any value
        "gpus": sorted(spec.device_ids),
        "network": "host" if spec.network_mode == "host" else "bridge",
        "ports": sorted(f"{p.host_ip}:{p.host_port}:{p.container_port}" for p in spec.ports),
        "mounts": _mount_strings([(m.source, m.target, m.read_only) for m in spec.mounts]),
        "ipc": ipc,
        "shm_size": None if ipc == "host" else parse_size(spec.shm_size or "64m"),
        "ulimits": sorted(f"{n}={s}:{h}" for n, s, h in spec.ulimits),
        "restart": spec.restart_policy or "no",
        "init": spec.init,
        "stop_timeout_s": spec.stop_timeout_s,
        "labels": {k: v for k, v in spec.labels.items() if own_label(k)},
    }


def diff_fields(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """One line per field that differs, ``field: A -> B``; engine flags and env by name; secrets as ``***``."""
    lines: list[str] = []
    for key in a.keys() | b.keys():
        va, vb = a.get(key), b.get(key)
        if key in ("engine", "env", "labels"):
            da, db = dict(va or {}), dict(vb or {})
            for sub in sorted(da.keys() | db.keys()):
                sa, sb = da.get(sub, _ABSENT), db.get(sub, _ABSENT)
                if key == "env" and (sa is None or sb is None) and _ABSENT not in (sa, sb):
                    continue  # passed through from the environment: any value matches
                if not _same(sa, sb):
                    secret = key == "env" and looks_secret(sub, str(sa) + str(sb))
                    shown = ["${" + sub + "}" if v is None else _show(v, secret) for v in (sa, sb)]
                    lines.append(f"{key} {sub}: {shown[0]} -> {shown[1]}")
        elif key == "ipc" and ENGINE_DEFAULT in (va, vb):
            other = vb if va == ENGINE_DEFAULT else va
            if other not in (ENGINE_DEFAULT, "private", "shareable"):
                lines.append(f"ipc: {_show(va)} -> {_show(vb)}")
        elif not _same(va, vb):
            lines.append(f"{key}: {_show(va)} -> {_show(vb)}")
    return sorted(lines)


def container_diff(
    plan: LaunchPlan,
    data: Mapping[str, Any],
    catalog: FlagCatalog,
    *,
    image: Mapping[str, Any] | None = None,
) -> list[str]:
    """What differs between a running container (``docker inspect``) and the container ``plan`` would create.

    ``image`` (the image's inspect) lets the image's own environment and labels be told apart from the
    container's and the plan's digest be checked against the image's repo digests.
    """
    lines = diff_fields(container_fields(data, catalog, image=image), plan_fields(plan, catalog))
    if "@" in plan.docker.image and image is not None:
        digest = plan.docker.image.split("@", 1)[1]
        known = {str(d).split("@", 1)[-1] for d in image.get("RepoDigests") or ()} | {str(image.get("Id") or "")}
        if digest not in known:
            lines.append(f"image digest: {', '.join(sorted(known)) or '(none)'} -> {digest}")
    return lines


# -- small helpers ------------------------------------------------------------------------------------------
def image_ref(image: str) -> str:
    """``repo[:tag]`` without a digest, ``:latest`` added where no tag is given (as Docker reads it)."""
    ref = image.split("@", 1)[0]
    if not ref or ref.startswith("sha256:") or re.fullmatch(r"[0-9a-f]{12,64}", ref):
        return ref
    last = ref.rsplit("/", 1)[-1]
    return ref if ":" in last else ref + ":latest"


_SIZE = re.compile(r"^(\d+)([bkmg]?)$", re.IGNORECASE)
_UNIT = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def parse_size(text: str) -> int:
    """Docker's ``--shm-size`` spelling (``32g``, ``512m``, ``1024``) in bytes."""
    match = _SIZE.match(text.strip())
    if not match:
        raise ValueError(f"not a size: {text!r}")
    return int(match.group(1)) * _UNIT[match.group(2).lower()]


def format_size(size_bytes: int) -> str:
    """Bytes in Docker's shortest exact spelling: 34359738368 -> ``32g``."""
    for suffix, unit in (("g", 2**30), ("m", 2**20), ("k", 2**10)):
        if size_bytes and size_bytes % unit == 0:
            return f"{size_bytes // unit}{suffix}"
    return str(size_bytes)


def _env_list(config: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in config.get("Env") or ():
        key, _, value = str(item).partition("=")
        out[key] = value
    return out


def _mount_strings(mounts: Sequence[tuple[str, str, bool]]) -> list[str]:
    """Mounts as ``source:target:ro|rw``, without servectl's own files and without mounts another one already
    provides (a model folder inside a mounted cache folder, at the same place)."""
    kept: list[tuple[str, str, bool]] = []
    for source, target, read_only in mounts:
        if target in KEY_FLAGS or target == ADAPTIVE_CONFIG_CONTAINER_PATH:
            continue
        kept.append((source.rstrip("/") or "/", target.rstrip("/") or "/", read_only))
    out: list[str] = []
    for source, target, read_only in kept:
        covered = any(
            (t != target and target.startswith(t + "/") and source == s + target[len(t) :]) for s, t, _ in kept
        )
        if not covered:
            out.append(f"{source}:{target}:{'ro' if read_only else 'rw'}")
    return sorted(out)


class _Absent:
    def __repr__(self) -> str:
        return "(unset)"


_ABSENT: Any = _Absent()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _show(value: Any, secret: bool = False) -> str:
    if value is _ABSENT or value is None:
        return "(unset)"
    if secret:
        return REDACTED
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


def _looks_like_flag(token: str) -> bool:
    if token.startswith("--"):
        return True
    if token.startswith("-"):
        try:
            float(token)
        except ValueError:
            return True
    return False
