"""The serving-profile format: pydantic v2 models, closed sets as ``Literal``, ``extra="forbid"``.

A profile is one YAML file under a profile folder; :mod:`servectl.profile.loader` finds, merges (``extends``) and
validates it, and turns pydantic errors into one-line problems with file and line. Cross-field rules that
need the flag catalog live in :mod:`servectl.profile.rules`; the JSON Schema shipped in ``schema/`` is generated
from these models (``servectl schema``).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from servectl.profile.catalog import DEFAULT_CATALOG

SCHEMA_VERSION = 1

Sha256Digest = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$", description="sha256:<64 hex>")]
GitRevision = Annotated[str, Field(pattern=r"^[0-9a-f]{40}$", description="40-hex commit of the model repo")]
ProfileName = Annotated[str, Field(pattern=r"^_?[a-z0-9][a-z0-9._-]*$", max_length=63)]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
ArgValue = bool | int | float | str | list[int | float | str] | dict[str, object]

#: Architectures by the name the profile uses and NVML's compute capability.
ARCH_COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    "sm80": (8, 0),
    "sm86": (8, 6),
    "sm89": (8, 9),
    "sm90": (9, 0),
    "sm100": (10, 0),
    "sm103": (10, 3),
    "sm120": (12, 0),
    "sm121": (12, 1),
}
Arch = Literal["sm80", "sm86", "sm89", "sm90", "sm100", "sm103", "sm120", "sm121"]


#: Upper bounds for numbers that reach Docker or SGLang: both parse them as 32-bit (SGLang's ints, Docker's
#: stop timeout) or the host cannot honour more (a day of startup, an hour of stop grace).
INT32_MAX = 2**31 - 1
MAX_STOP_GRACE_S = 3600
MAX_TIMEOUT_S = 7 * 86400
MAX_GPUS = 1024

#: Text fields that never reach argv, env or a file name: newlines and tabs are fine there.
_FREE_TEXT_FIELDS = frozenset({"description", "reserve_waiver", "standby_ram_waiver"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _control_free(value: object, where: str) -> None:
    """Raise when a string in ``value`` holds a control character (NUL, newline, ESC...)."""
    if isinstance(value, str):
        found = _CONTROL.search(value)
        if found:
            raise ValueError(
                f"{where} holds the control character {found.group()!r}; "
                "names, paths and flag values go to the engine command line: remove it"
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            _control_free(key, where)
            _control_free(item, where)
    elif isinstance(value, list | tuple):
        for item in value:
            _control_free(item, where)


class _Strict(BaseModel):
    # allow_inf_nan=False: .inf or .nan in a timeout or fraction is a typo, and Docker's JSON cannot carry it.
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _no_control_characters(cls, value: object, info: ValidationInfo) -> object:
        if info.field_name not in _FREE_TEXT_FIELDS:
            _control_free(value, "the value")
        return value


class ImageSpec(_Strict):
    """The engine image. Promoted profiles pin ``digest``; ``build: standin`` lets servectl build it locally."""

    ref: str = Field(min_length=1, description="image reference: repository[:tag]")
    digest: Sha256Digest | None = Field(default=None, description="pinned image digest (sha256:...)")
    entrypoint: list[str] = Field(
        default_factory=lambda: ["python3", "-m", "sglang.launch_server"],
        min_length=1,
        description="the command that starts the engine; SGLang flags follow it",
    )
    build: Literal["standin"] | None = Field(
        default=None, description="'standin': servectl builds this image itself when it is missing"
    )

    @property
    def pinned_ref(self) -> str:
        """What runs: ``ref@digest`` when a digest is pinned, else ``ref``."""
        return f"{self.ref}@{self.digest}" if self.digest else self.ref

    @field_validator("ref")
    @classmethod
    def _ref_has_no_digest(cls, value: str) -> str:
        if "@" in value:
            raise ValueError("put the digest in image.digest, not in image.ref (ref is repository[:tag])")
        return value


class ModelSpec(_Strict):
    """Where the weights are on the host and which revision they must be."""

    path: str = Field(min_length=1, description="host folder with config.json and weights (~ and relative ok)")
    repo: str | None = Field(default=None, pattern=r"^[\w.-]+/[\w.-]+$", description="Hugging Face owner/name")
    revision: GitRevision | None = None
    served_name: str = Field(min_length=1, description="name clients use (--served-model-name)")
    container_path: str = Field(default="/model", pattern=r"^/", description="where the weights are mounted")
    read_only: bool = Field(default=True, description="mount the model folder read-only")
    multimodal: bool = Field(
        default=False, description="the model takes images; false: qualify skips the image/OCR gate and says so"
    )


class GpuSpec(_Strict):
    """Which cards the service uses and what must be true of them."""

    devices: list[Annotated[int, Field(ge=0, le=MAX_GPUS - 1)]] = Field(
        default_factory=list, description="NVML device indices"
    )
    arch: Arch | None = Field(default=None, description="expected architecture, e.g. sm120 (CC 12.0)")
    exclusive: bool = Field(default=True, description="no other process may use these cards")
    vram_reserve_mib: int = Field(
        default=3072,
        ge=0,
        le=2**30,
        description="free MiB each card must keep once the engine runs (estimated from mem fraction)",
    )
    reserve_waiver: str | None = Field(default=None, min_length=10, description="why the reserve is waived")

    @field_validator("devices")
    @classmethod
    def _unique_devices(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError(f"device indices repeat: {value}")
        return value


class ServeSpec(_Strict):
    """Where clients reach the service."""

    host: str = Field(default="127.0.0.1", description="host address the port is bound to")
    port: int = Field(ge=1, le=65535)
    role: Literal["bench", "production"] = Field(description="bench servers never take production ports")
    production_ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(
        default_factory=lambda: [8080], description="ports real clients use"
    )
    network: Literal["bridge", "host"] = Field(
        default="bridge",
        description="bridge: engine binds 0.0.0.0 inside, port published on host; host: engine binds host",
    )
    api_key_env: EnvName | None = Field(default=None, description="env var holding the API key (not the key)")
    api_key_file: str | None = Field(default=None, description="file holding the API key (not the key)")
    admin_api_key_env: EnvName | None = Field(
        default=None, description="env var holding SGLang's --admin-api-key (not the key): release/resume need it"
    )
    admin_api_key_file: str | None = Field(default=None, description="file holding the admin key (not the key)")

    @model_validator(mode="after")
    def _one_key_source(self) -> ServeSpec:
        if self.api_key_env and self.api_key_file:
            raise ValueError("set either api_key_env or api_key_file, not both")
        if self.admin_api_key_env and self.admin_api_key_file:
            raise ValueError("set either admin_api_key_env or admin_api_key_file, not both")
        return self


class SpeculativeSpec(_Strict):
    """MTP / EAGLE speculative decoding."""

    algorithm: Literal["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK"]
    num_steps: int | None = Field(default=None, ge=0, le=INT32_MAX)
    eagle_topk: int | None = Field(default=None, ge=1, le=INT32_MAX)
    num_draft_tokens: int | None = Field(default=None, ge=1, le=INT32_MAX)
    draft_model_path: str | None = None
    adaptive_steps: list[Annotated[int, Field(ge=0, le=INT32_MAX)]] | None = Field(
        default=None,
        min_length=1,
        description="adaptive ladder, e.g. [3, 5]; compiles to the JSON config file",
    )


class CatalogExtension(_Strict):
    """Flags and choices a custom engine image adds to its base catalog."""

    choices: dict[str, list[str]] = Field(default_factory=dict, description="option -> extra accepted values")
    options: list[dict[str, object]] = Field(default_factory=list, description="new options, catalog format")


class EngineSpec(_Strict):
    """SGLang settings. Typed keys for what servectl reasons about; ``args`` for any other flag."""

    catalog: str = Field(
        default=DEFAULT_CATALOG,
        min_length=1,
        description="flag catalog of the engine build: a shipped name, 'image' (extracted from image.ref with "
        "`servectl catalog extract`), an image id sha256:..., or a .json file written by extract --out",
    )
    catalog_extend: CatalogExtension | None = None
    tp: int = Field(default=1, ge=1, le=MAX_GPUS)
    dp: int = Field(default=1, ge=1, le=MAX_GPUS)
    context_length: int | None = Field(default=None, ge=1, le=INT32_MAX)
    max_total_tokens: int | None = Field(default=None, ge=1, le=INT32_MAX)
    max_running_requests: int | None = Field(default=None, ge=1, le=INT32_MAX)
    mem_fraction_static: float | None = Field(default=None, gt=0, le=1)
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    speculative: SpeculativeSpec | None = None
    args: dict[str, ArgValue] = Field(default_factory=dict, description="other flags, name without '--'")
    env: dict[EnvName, str] = Field(default_factory=dict)

    @field_validator("env")
    @classmethod
    def _env_references(cls, value: dict[str, str]) -> dict[str, str]:
        # Docker takes a variable from servectl's environment only when the value is the name itself; any other
        # "${...}" (another name, or inside a longer value) would reach the engine as literal text.
        for key, text in value.items():
            if "${" in text and text != "${" + key + "}":
                raise ValueError(
                    f"env {key}: {text!r} would reach the engine as literal text (only a value of exactly "
                    f"${{{key}}} is taken from servectl's environment); write ${{{key}}} and export {key}, "
                    "or write the value itself"
                )
        return value

    @field_validator("args")
    @classmethod
    def _arg_names(cls, value: dict[str, ArgValue]) -> dict[str, ArgValue]:
        for key in value:
            if key.startswith("-"):
                raise ValueError(f"args key {key!r}: write flag names without the leading '--'")
            if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", key):
                raise ValueError(f"args key {key!r}: flag names are lower-case words joined by '-'")
            arg = value[key]
            for item in arg if isinstance(arg, list) else [arg]:
                if isinstance(item, int) and not isinstance(item, bool) and abs(item) > 2**63 - 1:
                    raise ValueError(f"args key {key!r}: {item} is beyond what the engine parses (64-bit)")
        return value


class MountSpec(_Strict):
    source: str = Field(min_length=1, description="host path (~ and relative to the profile file ok)")
    target: str = Field(pattern=r"^/", description="absolute path in the container")
    read_only: bool = False


UlimitValue = int | Annotated[list[int], Field(min_length=2, max_length=2, description="[soft, hard]")]


class ContainerSpec(_Strict):
    name: str | None = Field(default=None, pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")
    shm_size: str | None = Field(default=None, pattern=r"^\d{1,18}[bkmgBKMG]?$", description="e.g. 32g")
    ipc: Literal["host", "private", "shareable"] | None = None
    mounts: list[MountSpec] = Field(default_factory=list)
    stop_grace_s: int = Field(default=30, ge=0, le=MAX_STOP_GRACE_S, description="SIGTERM to SIGKILL")
    labels: dict[str, str] = Field(default_factory=dict)
    ulimits: dict[str, UlimitValue] | None = Field(
        default=None,
        description="e.g. {memlock: -1, stack: 67108864} or {nofile: [1024, 4096]}; default: SGLang's own "
        "(memlock unlimited, 64 MiB stack; none for the stand-in)",
    )
    restart: str | None = Field(
        default=None,
        pattern=r"^(no|always|unless-stopped|on-failure(:\d+)?)$",
        description="Docker restart policy (default: none)",
    )
    init: bool = Field(default=True, description="run an init process as PID 1 (docker run --init)")


class AdoptedSpec(_Strict):
    """Where an adopted profile came from: a container servectl did not start (``servectl adopt``).

    While that container runs with the profile's configuration, ``status`` lists it under the profile and
    ``swap`` treats it as the profile's running service.
    """

    container: str = Field(min_length=1, description="name of the adopted container")
    container_id: str | None = Field(default=None, pattern=r"^[0-9a-f]{12,64}$")
    compose_file: str | None = Field(default=None, description="compose file it was adopted from")
    compose_service: str | None = None


class HealthSpec(_Strict):
    startup_timeout_s: float = Field(default=1800, gt=0, le=MAX_TIMEOUT_S)
    stall_timeout_s: float = Field(
        default=600, gt=0, le=MAX_TIMEOUT_S, description="fail when the log is silent this long"
    )
    expect_log: list[str] = Field(default_factory=list, description="regexes that must appear before ready")

    @field_validator("expect_log")
    @classmethod
    def _valid_regexes(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"expect_log pattern {pattern!r} is not a valid regex: {e}") from None
        return value


class ConflictSpec(_Strict):
    """A service that must be stopped first (and is restored afterwards)."""

    compose_file: str | None = None
    container: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ConflictSpec:
        if bool(self.compose_file) == bool(self.container):
            raise ValueError("a conflict names exactly one of compose_file or container")
        return self


class SwapSpec(_Strict):
    """How ``servectl swap`` leaves this service when it swaps away, and how it comes back."""

    standby: Literal["none", "warm"] = Field(
        default="none",
        description="warm: start with SGLang's memory saver; a swap away releases the cards' memory "
        "(weights and KV cache) but keeps the container, and a swap back resumes it in seconds. "
        "Costs host RAM for the CPU copy of the weights",
    )
    standby_max_cycles: int | None = Field(
        default=None,
        ge=1,
        description="after this many release/resume cycles of one container, a swap away stops it and the way "
        "back is a cold start (every resume is held to the fingerprint taken at the container's first start either "
        "way); none: no limit",
    )
    standby_retain_backup: bool = Field(
        default=False,
        description="keep the pinned host buffer of the weights' CPU copy between cycles "
        "(TMS_RETAIN_CPU_BACKUP=1 in the engine's environment): the first release pays for it, every later "
        "release and resume costs about a second (~50 GiB/s on an H100 instead of ~2-3 GiB/s out), and that host "
        "RAM stays pinned for as long as the service runs",
    )
    standby_prime: bool = Field(
        default=False,
        description="with standby_retain_backup: release and resume once right after the service first passes "
        "its gate, before it is admitted, so the pinned buffer's allocation is paid at start and not by the "
        "first swap away",
    )
    standby_ram_waiver: str | None = Field(
        default=None,
        min_length=10,
        description="why preflight may leave less than its reserve of host RAM free beside the pinned CPU copies "
        "of the weights (this service's and those of the running warm services): host.standby_ram then passes "
        "with this reason when the copies fit but the reserve does not",
    )


class Profile(_Strict):
    """One serving profile, after ``extends`` is resolved."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        json_schema_extra={"$id": "https://servectl.dev/schema/profile-v1.json"},
    )

    name: ProfileName
    description: str = ""
    status: Literal["candidate", "promoted", "retired"] = "candidate"
    extends: str | None = Field(default=None, description="base profile this one merges over")
    rollback: ProfileName | None = Field(default=None, description="target of a plain `servectl swap`")
    swap: SwapSpec = Field(default_factory=SwapSpec, description="what a swap away from this service does")
    nodes: int = Field(default=1, ge=1, le=MAX_GPUS, description="nodes for multi-node rendering (k8s LeaderWorkerSet)")
    evidence: str | None = Field(default=None, description="promotion evidence record (set by `promote`)")
    qualify: str | None = Field(
        default=None,
        min_length=1,
        description="qualification suite for `servectl qualify`: a shipped suite name (default) or a YAML file "
        "relative to this profile",
    )
    image: ImageSpec
    model: ModelSpec
    gpus: GpuSpec = Field(default_factory=GpuSpec)
    serve: ServeSpec
    engine: EngineSpec = Field(default_factory=EngineSpec)
    container: ContainerSpec = Field(default_factory=ContainerSpec)
    health: HealthSpec = Field(default_factory=HealthSpec)
    conflicts: list[ConflictSpec] = Field(default_factory=list)
    adopted: AdoptedSpec | None = Field(default=None, description="set by `servectl adopt`")
    template: str | None = Field(
        default=None,
        description="marks a template still to be filled in, saying how (e.g. the `servectl adopt` command); "
        "a template never loads",
    )


def profile_json_schema() -> dict[str, object]:
    """The JSON Schema of a profile file (a base file may omit required keys; editors still complete)."""
    schema = Profile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "servectl profile"
    return schema
