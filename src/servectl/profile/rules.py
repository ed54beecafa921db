"""Cross-field rules: each a named check with its own message, run after the schema accepts a profile.

A rule takes the loaded profile and its catalog folder (:attr:`LoadedProfile.catalogs`: the host's, where
``engine.catalog: image`` finds the catalog extracted from the image, never this process's) and yields ``(field
path, message)``; :func:`check_profile` locates each problem in the file that wrote the field. Rules are fast and
read nothing but the profile's flag catalog (memoized): they run before anything starts, so a wrong flag fails in
milliseconds instead of after a ten-minute weight load.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from servectl.errors import Problem
from servectl.profile.catalog import ArgvError
from servectl.profile.container_risks import Risk, container_risks
from servectl.profile.engine_args import (
    MEMORY_SAVER_FLAG,
    WEIGHTS_CPU_BACKUP_FLAG,
    Setting,
    catalog_for,
    catalog_problems,
    effective_settings,
    policy_flag_problems,
)
from servectl.profile.models import Profile
from servectl.profile.standby_rules import standby_engine_problems

if TYPE_CHECKING:
    from servectl.profile.loader import LoadedProfile

PathKey = tuple[str | int, ...]
RuleResult = Iterator[tuple[PathKey, str]]
#: A rule: the profile and the catalog folder it was loaded with (``LoadedProfile.catalogs``, where
#: ``engine.catalog: image`` finds the catalog extracted from the image) -> its findings.
Rule = Callable[[Profile, Path], RuleResult]

LOOPBACK = re.compile(r"^(127\.\d+\.\d+\.\d+|::1|localhost)$")
SECRET_WORDS = frozenset({"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIALS", "PAT"})
MAMBA_CACHE_FACTOR = 5

RULES: dict[str, Rule] = {}
#: Rules that report what SGLang silently changes (the profile still starts): warnings, not errors.
WARNINGS: dict[str, Rule] = {}

#: Rules stricter than SGLang on purpose: SGLang would start the profile, servectl refuses it. Listed in this
#: one place (the differential tests against the real parser exclude exactly these by name), with the reason.
POLICY_RULES: dict[str, str] = {
    "engine.duplicate_flag": "SGLang takes the last of two spellings; a profile sets each flag in one place",
    "engine.api_key_flag": "a key on the command line shows in docker inspect and ps; it comes from a file",
    "engine.admin_api_key_flag": "the admin key, as the API key: never written in a profile, read from a file",
    "serve.role_port": "bench profiles stay off the production port clients use",
    "serve.api_key": "a server reachable from other machines needs an API key",
    "engine.env_secrets": "secrets are passed by reference, never written in a profile",
    "status.pins": "a promoted profile pins its image and model",
    "gpus.parallelism": "tp x dp must use exactly the GPUs the profile names",
    "gpus.reserve_waiver": "a waiver needs a reserve to waive",
    "engine.multinode_flags": "per-node flags come from `servectl render`",
    "engine.mamba_cache": "this model family's launcher wants >= 5 mamba slots per running request",
    "engine.hicache": "hicache-size without the hierarchical cache does nothing",
    "engine.context": "a context longer than the KV pool cannot hold one request",
    "speculative.adaptive": "SGLang silently drops an adaptive ladder it cannot use; servectl refuses it",
    "health.expect_log": "a pattern the engine never prints would fail a healthy start",
    "swap.standby": "a warm standby without the memory saver could not release the cards",
    "container.escape": "the Docker socket or a writable system folder in the container hands it the host",
}


#: Rules that port a check SGLang 0.5.23 runs after parsing, before loading weights (its ServerArgs resolution):
#: the real parser takes the argv, the server then refuses to start. Each cites where SGLang raises.
SGLANG_RULES: dict[str, str] = {
    "speculative.algorithm": "sglang/srt/speculative/spec_info.py SpeculativeAlgorithm.from_string",
    "speculative.draft_model": "sglang/srt/arg_groups/speculative_hook.py (DFLASH)",
    "speculative.draft_window": "sglang/srt/arg_groups/speculative_hook.py handle_speculative_decoding",
    "engine.mamba_states": "sglang/srt/arg_groups/mamba_hook.py",
    "engine.int8_mamba_checkpoint": "sglang/srt/arg_groups/mamba_hook.py handle_int8_mamba_checkpoint",
    "engine.dsa_backends": "sglang/srt/arg_groups/overrides.py _check_dsa_backend_constraints",
    "swap.standby_engine": "what kills or refuses a warm standby's engine (each message cites its source)",
}


def rule(name: str, *, warn: bool = False) -> Callable[[Rule], Rule]:
    """Register a named rule (``warn``: a warning about something SGLang changes silently)."""

    def register(func: Rule) -> Rule:
        (WARNINGS if warn else RULES)[name] = func
        return func

    return register


_SETTINGS: dict[tuple[int, Path], tuple[Profile, dict[str, Setting]]] = {}


def settings(p: Profile, catalogs: Path) -> dict[str, Setting]:
    """The engine settings of ``p`` by dest, wherever and however written (see ``effective_settings``), with
    its flag catalog found in the catalog folder ``catalogs``."""
    hit = _SETTINGS.get((id(p), catalogs))
    if hit is not None and hit[0] is p:
        return hit[1]
    try:
        result = effective_settings(p, catalog_for(p, catalogs=catalogs))
    except (KeyError, ValueError):  # reported by the engine.catalog rule
        result = {}
    if len(_SETTINGS) > 32:
        _SETTINGS.clear()
    _SETTINGS[(id(p), catalogs)] = (p, result)
    return result


def _value(p: Profile, catalogs: Path, dest: str, default: object = None) -> object:
    setting = settings(p, catalogs).get(dest)
    return default if setting is None else setting.value


def _field(p: Profile, catalogs: Path, dest: str, fallback: PathKey) -> PathKey:
    setting = settings(p, catalogs).get(dest)
    return fallback if setting is None else setting.field


#: SpeculativeAlgorithm members of 0.5.23 (sglang/srt/speculative/spec_info.py) and its alias NEXTN -> EAGLE.
SPECULATIVE_ALGORITHMS = frozenset(
    {"DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM", "NEXTN"}
)


def _algorithm(p: Profile, catalogs: Path) -> str | None:
    """The algorithm as SGLang resolves it: upper-cased, NEXTN read as EAGLE."""
    raw = _value(p, catalogs, "speculative_algorithm")
    if not isinstance(raw, str):
        return None
    upper = raw.upper()
    return "EAGLE" if upper == "NEXTN" else upper


@rule("speculative.adaptive")
def adaptive_speculative(p: Profile, catalogs: Path) -> RuleResult:
    """An adaptive ladder needs EAGLE/EAGLE3 (NEXTN is EAGLE), top-k 1, and num_steps on the ladder.

    What SGLang fills in itself is fine: top-k omitted is 1, num_steps omitted is the ladder's middle step
    (sglang/srt/arg_groups/speculative_hook.py ``_init_adaptive_speculative_params``).
    """
    spec = p.engine.speculative
    if spec is None or spec.adaptive_steps is None:
        return
    base: PathKey = ("engine", "speculative")
    algorithm = _algorithm(p, catalogs)
    if algorithm not in ("EAGLE", "EAGLE3"):
        yield (
            _field(p, catalogs, "speculative_algorithm", (*base, "algorithm")),
            (
                f"adaptive_steps needs algorithm EAGLE or EAGLE3, not {algorithm} "
                "(SGLang silently falls back to static steps); change the algorithm or drop adaptive_steps"
            ),
        )
    topk = _value(p, catalogs, "speculative_eagle_topk")
    if topk not in (None, 1):
        yield (
            _field(p, catalogs, "speculative_eagle_topk", (*base, "eagle_topk")),
            f"adaptive_steps needs eagle_topk: 1 (got {topk}); SGLang ignores the ladder otherwise",
        )
    steps = _value(p, catalogs, "speculative_num_steps")
    if steps is not None and steps not in spec.adaptive_steps:
        yield (
            _field(p, catalogs, "speculative_num_steps", (*base, "num_steps")),
            (
                f"{steps} is not one of adaptive_steps {spec.adaptive_steps}; SGLang refuses to start "
                f"(--speculative-num-steps={steps} is not in the adaptive config candidate_steps) - "
                "set num_steps to one of them or leave it out"
            ),
        )


@rule("speculative.adaptive_disabled", warn=True)
def adaptive_silently_disabled(p: Profile, catalogs: Path) -> RuleResult:
    """SGLang turns adaptive speculation off with two-batch overlap or attention DP (and says so once)."""
    adaptive = (p.engine.speculative is not None and p.engine.speculative.adaptive_steps is not None) or (
        _value(p, catalogs, "speculative_adaptive") is True
    )
    if not adaptive:
        return
    reasons = []
    if _value(p, catalogs, "enable_two_batch_overlap") is True:
        reasons.append(("enable_two_batch_overlap", "two-batch overlap"))
    if _value(p, catalogs, "enable_dp_attention") is True or (_value(p, catalogs, "attn_dp_size", 1) or 1) != 1:
        reasons.append(("enable_dp_attention", "attention DP"))
    for dest, what in reasons:
        yield (
            _field(p, catalogs, dest, ("engine", "args")),
            (
                f"SGLang disables adaptive speculative decoding with {what} "
                "(speculative_adaptive disabled: ... Falling back to static speculative params); "
                f"drop {what} or the adaptive ladder"
            ),
        )


@rule("speculative.algorithm")
def speculative_algorithm_known(p: Profile, catalogs: Path) -> RuleResult:
    """The algorithm is one SGLang 0.5.23 knows (any case; NEXTN is EAGLE)."""
    raw = _value(p, catalogs, "speculative_algorithm")
    if isinstance(raw, str) and raw.upper() not in SPECULATIVE_ALGORITHMS:
        known = ", ".join(sorted(SPECULATIVE_ALGORITHMS))
        yield (
            _field(p, catalogs, "speculative_algorithm", ("engine", "speculative", "algorithm")),
            f"SGLang refuses it: Unknown speculative algorithm name: {raw} (one of {known})",
        )


@rule("speculative.draft_model")
def draft_model_required(p: Profile, catalogs: Path) -> RuleResult:
    """DFLASH reads its draft from --speculative-draft-model-path (SGLang: speculative_hook.py)."""
    if _algorithm(p, catalogs) == "DFLASH" and _value(p, catalogs, "speculative_draft_model_path") is None:
        yield (
            _field(p, catalogs, "speculative_algorithm", ("engine", "speculative", "algorithm")),
            (
                "SGLang refuses it: DFLASH speculative decoding requires setting --speculative-draft-model-path; "
                "set engine.speculative.draft_model_path"
            ),
        )


@rule("speculative.draft_window")
def draft_window(p: Profile, catalogs: Path) -> RuleResult:
    """Sink and window sizes of the draft KV cache, as SGLang's handle_speculative_decoding checks them."""
    window = _value(p, catalogs, "speculative_draft_window_size")
    sink = _value(p, catalogs, "speculative_draft_sink_size")
    if isinstance(window, int) and window <= 0:
        yield (
            _field(p, catalogs, "speculative_draft_window_size", ("engine", "args")),
            f"SGLang refuses it: --speculative-draft-window-size must be positive, got {window}",
        )
    if isinstance(sink, int) and sink < 0:
        yield (
            _field(p, catalogs, "speculative_draft_sink_size", ("engine", "args")),
            f"SGLang refuses it: --speculative-draft-sink-size must be non-negative, got {sink}",
        )
    if sink is not None and window is None:
        yield (
            _field(p, catalogs, "speculative_draft_sink_size", ("engine", "args")),
            "SGLang refuses it: --speculative-draft-sink-size requires --speculative-draft-window-size",
        )


@rule("engine.mamba_states")
def mamba_states_per_path(p: Profile, catalogs: Path) -> RuleResult:
    """--mamba-max-states-per-path is -1 (unlimited) or positive (SGLang: mamba_hook.py)."""
    states = _value(p, catalogs, "mamba_max_states_per_path")
    if isinstance(states, int) and (states == 0 or states < -1):
        yield (
            _field(p, catalogs, "mamba_max_states_per_path", ("engine", "args")),
            (
                "SGLang refuses it: --mamba-max-states-per-path must be -1 (unlimited) or a positive integer, "
                f"got {states}"
            ),
        )


@rule("engine.int8_mamba_checkpoint")
def int8_mamba_checkpoint(p: Profile, catalogs: Path) -> RuleResult:
    """The int8 mamba checkpoint pool is not int8-aware on the host-offload path (SGLang: mamba_hook.py)."""
    if (
        _value(p, catalogs, "enable_int8_mamba_checkpoint") is True
        and _value(p, catalogs, "enable_hierarchical_cache") is True
    ):
        yield (
            _field(p, catalogs, "enable_int8_mamba_checkpoint", ("engine", "args")),
            (
                "SGLang refuses it: --enable-int8-mamba-checkpoint is not supported together with "
                "--enable-hierarchical-cache: the host-offload path is not int8-aware. Disable one of them."
            ),
        )


@rule("engine.dsa_backends")
def dsa_backends(p: Profile, catalogs: Path) -> RuleResult:
    """DSA backend constraints on CUDA (SGLang: overrides.py ``_check_dsa_backend_constraints``)."""
    prefill, decode = _value(p, catalogs, "dsa_prefill_backend"), _value(p, catalogs, "dsa_decode_backend")
    for dest, backend in (("dsa_prefill_backend", prefill), ("dsa_decode_backend", decode)):
        if backend == "triton":  # servectl starts NVIDIA GPUs only
            yield (
                _field(p, catalogs, dest, ("engine", "args")),
                (
                    "SGLang refuses it: The triton DSA backend is only supported on ROCm/HIP. Pick an alternative "
                    "DSA backend for CUDA (flashmla_kv on Hopper, trtllm on Blackwell)."
                ),
            )
    fp8 = _value(p, catalogs, "kv_cache_dtype") == "fp8_e4m3"
    if fp8 and "tilelang" in (prefill, decode) and (prefill, decode) != ("tilelang", "tilelang"):
        yield (
            _field(
                p,
                catalogs,
                "dsa_prefill_backend" if prefill != "tilelang" else "dsa_decode_backend",
                ("engine", "args"),
            ),
            (
                "SGLang refuses it: CUDA TileLang FP8 KV requires both DSA backends to be tilelang; "
                "raw and scaled FP8 KV layouts cannot be mixed."
            ),
        )


@rule("engine.mamba_cache")
def mamba_cache(p: Profile, catalogs: Path) -> RuleResult:
    """max-mamba-cache-size > 0 (SGLang fails in pool setup, after the weights load) and, by this model
    family's launcher rule, >= 5 x max_running_requests; read wherever and however they are written."""
    size = _value(p, catalogs, "max_mamba_cache_size")
    if not isinstance(size, int) or isinstance(size, bool):
        return
    where = _field(p, catalogs, "max_mamba_cache_size", ("engine", "args", "max-mamba-cache-size"))
    if size <= 0:
        yield where, f"{size} leaves no mamba state slots: SGLang fails when it sets up the pool; use a positive size"
        return
    running = _value(p, catalogs, "max_running_requests")
    if isinstance(running, int) and not isinstance(running, bool):
        need = MAMBA_CACHE_FACTOR * running
        if size < need:
            yield (
                where,
                (
                    f"{size} is below {MAMBA_CACHE_FACTOR} x max_running_requests ({running}) = {need}; "
                    f"raise it to at least {need} or lower max_running_requests"
                ),
            )


@rule("gpus.parallelism")
def parallel_matches_devices(p: Profile, catalogs: Path) -> RuleResult:
    """tp x dp = number of GPU devices (when devices are named), times the nodes of a multi-node profile."""
    devices = p.gpus.devices
    tp, dp_size = _value(p, catalogs, "tp_size", p.engine.tp), _value(p, catalogs, "dp_size", p.engine.dp)
    if not isinstance(tp, int) or not isinstance(dp_size, int):
        return
    if devices and tp * dp_size != len(devices) * p.nodes:
        dp = f" x dp {dp_size}" if dp_size != 1 else ""
        per_node = f" on each of {p.nodes} nodes" if p.nodes > 1 else ""
        total = " times the nodes" if p.nodes > 1 else ""
        yield (
            ("engine", "tp"),
            (
                f"tp {tp}{dp} does not match {len(devices)} GPU devices {devices}{per_node}; "
                f"make tp x dp equal the number of devices{total}"
            ),
        )


#: Flags that join a process to a multi-node group (by the catalog's dest name).
MULTINODE_DESTS = frozenset({"nnodes", "node_rank", "dist_init_addr"})


@rule("engine.multinode_flags")
def multinode_flags_from_renderer(p: Profile, catalogs: Path) -> RuleResult:
    """--nnodes, --node-rank and --dist-init-addr are added per pod by `servectl render`, never written."""
    try:
        catalog = catalog_for(p, catalogs=catalogs)
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
def promoted_is_pinned(p: Profile, catalogs: Path) -> RuleResult:
    """A promoted profile pins its image by digest and its model by revision."""
    if p.status != "promoted":
        return
    if not p.image.digest:
        yield ("image", "digest"), "a promoted profile pins its image: add image.digest (sha256:...)"
    if not p.model.revision:
        yield ("model", "revision"), "a promoted profile pins its model: add model.revision (40-hex commit)"


@rule("swap.standby")
def standby_needs_memory_saver(p: Profile, catalogs: Path) -> RuleResult:
    """A warm standby needs the engine's memory saver: in the catalog, and not turned off in ``args``."""
    if p.swap.standby != "warm":
        return
    try:
        catalog = catalog_for(p, catalogs=catalogs)
    except (KeyError, ValueError):  # reported by the engine.catalog rule
        return
    if catalog.option(MEMORY_SAVER_FLAG) is None:
        yield (
            ("swap", "standby"),
            (
                f"warm needs {MEMORY_SAVER_FLAG}, which catalog {p.engine.catalog} does not have; "
                "use an engine build with SGLang's memory saver or set swap.standby: none"
            ),
        )
    for key, value in p.engine.args.items():
        try:
            flag = catalog.expand("--" + key)
        except ArgvError:
            continue  # reported by the engine.catalog rule
        if value is False and flag in (MEMORY_SAVER_FLAG, WEIGHTS_CPU_BACKUP_FLAG):
            yield (
                ("engine", "args", key),
                (f"false turns off what swap.standby: warm needs; remove engine.args.{key} or set swap.standby: none"),
            )


@rule("swap.standby_engine")
def standby_engine_restrictions(p: Profile, catalogs: Path) -> RuleResult:
    """A warm standby's engine: nothing the memory saver refuses, nothing a release or resume kills."""
    yield from standby_engine_problems(p, settings(p, catalogs))


@rule("serve.role_port")
def role_port(p: Profile, catalogs: Path) -> RuleResult:
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
def non_loopback_needs_key(p: Profile, catalogs: Path) -> RuleResult:
    """Binding anything but loopback requires an API key source."""
    s = p.serve
    if not LOOPBACK.match(s.host) and not (s.api_key_env or s.api_key_file):
        yield (
            ("serve", "host"),
            (f"{s.host} is reachable from other machines; set serve.api_key_env (or api_key_file) or bind 127.0.0.1"),
        )
    keys = s.api_key_env or s.api_key_file or s.admin_api_key_env or s.admin_api_key_file
    if keys and not (len(p.image.entrypoint) == 3 and p.image.entrypoint[1] == "-m"):
        yield ("image", "entrypoint"), "an API or admin key needs an entrypoint of the form [python3, -m, module]"


@rule("engine.hicache")
def hicache_needs_hierarchical(p: Profile, catalogs: Path) -> RuleResult:
    """hicache-size needs the hierarchical cache on."""
    on = _value(p, catalogs, "enable_hierarchical_cache") is True
    if "hicache_size" in settings(p, catalogs) and not on:
        yield (
            _field(p, catalogs, "hicache_size", ("engine", "args", "hicache-size")),
            ("needs the hierarchical cache: add `enable-hierarchical-cache: true` or drop hicache-size"),
        )


@rule("engine.context")
def context_fits_total(p: Profile, catalogs: Path) -> RuleResult:
    """context_length <= max_total_tokens where both are set."""
    e = p.engine
    if e.context_length is not None and e.max_total_tokens is not None and e.context_length > e.max_total_tokens:
        yield (
            ("engine", "context_length"),
            (f"{e.context_length} exceeds max_total_tokens {e.max_total_tokens}; one request could never fit"),
        )


@rule("gpus.reserve_waiver")
def waiver_means_something(p: Profile, catalogs: Path) -> RuleResult:
    """A waiver only makes sense with a reserve to waive."""
    if p.gpus.reserve_waiver and p.gpus.vram_reserve_mib == 0:
        yield ("gpus", "reserve_waiver"), "vram_reserve_mib is 0: there is nothing to waive; drop the waiver"


@rule("engine.env_secrets")
def no_literal_secrets(p: Profile, catalogs: Path) -> RuleResult:
    """Secret-looking environment variables are passed by reference (``${NAME}``), never written."""
    for name, value in p.engine.env.items():
        looks_secret = name.upper().rsplit("_", 1)[-1] in SECRET_WORDS
        if looks_secret and value != "${" + name + "}":
            yield (
                ("engine", "env", name),
                (f"looks like a secret; write `{name}: ${{{name}}}` to pass it from your environment"),
            )


@rule("health.expect_log")
def expect_log_is_printable(p: Profile, catalogs: Path) -> RuleResult:
    """Each expect_log pattern matches a line the engine build can print (its log catalog, from its source)."""
    if not p.health.expect_log:
        return
    from servectl.profile.logcatalog import LogCatalog  # 450 kB of lines: read only for profiles that need it

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
def flags_in_catalog(p: Profile, catalogs: Path) -> RuleResult:
    """Every compiled flag exists in the profile's catalog with a value of the right type and choice."""
    try:
        catalog = catalog_for(p, catalogs=catalogs)
    except KeyError as err:
        yield ("engine", "catalog"), str(err.args[0])
        return
    except ValueError as err:
        yield ("engine", "catalog_extend"), str(err)
        return
    yield from catalog_problems(p, catalog)


def _policy_flags(name: str) -> Rule:
    def check(p: Profile, catalogs: Path) -> RuleResult:
        try:
            catalog = catalog_for(p, catalogs=catalogs)
        except (KeyError, ValueError):
            return
        for rule_name, path, message in policy_flag_problems(p, catalog):
            if rule_name == name:
                yield path, message

    check.__doc__ = POLICY_RULES[name]
    return check


rule("engine.duplicate_flag")(_policy_flags("engine.duplicate_flag"))
rule("engine.api_key_flag")(_policy_flags("engine.api_key_flag"))
rule("engine.admin_api_key_flag")(_policy_flags("engine.admin_api_key_flag"))


def _risks(p: Profile) -> Iterator[Risk]:
    return container_risks(
        network=p.serve.network,
        ipc=p.container.ipc,
        mounts=[(m.source, m.target, m.read_only) for m in p.container.mounts],
        env=p.engine.env,
    )


@rule("container.escape")
def container_escape(p: Profile, catalogs: Path) -> RuleResult:
    """The Docker socket, or a writable system folder of the host, mounted into the container."""
    yield from ((r.path, r.message) for r in _risks(p) if r.error)


@rule("container.risk", warn=True)
def container_risk(p: Profile, catalogs: Path) -> RuleResult:
    """Host network, host IPC, a loader variable: allowed, each said with its reason."""
    yield from ((r.path, r.message) for r in _risks(p) if not r.error)


def profile_warnings(loaded: LoadedProfile) -> list[Problem]:
    """What SGLang would change silently in this profile; one located warning per finding."""
    return _located(loaded, WARNINGS)


def check_profile(loaded: LoadedProfile) -> list[Problem]:
    """Run every rule; one located problem per finding."""
    return _located(loaded, RULES)


def _located(loaded: LoadedProfile, rules: Mapping[str, Rule]) -> list[Problem]:
    return [
        loaded.problem(path, message, rule=name)
        for name, func in rules.items()
        for path, message in func(loaded.profile, loaded.catalogs)
    ]
