"""Cross-field rules: each a named check with its own message, run after the schema accepts a profile.

A rule takes the loaded profile and yields ``(field path, message)``; :func:`check_profile` locates each
problem in the file that wrote the field. Rules are pure and fast (no I/O): they run before anything
starts, so a wrong flag fails in milliseconds instead of after a ten-minute weight load.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from servectl.errors import Problem
from servectl.plan.compile import catalog_for, catalog_problems
from servectl.profile.catalog import ArgvError
from servectl.profile.logcatalog import LogCatalog
from servectl.profile.models import Profile

if TYPE_CHECKING:
    from servectl.profile.loader import LoadedProfile

PathKey = tuple[str | int, ...]
RuleResult = Iterator[tuple[PathKey, str]]
Rule = Callable[[Profile], RuleResult]

LOOPBACK = re.compile(r"^(127\.\d+\.\d+\.\d+|::1|localhost)$")
SECRET_WORDS = frozenset({"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIALS", "PAT"})
MAMBA_CACHE_FACTOR = 5

RULES: dict[str, Rule] = {}


def rule(name: str) -> Callable[[Rule], Rule]:
    """Register a named rule."""

    def register(func: Rule) -> Rule:
        RULES[name] = func
        return func

    return register


@rule("speculative.adaptive")
def adaptive_speculative(p: Profile) -> RuleResult:
    """Adaptive speculative decoding needs EAGLE/EAGLE3, top-k 1, and num_steps inside the ladder."""
    spec = p.engine.speculative
    if spec is None or spec.adaptive_steps is None:
        return
    base: PathKey = ("engine", "speculative")
    if spec.algorithm not in ("EAGLE", "EAGLE3"):
        yield (
            (*base, "algorithm"),
            (
                f"adaptive_steps needs algorithm EAGLE or EAGLE3, not {spec.algorithm} "
                "(SGLang silently falls back to static steps); change the algorithm or drop adaptive_steps"
            ),
        )
    if spec.eagle_topk != 1:
        yield (
            (*base, "eagle_topk"),
            (f"adaptive_steps needs eagle_topk: 1 (got {spec.eagle_topk}); SGLang ignores the ladder otherwise"),
        )
    if spec.num_steps is None or spec.num_steps not in spec.adaptive_steps:
        yield (
            (*base, "num_steps"),
            (
                f"{spec.num_steps} is not one of adaptive_steps {spec.adaptive_steps}; SGLang refuses to start - "
                f"set num_steps to one of them"
            ),
        )


@rule("engine.mamba_cache")
def mamba_cache(p: Profile) -> RuleResult:
    """max-mamba-cache-size >= 5 x max_running_requests (a rule of this model family's launcher)."""
    size = p.engine.args.get("max-mamba-cache-size")
    running = p.engine.max_running_requests
    if isinstance(size, int) and not isinstance(size, bool) and running is not None:
        need = MAMBA_CACHE_FACTOR * running
        if size < need:
            yield (
                ("engine", "args", "max-mamba-cache-size"),
                (
                    f"{size} is below {MAMBA_CACHE_FACTOR} x max_running_requests ({running}) = {need}; "
                    f"raise it to at least {need} or lower max_running_requests"
                ),
            )


@rule("gpus.parallelism")
def parallel_matches_devices(p: Profile) -> RuleResult:
    """tp x dp = number of GPU devices (when devices are named), times the nodes of a multi-node profile."""
    devices = p.gpus.devices
    if devices and p.engine.tp * p.engine.dp != len(devices) * p.nodes:
        dp = f" x dp {p.engine.dp}" if p.engine.dp != 1 else ""
        per_node = f" on each of {p.nodes} nodes" if p.nodes > 1 else ""
        total = " times the nodes" if p.nodes > 1 else ""
        yield (
            ("engine", "tp"),
            (
                f"tp {p.engine.tp}{dp} does not match {len(devices)} GPU devices {devices}{per_node}; "
                f"make tp x dp equal the number of devices{total}"
            ),
        )


#: Flags that join a process to a multi-node group (by the catalog's dest name).
MULTINODE_DESTS = frozenset({"nnodes", "node_rank", "dist_init_addr"})


@rule("engine.multinode_flags")
def multinode_flags_from_renderer(p: Profile) -> RuleResult:
    """--nnodes, --node-rank and --dist-init-addr are added per pod by `servectl render`, never written."""
    try:
        catalog = catalog_for(p)
    except (KeyError, ValueError):  # reported by the engine.catalog rule
        catalog = None
    for key in p.engine.args:
        dest = key.replace("-", "_")
        if catalog is not None:
            try:
                option = catalog.option("--" + key)
            except ArgvError:  # an ambiguous abbreviation: reported by the engine.catalog rule
                option = None
            dest = option.dest if option is not None else dest
        if dest in MULTINODE_DESTS:
            yield (
                ("engine", "args", key),
                (
                    f"--{key} differs per node and is filled in by `servectl render --to k8s` from `nodes:`; "
                    f"remove it (set `nodes: N` for a multi-node service)"
                ),
            )


@rule("status.pins")
def promoted_is_pinned(p: Profile) -> RuleResult:
    """A promoted profile pins its image by digest and its model by revision."""
    if p.status != "promoted":
        return
    if not p.image.digest:
        yield ("image", "digest"), "a promoted profile pins its image: add image.digest (sha256:...)"
    if not p.model.revision:
        yield ("model", "revision"), "a promoted profile pins its model: add model.revision (40-hex commit)"


@rule("serve.role_port")
def role_port(p: Profile) -> RuleResult:
    """A bench profile never takes a production port; a production profile uses one."""
    s = p.serve
    if s.role == "bench" and s.port in s.production_ports:
        yield (
            ("serve", "port"),
            (f"{s.port} is a production port (clients point there); a bench profile must use another port, e.g. 8180"),
        )
    if s.role == "production" and s.port not in s.production_ports:
        yield (
            ("serve", "port"),
            (f"{s.port} is not a production port {s.production_ports}; use one, or add it to serve.production_ports"),
        )


@rule("serve.api_key")
def non_loopback_needs_key(p: Profile) -> RuleResult:
    """Binding anything but loopback requires an API key source."""
    s = p.serve
    if not LOOPBACK.match(s.host) and not (s.api_key_env or s.api_key_file):
        yield (
            ("serve", "host"),
            (f"{s.host} is reachable from other machines; set serve.api_key_env (or api_key_file) or bind 127.0.0.1"),
        )
    if (s.api_key_env or s.api_key_file) and not (len(p.image.entrypoint) == 3 and p.image.entrypoint[1] == "-m"):
        yield ("image", "entrypoint"), "an API key needs an entrypoint of the form [python3, -m, module]"


@rule("engine.hicache")
def hicache_needs_hierarchical(p: Profile) -> RuleResult:
    """hicache-size needs the hierarchical cache on."""
    args = p.engine.args
    on = args.get("enable-hierarchical-cache") is True or args.get("enable-hicache") is True
    if "hicache-size" in args and not on:
        yield (
            ("engine", "args", "hicache-size"),
            ("needs the hierarchical cache: add `enable-hierarchical-cache: true` or drop hicache-size"),
        )


@rule("engine.context")
def context_fits_total(p: Profile) -> RuleResult:
    """context_length <= max_total_tokens where both are set."""
    e = p.engine
    if e.context_length is not None and e.max_total_tokens is not None and e.context_length > e.max_total_tokens:
        yield (
            ("engine", "context_length"),
            (f"{e.context_length} exceeds max_total_tokens {e.max_total_tokens}; one request could never fit"),
        )


@rule("gpus.reserve_waiver")
def waiver_means_something(p: Profile) -> RuleResult:
    """A waiver only makes sense with a reserve to waive."""
    if p.gpus.reserve_waiver and p.gpus.vram_reserve_mib == 0:
        yield ("gpus", "reserve_waiver"), "vram_reserve_mib is 0: there is nothing to waive; drop the waiver"


@rule("engine.env_secrets")
def no_literal_secrets(p: Profile) -> RuleResult:
    """Secret-looking environment variables are passed by reference (``${NAME}``), never written."""
    for name, value in p.engine.env.items():
        looks_secret = name.upper().rsplit("_", 1)[-1] in SECRET_WORDS
        if looks_secret and value != "${" + name + "}":
            yield (
                ("engine", "env", name),
                (f"looks like a secret; write `{name}: ${{{name}}}` to pass it from your environment"),
            )


@rule("health.expect_log")
def expect_log_is_printable(p: Profile) -> RuleResult:
    """Each expect_log pattern matches a line the engine build can print (its log catalog, from its source)."""
    if not p.health.expect_log:
        return
    try:
        logs = LogCatalog.load(p.engine.catalog)
    except KeyError:
        return  # no log catalog for this build: nothing to check against
    for i, pattern in enumerate(p.health.expect_log):
        if logs.can_match(pattern):
            continue
        near = "; ".join(repr(t.shown()[:100]) for t in logs.nearest(pattern))
        hint = f"; nearest real lines: {near}" if near else ""
        yield (
            ("health", "expect_log", i),
            (
                f"{pattern!r} matches no line {logs.name} prints (log catalog from its source), so the gate would "
                f"fail a healthy server{hint}; match a line's literal text"
            ),
        )


@rule("engine.catalog")
def flags_in_catalog(p: Profile) -> RuleResult:
    """Every compiled flag exists in the profile's catalog with a value of the right type and choice."""
    try:
        catalog = catalog_for(p)
    except KeyError as err:
        yield ("engine", "catalog"), str(err.args[0])
        return
    except ValueError as err:
        yield ("engine", "catalog_extend"), str(err)
        return
    yield from catalog_problems(p, catalog)


def check_profile(loaded: LoadedProfile) -> list[Problem]:
    """Run every rule; one located problem per finding."""
    problems: list[Problem] = []
    for name, func in RULES.items():
        for path, message in func(loaded.profile):
            problems.append(loaded.problem(path, message, rule=name))
    return problems
