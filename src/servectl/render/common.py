"""What the compose and Kubernetes renderers share: reading a launch plan back into its parts. Pure.

A launch plan is what ``servectl up`` runs. The renderers never recompute anything from the profile; they
take the plan apart: the engine's listen address from its argv, which mounts carry generated files (the
adaptive ladder) or the API key (both become native objects of the target), and which are plain host paths.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from servectl.errors import RenderUnsupported
from servectl.plan.compile import GeneratedFile, LaunchPlan, MountPlan

#: The port the multi-node leader listens on for ``--dist-init-addr`` (the SGLang and LWS examples use it).
DIST_INIT_PORT = 20000
#: Health endpoint: 503 while starting, 200 once the engine serves.
HEALTH_PATH = "/health"
#: Seconds between startup and readiness probes; the startup budget is divided by it.
PROBE_PERIOD_S = 10
PROBE_TIMEOUT_S = 5

_VAR_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class PlanParts:
    """A launch plan's mounts sorted by what the target makes of them."""

    generated: tuple[tuple[GeneratedFile, MountPlan], ...]  # files servectl writes -> config objects
    api_key: MountPlan | None  # the API key file -> a secret object
    host: tuple[MountPlan, ...]  # everything else: bind mounts / hostPath volumes
    admin_key: MountPlan | None = None  # the admin key file -> a secret object


def split_mounts(plan: LaunchPlan) -> PlanParts:
    """Sort the plan's mounts into generated files, the API and admin keys and plain host paths."""
    by_path = {f.host_path: f for f in plan.files}
    generated: list[tuple[GeneratedFile, MountPlan]] = []
    keys: dict[str, MountPlan] = {}  # by the secret's container path
    host: list[MountPlan] = []
    for mount in plan.docker.mounts:
        if mount.source in by_path:
            generated.append((by_path[mount.source], mount))
        elif any(mount.source == s.host_path and mount.target == s.container_path for s in plan.secrets):
            keys[mount.target] = mount
        else:
            host.append(mount)
    unmounted = set(by_path) - {f.host_path for f, _ in generated}
    if unmounted:  # the compiler always mounts what it generates; a plan that does not is a bug
        raise ValueError(f"generated files not mounted in the plan: {sorted(unmounted)}")
    api = keys.get(plan.secret.container_path) if plan.secret is not None else None
    admin = keys.get(plan.admin_secret.container_path) if plan.admin_secret is not None else None
    return PlanParts(tuple(generated), api, tuple(host), admin)


def flag_value(argv: tuple[str, ...], flag: str) -> str | None:
    """The value following ``flag`` in an argv (the last one wins, as with argparse)."""
    value = None
    for index, token in enumerate(argv[:-1]):
        if token == flag:
            value = argv[index + 1]
    return value


@dataclass(frozen=True)
class Listen:
    """Where the engine listens inside its container (or on the host, with host networking)."""

    bind_host: str
    port: int

    @property
    def probe_host(self) -> str:
        """The address a probe from inside the container connects to."""
        if self.bind_host in ("0.0.0.0", ""):
            return "127.0.0.1"
        if self.bind_host == "::":
            return "::1"
        return self.bind_host

    @property
    def health_url(self) -> str:
        host = f"[{self.probe_host}]" if ":" in self.probe_host else self.probe_host
        return f"http://{host}:{self.port}{HEALTH_PATH}"

    @property
    def binds_loopback(self) -> bool:
        return self.bind_host in ("localhost", "::1") or self.bind_host.startswith("127.")


def listen_of(plan: LaunchPlan) -> Listen:
    """The engine's ``--host``/``--port`` from the plan's argv."""
    port = flag_value(plan.engine_argv, "--port")
    if port is None:
        raise ValueError(f"plan of {plan.profile} has no --port in its engine argv")
    return Listen(flag_value(plan.engine_argv, "--host") or "127.0.0.1", int(port))


def startup_probe_failures(plan: LaunchPlan) -> int:
    """How many failed probes, ``PROBE_PERIOD_S`` apart, add up to the plan's startup timeout."""
    return max(1, math.ceil(plan.startup_timeout_s / PROBE_PERIOD_S))


def health_check_argv(plan: LaunchPlan, listen: Listen) -> list[str]:
    """A command run inside the container that exits 0 only when ``/health`` answers 200.

    SGLang images always have the Python that runs the engine, not always curl; an entrypoint that is not
    Python falls back to curl.
    """
    first = plan.docker.command[0] if plan.docker.command else ""
    if "python" in PurePosixPath(first).name:
        code = f"import urllib.request as u; u.urlopen({listen.health_url!r}, timeout={PROBE_TIMEOUT_S})"
        return [first, "-c", code]
    return ["curl", "-fsS", "-o", "/dev/null", "--max-time", str(PROBE_TIMEOUT_S), listen.health_url]


def variables_in(text: str) -> list[str]:
    """Names of the ``${VAR}`` references in ``text``, in order."""
    return _VAR_REF.findall(text)


def dns_label(name: str, *, limit: int = 63) -> str:
    """A Kubernetes object name (RFC 1035 label) from a container name: lower case, ``-`` for the rest."""
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    if not label or not label[0].isalpha():
        label = "sglang-" + label
    return label[:limit].rstrip("-")


def require_single_node(plan: LaunchPlan, nodes: int, target: str) -> None:
    """Compose runs on one host: a multi-node profile renders only to Kubernetes."""
    if nodes > 1:
        raise RenderUnsupported(
            f"{plan.profile}: nodes: {nodes} needs several hosts, which {target} cannot express; "
            f"render it with --to k8s (LeaderWorkerSet)"
        )
