"""The compiler: a resolved profile (+ host facts) -> a :class:`LaunchPlan`. Pure: no Docker, GPU or network.

The plan holds the SGLang argv, the Docker run spec, the files servectl writes before starting (the
adaptive speculative ladder), and a hash of all of it that labels the container, so ``status`` can tell
when a running service no longer matches its profile. The hash is taken over the portable plan (see
:func:`compile_portable_plan`): the same profile hashes the same on every machine and in rendered files.
Secrets enter the plan only as references.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl.errors import ProfileError
from servectl.plan import labels as _labels
from servectl.plan.keys import ADMIN_KEY_CONTAINER_PATH as ADMIN_KEY_CONTAINER_PATH
from servectl.plan.keys import API_KEY_CONTAINER_PATH as API_KEY_CONTAINER_PATH
from servectl.plan.keys import KEY_DESTS as KEY_DESTS
from servectl.plan.keys import KEY_FLAGS as KEY_FLAGS
from servectl.plan.keys import SecretRef as SecretRef
from servectl.plan.keys import key_wrapper as key_wrapper
from servectl.profile.engine_args import ADAPTIVE_CONFIG_CONTAINER_PATH, engine_args

if TYPE_CHECKING:  # the plan types load without pydantic or the catalogs: a cached plan needs neither
    from servectl.profile.catalog import FlagCatalog
    from servectl.profile.models import Profile


# The labels live in plan.labels (light to import); these names stay for code that imports them from here.
LABEL_PREFIX = _labels.LABEL_PREFIX
LABEL_MANAGED = _labels.LABEL_MANAGED
LABEL_PROFILE = _labels.LABEL_PROFILE
LABEL_PLAN_HASH = _labels.LABEL_PLAN_HASH
LABEL_PORT = _labels.LABEL_PORT
LABEL_HOST = _labels.LABEL_HOST
LABEL_GPUS = _labels.LABEL_GPUS
LABEL_ROLE = _labels.LABEL_ROLE
LABEL_SERVED_NAME = _labels.LABEL_SERVED_NAME
LABEL_SOURCE = _labels.LABEL_SOURCE
LABEL_STOP_GRACE = _labels.LABEL_STOP_GRACE


REDACTED = "***"

#: SGLang's own Docker instructions: unlimited locked memory, 64 MiB stack.
SGLANG_ULIMITS: tuple[tuple[str, int, int], ...] = (("memlock", -1, -1), ("stack", 67108864, 67108864))


@dataclass(frozen=True)
class MountPlan:
    source: str
    target: str
    read_only: bool


@dataclass(frozen=True)
class PortBinding:
    host_ip: str
    host_port: int
    container_port: int


@dataclass(frozen=True)
class GeneratedFile:
    """A file servectl writes on the host before starting the container."""

    host_path: str
    content: str


@dataclass(frozen=True)
class DockerRunSpec:
    """Everything ``docker run`` needs, as plain values."""

    image: str
    name: str
    command: tuple[str, ...]
    labels: Mapping[str, str]
    environment: tuple[tuple[str, str | None], ...]  # None: passed through from servectl's environment
    device_ids: tuple[str, ...]
    ipc_mode: str | None
    shm_size: str | None
    ulimits: tuple[tuple[str, int, int], ...]
    network_mode: str
    ports: tuple[PortBinding, ...]
    mounts: tuple[MountPlan, ...]
    stop_timeout_s: int
    init: bool = True
    restart_policy: str | None = None  # "always", "on-failure:3", ...; None: Docker's default ("no")
    user: str | None = None  # "UID:GID" the container runs as; None: the image's (the gateway sets it)
    group_add: tuple[str, ...] = ()  # extra group ids (the gateway: the Docker socket's group)


@dataclass(frozen=True)
class LaunchPlan:
    """The resolved, validated launch of one profile."""

    profile: str
    source: str
    served_name: str
    url: str
    engine_argv: tuple[str, ...]
    docker: DockerRunSpec
    files: tuple[GeneratedFile, ...]
    secret: SecretRef | None
    startup_timeout_s: float
    stall_timeout_s: float
    expect_log: tuple[str, ...]
    plan_hash: str = field(default="")
    admin_secret: SecretRef | None = None  # serve.admin_api_key_env/file: where the admin key comes from

    @property
    def secrets(self) -> tuple[SecretRef, ...]:
        """The keys the container reads from mounted files: the API key, then the admin key (each if any)."""
        return tuple(s for s in (self.secret, self.admin_secret) if s is not None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (secrets are references only)."""
        data = asdict(self)
        if self.admin_secret is None:  # absent, so plans (and hashes) from before the field stay as they were
            del data["admin_secret"]
        data["docker"]["labels"] = dict(self.docker.labels)
        if self.docker.restart_policy is None:  # absent, so plans (and hashes) from before the field stay as they were
            del data["docker"]["restart_policy"]
        for field_name in ("user", "group_add"):  # the same for these (only the gateway sets them)
            if not data["docker"][field_name]:
                del data["docker"][field_name]
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LaunchPlan:
        """The plan whose :meth:`to_dict` is ``data`` (JSON's lists back to tuples; values as they are).

        Raises:
            KeyError, TypeError, ValueError: ``data`` is not such a description.
        """
        d = data["docker"]
        docker = DockerRunSpec(
            image=d["image"],
            name=d["name"],
            command=tuple(d["command"]),
            labels=dict(d["labels"]),
            environment=tuple((name, value) for name, value in d["environment"]),
            device_ids=tuple(d["device_ids"]),
            ipc_mode=d["ipc_mode"],
            shm_size=d["shm_size"],
            ulimits=tuple((name, soft, hard) for name, soft, hard in d["ulimits"]),
            network_mode=d["network_mode"],
            ports=tuple(PortBinding(**p) for p in d["ports"]),
            mounts=tuple(MountPlan(**m) for m in d["mounts"]),
            stop_timeout_s=d["stop_timeout_s"],
            init=d["init"],
            restart_policy=d.get("restart_policy"),
            user=d.get("user"),
            group_add=tuple(d.get("group_add") or ()),
        )
        secret, admin = data["secret"], data.get("admin_secret")
        return cls(
            profile=data["profile"],
            source=data["source"],
            served_name=data["served_name"],
            url=data["url"],
            engine_argv=tuple(data["engine_argv"]),
            docker=docker,
            files=tuple(GeneratedFile(**f) for f in data["files"]),
            secret=None if secret is None else SecretRef(**secret),
            startup_timeout_s=data["startup_timeout_s"],
            stall_timeout_s=data["stall_timeout_s"],
            expect_log=tuple(data["expect_log"]),
            plan_hash=data["plan_hash"],
            admin_secret=None if admin is None else SecretRef(**admin),
        )


# -- the plan ------------------------------------------------------------------------------------------
def compile_plan(
    profile: Profile,
    *,
    catalog: FlagCatalog,
    source: str,
    state_dir: Path,
    home: Path,
    environ: Mapping[str, str],
    project_dir: Path | None = None,
) -> LaunchPlan:
    """Compile a validated profile into its launch plan. Pure: reads nothing, writes nothing.

    Args:
        profile: a profile that passed :func:`servectl.profile.validate.load_profile`.
        catalog: its flag catalog (:meth:`servectl.profile.loader.LoadedProfile.flag_catalog`: found in the
            catalog folder of the host it was loaded on).
        source: the profile file (recorded in a label).
        state_dir: servectl's state folder (where generated files will be written at start).
        home: the user's home folder, for ``~`` in host paths.
        environ: variables for ``${VAR}`` in host paths (``{}``: none).
        project_dir: the profile's project folder (:func:`project_dir_of`); paths inside it are hashed
            relative to it, so the plan hash does not depend on where the project is checked out.

    Raises:
        ProfileError: a host path names a variable that ``environ`` lacks.
    """
    env = environ

    def host_path(raw: str, field: str) -> str:
        return _host_path(raw, home, env, where=f"{source}: {field}")

    argv = tuple(token for arg in engine_args(profile, catalog) for token in arg.tokens)
    gen_dir = state_dir / "generated" / profile.name
    mounts, files = _mounts_and_files(profile, host_path, gen_dir)
    secret, admin_secret, command = _secrets_and_command(profile, argv, host_path, gen_dir)
    for ref in (secret, admin_secret):
        if ref is not None:
            mounts.append(MountPlan(ref.host_path, ref.container_path, True))
    labels = _container_labels(profile, source)
    docker = _docker_spec(profile, command, labels, mounts)
    host_for_url = "127.0.0.1" if profile.serve.host in ("0.0.0.0", "::") else profile.serve.host
    plan = LaunchPlan(
        profile=profile.name,
        source=source,
        served_name=profile.model.served_name,
        url=f"http://{_bracket(host_for_url)}:{profile.serve.port}",
        engine_argv=argv,
        docker=docker,
        files=tuple(files),
        secret=secret,
        admin_secret=admin_secret,
        startup_timeout_s=profile.health.startup_timeout_s,
        stall_timeout_s=profile.health.stall_timeout_s,
        expect_log=tuple(profile.health.expect_log),
    )
    # The hash names the launch the profile describes, not the machine: it is taken over the portable plan
    # (home ~, fixed state folder, ${VAR} kept), so a service started from a rendered compose file carries
    # the hash that `servectl up` computes for the same profile on any machine.
    portable = isinstance(env, VariablesKeptLiteral) and (home, state_dir) == (PORTABLE_HOME, PORTABLE_STATE_DIR)
    hashed = (
        plan if portable else compile_portable_plan(profile, catalog=catalog, source=source, project_dir=project_dir)
    )
    digest = plan_hash(hashed)
    labelled = DockerRunSpec(**{**docker.__dict__, "labels": {**labels, LABEL_PLAN_HASH: digest}})
    return LaunchPlan(**{**plan.__dict__, "docker": labelled, "plan_hash": digest})


def _mounts_and_files(
    profile: Profile, host_path: Callable[[str, str], str], gen_dir: Path
) -> tuple[list[MountPlan], list[GeneratedFile]]:
    """The model and the profile's mounts, and the files servectl generates (the adaptive ladder) with theirs."""
    model = profile.model
    files: list[GeneratedFile] = []
    mounts = [MountPlan(host_path(model.path, "model.path"), model.container_path, model.read_only)]
    mounts += [
        MountPlan(host_path(m.source, f"container.mounts[{i}].source"), m.target, m.read_only)
        for i, m in enumerate(profile.container.mounts)
    ]
    spec = profile.engine.speculative
    if spec is not None and spec.adaptive_steps is not None:
        ladder_path = gen_dir / "speculative-adaptive.json"
        files.append(GeneratedFile(str(ladder_path), adaptive_ladder_json(profile)))
        mounts.append(MountPlan(str(ladder_path), ADAPTIVE_CONFIG_CONTAINER_PATH, True))
    return mounts, files


def _secrets_and_command(
    profile: Profile, argv: tuple[str, ...], host_path: Callable[[str, str], str], gen_dir: Path
) -> tuple[SecretRef | None, SecretRef | None, tuple[str, ...]]:
    """Where the API key and the admin key come from (each if the profile names one) and the container's
    command: the entry point and argv, or, with a key, a wrapper that reads each key file into its flag
    (``--api-key``, ``--admin-api-key``; never in argv or env)."""
    serve = profile.serve

    def ref(env: str | None, file: str | None, container_path: str) -> SecretRef | None:
        dest = KEY_DESTS[container_path]
        if file:
            path = host_path(file, f"serve.{dest}_file")
            return SecretRef("file", path, path, container_path)
        if env:
            return SecretRef("env", env, str(gen_dir / dest.replace("_", "-")), container_path)
        return None

    secret = ref(serve.api_key_env, serve.api_key_file, API_KEY_CONTAINER_PATH)
    admin = ref(serve.admin_api_key_env, serve.admin_api_key_file, ADMIN_KEY_CONTAINER_PATH)
    refs = [r for r in (secret, admin) if r is not None]
    if not refs:
        return None, None, (*profile.image.entrypoint, *argv)
    python, module = _python_module_entrypoint(profile.image.entrypoint)
    wrapper = key_wrapper([r.container_path for r in refs], module)
    return secret, admin, (python, "-c", wrapper, *argv)


def _container_labels(profile: Profile, source: str) -> dict[str, str]:
    """The container's labels: servectl's own (what status and swap read back), then the profile's."""
    return {
        LABEL_MANAGED: "1",
        LABEL_PROFILE: profile.name,
        LABEL_PORT: str(profile.serve.port),
        LABEL_HOST: profile.serve.host,
        LABEL_GPUS: ",".join(str(d) for d in profile.gpus.devices),
        LABEL_ROLE: profile.serve.role,
        LABEL_SERVED_NAME: profile.model.served_name,
        LABEL_SOURCE: source,
        LABEL_STOP_GRACE: str(profile.container.stop_grace_s),
        **profile.container.labels,
    }


#: torch_memory_saver's variable (0.0.10) that keeps the CPU backup's pinned buffer between pause and resume.
RETAIN_BACKUP_ENV = "TMS_RETAIN_CPU_BACKUP"


def _docker_spec(
    profile: Profile, command: tuple[str, ...], labels: dict[str, str], mounts: list[MountPlan]
) -> DockerRunSpec:
    bridge = profile.serve.network == "bridge"
    env = dict(profile.engine.env)
    if profile.swap.standby == "warm" and profile.swap.standby_retain_backup:
        env.setdefault(RETAIN_BACKUP_ENV, "1")  # torch_memory_saver keeps the pinned buffer between cycles
    environment = tuple((name, None if value == "${" + name + "}" else value) for name, value in sorted(env.items()))
    return DockerRunSpec(
        image=profile.image.pinned_ref,
        name=profile.container.name or f"servectl-{profile.name}",
        command=command,
        labels=labels,
        environment=environment,
        device_ids=tuple(str(d) for d in profile.gpus.devices),
        ipc_mode=profile.container.ipc,
        shm_size=profile.container.shm_size,
        ulimits=_ulimits(profile),
        network_mode="bridge" if bridge else "host",
        ports=(PortBinding(profile.serve.host, profile.serve.port, profile.serve.port),) if bridge else (),
        mounts=tuple(mounts),
        stop_timeout_s=profile.container.stop_grace_s,
        init=profile.container.init,
        restart_policy=profile.container.restart,
    )


def _ulimits(profile: Profile) -> tuple[tuple[str, int, int], ...]:
    limits = profile.container.ulimits
    if limits is None:
        # The stand-in locks no memory. SGLang's memlock=-1 needs CAP_SYS_RESOURCE in the Docker daemon,
        # which rootless and sandboxed engines lack, and the demo must start there too.
        return () if profile.image.build == "standin" else SGLANG_ULIMITS
    out: list[tuple[str, int, int]] = []
    for name, value in sorted(limits.items()):
        soft, hard = (value, value) if isinstance(value, int) else (value[0], value[1])
        out.append((name, soft, hard))
    return tuple(out)


#: Home and state folder of the *portable* plan: the launch as a profile describes it, nothing of the machine.
PORTABLE_HOME = Path("~")
PORTABLE_STATE_DIR = Path("~/.local/state/servectl")
#: In the portable plan, host paths inside the profile's project folder start with this variable.
PROJECT_DIR_VAR = "SERVECTL_PROJECT_DIR"


class VariablesKeptLiteral(Mapping[str, str]):
    """An environment in which every variable is set to a reference to itself: ``X`` -> ``${X}``."""

    def __getitem__(self, key: str) -> str:
        return "${" + key + "}"

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


class UnsetKeptLiteral(Mapping[str, str]):
    """An environment in which an unset variable stays a reference to itself; ``unset`` lists those asked for.

    For ``up --dry-run``: the plan shows ``${MODEL_ROOT}`` where the value is missing instead of refusing.
    """

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        self.unset: list[str] = []

    def __getitem__(self, key: str) -> str:
        if key in self._environ:
            return self._environ[key]
        if key not in self.unset:
            self.unset.append(key)
        return "${" + key + "}"

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str)

    def __iter__(self) -> Iterator[str]:
        return iter(self._environ)

    def __len__(self) -> int:
        return len(self._environ)


def project_dir_of(profile_file: Path) -> Path | None:
    """The project folder of a profile file: the folder above its folder (``<project>/profiles/x.yaml``).

    None for a file in the file system root's folder (every path would be inside that "project").
    """
    project = profile_file.parent.parent
    return None if project == project.parent else project


def compile_portable_plan(
    profile: Profile, *, catalog: FlagCatalog, source: str, project_dir: Path | None = None
) -> LaunchPlan:
    """The plan with nothing of this machine in it, for files to share and for the plan hash.

    Home is ``~``, the state folder is fixed, every ``${VAR}`` stays as it is, and host paths inside
    ``project_dir`` (relative paths in a profile resolve there) start with ``${SERVECTL_PROJECT_DIR}``.
    """
    anchored = profile if project_dir is None else _anchor_host_paths(profile, project_dir)
    env = VariablesKeptLiteral()
    return compile_plan(
        anchored, catalog=catalog, source=source, state_dir=PORTABLE_STATE_DIR, home=PORTABLE_HOME, environ=env
    )


def _anchor_host_paths(profile: Profile, project_dir: Path) -> Profile:
    def anchor(path: str) -> str:
        if not path.startswith("/") or not Path(path).is_relative_to(project_dir):
            return path
        rest = Path(path).relative_to(project_dir).as_posix()
        return "${" + PROJECT_DIR_VAR + "}" + ("" if rest == "." else "/" + rest)

    serve, model, container = profile.serve, profile.model, profile.container
    key_files = {
        name: anchor(path) if path else path
        for name, path in (("api_key_file", serve.api_key_file), ("admin_api_key_file", serve.admin_api_key_file))
    }
    mounts = [m.model_copy(update={"source": anchor(m.source)}) for m in container.mounts]
    return profile.model_copy(
        update={
            "model": model.model_copy(update={"path": anchor(model.path)}),
            "serve": serve.model_copy(update=key_files),
            "container": container.model_copy(update={"mounts": mounts}),
        }
    )


def plan_hash(plan: LaunchPlan) -> str:
    """A short, stable hash of everything that shapes the running container (not its hash label)."""
    data = plan.to_dict()
    data["docker"]["labels"].pop(LABEL_PLAN_HASH, None)
    data["docker"]["labels"].pop(LABEL_SOURCE, None)  # moving a file does not change the service
    data.pop("plan_hash", None)
    data.pop("source", None)
    blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def adaptive_ladder_json(profile: Profile) -> str:
    """The JSON that ``--speculative-adaptive-config`` reads: batch size -> candidate steps."""
    spec = profile.engine.speculative
    assert spec is not None and spec.adaptive_steps is not None
    batches = range(1, (profile.engine.max_running_requests or 1) + 1)
    ladder = {str(b): {"candidate_steps": list(spec.adaptive_steps)} for b in batches}
    return json.dumps(ladder, separators=(",", ":")) + "\n"


def _python_module_entrypoint(entrypoint: list[str]) -> tuple[str, str]:
    if len(entrypoint) == 3 and entrypoint[1] == "-m" and "python" in Path(entrypoint[0]).name:
        return entrypoint[0], entrypoint[2]
    raise ValueError("an API or admin key needs an entrypoint of the form [python3, -m, module]")


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def env_references(value: str) -> list[str]:
    """The variables a value names (``${VAR}`` or ``$VAR``), in order."""
    return [m.group(1) or m.group(2) for m in _VAR.finditer(value)]


def _host_path(raw: str, home: Path, environ: Mapping[str, str], *, where: str) -> str:
    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in environ:
            raise ProfileError(f"{where}: {raw!r} uses ${{{name}}}, which is not set; export {name}=... first")
        return environ[name]

    value = _VAR.sub(substitute, raw)
    if value == "~" or value.startswith("~/"):
        return str(home / value[2:]) if value != "~" else str(home)
    return value


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


# -- printed forms -------------------------------------------------------------------------------------
def docker_run_groups(spec: DockerRunSpec, *, detach: bool = True) -> list[list[str]]:
    """``docker run`` tokens grouped by option (for printing one option per line)."""
    groups: list[list[str]] = [["docker", "run", *(["-d"] if detach else [])], ["--name", spec.name]]
    groups += [["--label", f"{key}={value}"] for key, value in spec.labels.items()]
    if spec.device_ids:
        groups.append(["--gpus", '"device=' + ",".join(spec.device_ids) + '"'])
    if spec.ipc_mode:
        groups.append(["--ipc", spec.ipc_mode])
    if spec.shm_size:
        groups.append(["--shm-size", spec.shm_size])
    for name, soft, hard in spec.ulimits:
        groups.append(["--ulimit", f"{name}={soft}" if soft == hard else f"{name}={soft}:{hard}"])
    if spec.restart_policy:
        groups.append(["--restart", spec.restart_policy])
    if spec.user:
        groups.append(["--user", spec.user])
    groups += [["--group-add", g] for g in spec.group_add]
    if spec.network_mode == "host":
        groups.append(["--network", "host"])
    groups += [["-p", f"{_bracket(p.host_ip)}:{p.host_port}:{p.container_port}"] for p in spec.ports]
    groups += [["-v", f"{m.source}:{m.target}" + (":ro" if m.read_only else "")] for m in spec.mounts]
    groups += [["-e", name if value is None else f"{name}={value}"] for name, value in spec.environment]
    groups.append(["--stop-timeout", str(spec.stop_timeout_s)])
    if spec.init:
        groups.append(["--init"])
    groups.append([spec.image])
    command = list(spec.command)
    first_flag = next((i for i, t in enumerate(command) if t.startswith("--")), len(command))
    groups.append(command[:first_flag])
    for token in command[first_flag:]:
        if token.startswith("--") or not groups[-1]:
            groups.append([token])
        else:
            groups[-1].append(token)
    return [g for g in groups if g]


def docker_run_argv(spec: DockerRunSpec, *, detach: bool = True) -> list[str]:
    """The ``docker run`` command that creates the same container as servectl does."""
    return [token for group in docker_run_groups(spec, detach=detach) for token in group]


def format_docker_run(plan: LaunchPlan) -> str:
    """``docker run`` as a shell command, one option per line; secrets only as references."""
    groups = docker_run_groups(plan.docker)
    return " \\\n  ".join(" ".join(shlex.quote(t) for t in group) for group in groups)


def format_engine_argv(plan: LaunchPlan) -> str:
    """The SGLang argv, one flag with its values per line."""
    lines: list[str] = []
    for token in plan.engine_argv:
        if token.startswith("--") or not lines:
            lines.append(token)
        else:
            lines[-1] += " " + shlex.quote(token)
    return "\n".join(lines)
