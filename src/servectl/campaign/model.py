"""The campaign file: pydantic v2 models, closed sets as ``Literal``, ``extra="forbid"``.

A campaign is a bring-up sweep over variants of one base profile, decided by measurement against an
incumbent measured in the same run. The file names the base profile, the variants (an explicit list of
overrides, or axes whose product is taken, less the excluded combinations), the workload (named operating
points), the gates a variant passes first, the incumbent, the decision policy, the constraints, the budget and
the operating-point objectives. :mod:`servectl.campaign.load` reads it with the line of every key; the JSON
Schema shipped as ``schema/campaign.schema.json`` is generated from these models.

Example::

    # yaml-language-server: $schema=../schema/campaign.schema.json
    name: demo-speed
    base: demo
    variants:
      - name: fast
        overrides: {engine: {env: {STANDIN_TOKEN_RATE: "400"}}}
    workload:
      points:
        - {name: c1, prompt_tokens: 1024, concurrency: 1, max_tokens: 128}
    decision: {primary_point: c1}
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Names of campaigns, variants, points and objectives: they become file names and profile-name parts.
Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=40)]
ProfileRef = Annotated[str, Field(pattern=r"^_?[a-z0-9][a-z0-9._-]*$", max_length=63)]

#: What a point measures, and whether more is better. ``decode_tok_s``, ``ttft_s`` and ``prefill_tok_s`` are
#: the p50 over a repeat's measured requests; ``output_tok_per_min`` is the repeat's good output tokens over
#: its wall time (bench's ``output_tok_per_min``).
Metric = Literal["decode_tok_s", "output_tok_per_min", "prefill_tok_s", "ttft_s"]
#: The fraction of each side's repeats each decision method trims at each end.
METHOD_TRIM: dict[str, float] = {"yuen-log": 0.2, "welch-log": 0.0}

HIGHER_IS_BETTER: dict[str, bool] = {
    "decode_tok_s": True,
    "output_tok_per_min": True,
    "prefill_tok_s": True,
    "ttft_s": False,
}

#: An axis key: a dotted profile field path (``engine.args.speculative-num-steps``).
_AXIS_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_][A-Za-z0-9_.-]*)*$")
AxisValue = bool | int | float | str | None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Variant(_Strict):
    """One variant: the base profile with these overrides merged over it (maps merge, lists and scalars
    replace, as ``extends`` does)."""

    name: Name
    description: str = ""
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="profile keys merged over the base, e.g. {engine: {args: {...}}}"
    )

    @field_validator("overrides")
    @classmethod
    def _no_identity(cls, value: dict[str, Any]) -> dict[str, Any]:
        taken = sorted({"name", "extends", "status", "evidence"} & set(value))
        if taken:
            raise ValueError(f"{', '.join(taken)} cannot be overridden: the campaign sets them for each variant")
        return value


class Point(_Strict):
    """One operating point: a prompt length, a concurrency and the completion length asked for."""

    name: Name
    prompt_tokens: int = Field(ge=1, le=10_000_000)
    concurrency: int = Field(default=1, ge=1, le=4096)
    max_tokens: int = Field(default=256, ge=2, le=1_000_000)
    prefix: Literal["cold", "warm"] = Field(
        default="cold",
        description="cold: unique prompts; warm: prompts sharing all but their tail (bench's shared_prefix), the "
        "engine's prefix cache warmed by a first request",
    )


class Workload(_Strict):
    """Where each variant is measured: the operating points, and how a repeat asks."""

    points: list[Point] = Field(min_length=1)
    warmup: bool = True
    fixed_length: bool = True
    timeout_s: float = Field(default=900.0, gt=0, le=86400)

    @field_validator("points")
    @classmethod
    def _unique_points(cls, value: list[Point]) -> list[Point]:
        names = [p.name for p in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"point names must be unique; repeated: {', '.join(twice)}")
        return value


class CampaignGates(_Strict):
    """The qualification a variant passes before it is measured (a failed gate: ``rejected-gate-<id>``)."""

    suite: str | None = Field(default=None, description="a shipped suite name or a suite file (null: no gates)")
    only: list[str] = Field(default_factory=list, description="run only these gate ids of the suite")


class Incumbent(_Strict):
    """What the variants are decided against: a profile measured in this campaign, interleaved with them.

    ``bench_runs`` and ``reference_csv`` are earlier figures of it (read as ``bench compare`` reads them, paths
    relative to the campaign file), shown beside the incumbent measured here and never deciding
    (:mod:`servectl.campaign.references`)."""

    profile: ProfileRef | None = Field(default=None, description="default: the base profile")
    bench_runs: list[str] = Field(
        default_factory=list, description="earlier `bench --out` folders of it, shown beside the rows (never decide)"
    )
    reference_csv: str | None = Field(
        default=None, description="a typed reference CSV (bench compare's), shown beside the rows (never decides)"
    )


class Decision(_Strict):
    """How a variant is decided against the incumbent.

    Per point, the ratio of the variant's to the incumbent's (trimmed) geometric mean of ``metric`` over the
    repeats, with a confidence interval on the log scale (:mod:`servectl.campaign.stats`): ``yuen-log``, Yuen's
    trimmed Welch t (20 % of each side's repeats trimmed at each end, so one outlier repeat in five is left out),
    or ``welch-log``, Welch's t on all of them. Accepted when the
    primary point's gain is significant (its interval's lower end above ``min_gain_pct``), no other point's
    lower end is below ``-regression_tolerance_pct`` and every gate passed; rejected for a regression when a
    point's interval lies wholly below ``-regression_tolerance_pct``. With ``sequential: alpha-spending`` the
    variant is looked at after each repeat from ``min_repeats`` to ``max_repeats``, each look spending part of
    ``alpha`` (Lan-DeMets, ``spending``: O'Brien-Fleming or Pocock type, group-sequential boundaries), so a
    settled variant stops being measured while the false-accept rate over all looks stays near ``alpha``
    (measured: benchmarks/bench_campaign_decision.py); ``fixed`` looks once, at ``max_repeats``.
    """

    metric: Metric = "decode_tok_s"
    primary_point: Name
    min_gain_pct: float = Field(default=0.0, ge=0, le=1000, description="the gain worth a change (percent)")
    regression_tolerance_pct: float = Field(
        default=3.0, ge=0, le=100, description="the loss tolerated at any point (percent)"
    )
    method: Literal["yuen-log", "welch-log"] = Field(
        default="yuen-log",
        description="yuen-log: Yuen's 20 %-trimmed Welch t on log values (an outlier repeat is trimmed); "
        "welch-log: Welch's t on log values",
    )
    alpha: float = Field(
        default=0.025,
        gt=0,
        lt=0.5,
        description="one-sided false-accept rate per variant over all its looks; intervals are 1 - 2 alpha (95 %)",
    )
    sequential: Literal["alpha-spending", "fixed"] = "alpha-spending"
    spending: Literal["obrien-fleming", "pocock"] = Field(
        default="obrien-fleming", description="the alpha-spending function of the looks (Lan-DeMets)"
    )
    min_repeats: int = Field(default=3, ge=2, le=1000)
    max_repeats: int = Field(default=8, ge=2, le=1000)

    @model_validator(mode="after")
    def _repeats_ordered(self) -> Decision:
        if self.max_repeats < self.min_repeats:
            raise ValueError(f"max_repeats {self.max_repeats} is below min_repeats {self.min_repeats}")
        return self


class Constraints(_Strict):
    """What a variant must leave free: VRAM per card after its measurements, and no flagged request."""

    vram_reserve_mib: int | None = Field(
        default=None, ge=0, le=2**20, description="free VRAM per card after each variant (default: the base's)"
    )
    reserve_waiver: str | None = Field(
        default=None, min_length=10, description="why a variant under the reserve is still acceptable (recorded)"
    )
    no_flagged_requests: bool = Field(default=True, description="a flagged (failed) request rejects the variant")


class CampaignBudget(_Strict):
    """How long the campaign may run; variants not reached by then are recorded as not measured."""

    wall_time_s: float | None = Field(default=None, gt=0, le=30 * 86400)


class Objective(_Strict):
    """An operating point to choose across concurrencies: one profile is written per accepted objective.

    * ``lowest_ttft``: the point with the lowest TTFT whose decode tok/s is at least ``decode_floor_tok_s``;
    * ``max_output_tpm``: the point with the highest output tokens per minute;
    * ``latency_budget``: the highest-throughput point whose TTFT is within ``ttft_budget_s``
      (at ``concurrency`` when given).
    """

    name: Name
    kind: Literal["lowest_ttft", "max_output_tpm", "latency_budget"]
    decode_floor_tok_s: float | None = Field(default=None, gt=0)
    ttft_budget_s: float | None = Field(default=None, gt=0)
    concurrency: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _needs(self) -> Objective:
        if self.kind == "lowest_ttft" and self.decode_floor_tok_s is None:
            raise ValueError("lowest_ttft needs decode_floor_tok_s (the slowest decode it may pick)")
        if self.kind == "latency_budget" and self.ttft_budget_s is None:
            raise ValueError("latency_budget needs ttft_budget_s")
        return self


class Campaign(_Strict):
    """A campaign file."""

    name: Name
    description: str = ""
    base: ProfileRef = Field(description="the profile every variant extends")
    incumbent: Incumbent = Field(default_factory=Incumbent)
    variants: list[Variant] = Field(default_factory=list, description="explicit variants, each named")
    axes: dict[str, list[AxisValue]] = Field(
        default_factory=dict,
        description="dotted profile field -> values; every combination is a variant (with `variants` too)",
    )
    exclude: list[dict[str, AxisValue]] = Field(
        default_factory=list, description="axis combinations left out (a subset of axis keys each)"
    )
    workload: Workload
    gates: CampaignGates = Field(default_factory=CampaignGates)
    decision: Decision
    constraints: Constraints = Field(default_factory=Constraints)
    budget: CampaignBudget = Field(default_factory=CampaignBudget)
    objectives: list[Objective] = Field(default_factory=list)

    @field_validator("axes")
    @classmethod
    def _axes(cls, value: dict[str, list[AxisValue]]) -> dict[str, list[AxisValue]]:
        for key, values in value.items():
            if not _AXIS_KEY.match(key):
                raise ValueError(f"axis {key!r} is not a dotted profile field (e.g. engine.args.cuda-graph-max-bs)")
            if key.split(".")[0] in {"name", "extends", "status", "evidence"}:
                raise ValueError(f"axis {key!r}: the campaign sets this field for each variant")
            if not values:
                raise ValueError(f"axis {key!r} has no values; give at least one")
            if len({repr(v) for v in values}) != len(values):
                raise ValueError(f"axis {key!r} repeats a value: {values}")
        return value


def campaign_json_schema() -> dict[str, Any]:
    """The JSON Schema of a campaign file (shipped as ``schema/campaign.schema.json``)."""
    schema = Campaign.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "servectl campaign"
    return schema
