"""Every variant of a campaign loaded, validated and compiled before anything starts.

A variant is a profile that exists only as a document: ``{name: <campaign>.<variant>, extends: <base>,
status: candidate, **overrides}``, read through the profile loader (:func:`~servectl.profile.loader.
read_profile_document`), checked by every cross-field rule (the flag catalog among them: a misspelt flag is
refused here, naming the variant and the campaign line that wrote it) and compiled to its launch plan, whose
hash is the variant's identity in the campaign's rows. The base and the incumbent are loaded the same way,
and the gates' suite and gate ids are checked. Nothing here starts or reads a container.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from servectl.campaign.load import LoadedCampaign, VariantSpec
from servectl.campaign.references import read_references
from servectl.errors import Problem, ProfileError, ServectlError
from servectl.plan.compile import LaunchPlan, plan_hash
from servectl.plan.resolve import plan_for
from servectl.profile.loader import LoadedProfile, ProfileFile, ProfileSearch, read_profile_document
from servectl.profile.validate import checked, load_profile
from servectl.profile.yaml_locations import Location, PathKey, display_path


@dataclass(frozen=True)
class CheckedVariant:
    """One variant after loading, validating and compiling: its plan, or the problems that refuse it."""

    spec: VariantSpec
    profile_name: str
    loaded: LoadedProfile | None = field(default=None, repr=False)
    plan: LaunchPlan | None = field(default=None, repr=False)
    plan_hash: str | None = None
    problems: tuple[Problem, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.problems

    @property
    def name(self) -> str:
        return self.spec.name

    def reason(self) -> str:
        """The first problem, as the one-line reason of a ``rejected-invalid`` row."""
        return str(self.problems[0]) if self.problems else ""

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``campaign validate --json`` and the campaign's rows."""
        return {
            "name": self.name,
            "profile": self.profile_name,
            "description": self.spec.description,
            "overrides": dict(self.spec.overrides),
            "axes": dict(self.spec.axes),
            "plan_hash": self.plan_hash,
            "status": "valid" if self.valid else "rejected-invalid",
            "problems": [p.to_dict() for p in self.problems],
        }


@dataclass(frozen=True)
class CampaignCheck:
    """A campaign whose base, incumbent and variants were all loaded, validated and compiled."""

    loaded: LoadedCampaign
    base: LoadedProfile = field(repr=False)
    incumbent: CheckedVariant
    variants: tuple[CheckedVariant, ...]

    @property
    def valid_variants(self) -> tuple[CheckedVariant, ...]:
        return tuple(v for v in self.variants if v.valid)

    @property
    def invalid_variants(self) -> tuple[CheckedVariant, ...]:
        return tuple(v for v in self.variants if not v.valid)

    @property
    def notes(self) -> tuple[str, ...]:
        """What the campaign will do that its author may not expect (said by ``validate`` and ``run``)."""
        serve = self.base.profile.serve
        if serve.port not in serve.production_ports:
            return ()
        return (
            f"base {self.loaded.campaign.base} serves on production port {serve.port}: every variant takes it, so "
            "what runs there now must stop for each (it cannot wait warm: a released engine still holds the port) "
            "and clients on it reach the variants; base the campaign on a bench profile (serve.role: bench, "
            "another port)",
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``campaign validate --json``."""
        c = self.loaded.campaign
        return {
            "campaign": c.name,
            "file": str(self.loaded.path),
            "base": c.base,
            "incumbent": {"profile": self.incumbent.profile_name, "plan_hash": self.incumbent.plan_hash},
            "notes": list(self.notes),
            "points": [p.model_dump() for p in c.workload.points],
            "decision": c.decision.model_dump(),
            "variants": [v.to_dict() for v in self.variants],
        }


#: The image's own parser asked of a compiled variant: None when it parses, else the one-line refusal.
ImageParse = Callable[[LoadedProfile, LaunchPlan], "str | None"]


def check_campaign(
    loaded: LoadedCampaign,
    *,
    folders: ProfileSearch,
    environ: Mapping[str, str],
    skip_invalid: bool = False,
    parse: ImageParse | None = None,
) -> CampaignCheck:
    """Load, validate and compile the base, the incumbent and every variant of ``loaded``.

    Args:
        folders: the profile search path (the host's ``Context.profile_folders``).
        environ: the environment the plans compile in (``${VAR}`` in host paths, the state folder).
        skip_invalid: keep going past invalid variants (each becomes a ``rejected-invalid`` row) instead of
            refusing the campaign.
        parse: the image's own parser (the host's, where the image is here): each compiled variant's argv is
            asked of it, and one it refuses is invalid like one the catalog refuses.

    Raises:
        ProfileError: the base, the incumbent or the gates are invalid; or, without ``skip_invalid``, a variant
            is (every problem of every invalid variant, one per line, each naming its variant).
    """
    c = loaded.campaign
    problems: list[Problem] = []
    base = _load_reference(loaded, c.base, ("base",), folders, problems)
    incumbent_name = c.incumbent.profile or c.base
    incumbent_at: PathKey = ("incumbent", "profile") if c.incumbent.profile else ("base",)
    incumbent_loaded = base if incumbent_name == c.base else None
    if incumbent_loaded is None:
        incumbent_loaded = _load_reference(loaded, incumbent_name, incumbent_at, folders, problems)
    problems.extend(_gate_problems(loaded))
    problems.extend(read_references(loaded)[1])  # the incumbent's earlier figures: each must read
    if base is None or incumbent_loaded is None or problems:
        raise ProfileError(problems)
    incumbent = _compiled(
        VariantSpec("incumbent", f"the incumbent: {incumbent_name}", {}, {(): loaded.location(incumbent_at)}),
        incumbent_name,
        incumbent_loaded,
        environ,
        loaded.location(incumbent_at),
    )
    if incumbent.problems:
        raise ProfileError(incumbent.problems)
    variants = tuple(_parsed(check_variant(loaded, spec, folders, environ), parse) for spec in loaded.variants)
    bad = [v for v in variants if not v.valid]
    if bad and not skip_invalid:
        raise ProfileError([p for v in bad for p in v.problems])
    return CampaignCheck(loaded=loaded, base=base, incumbent=incumbent, variants=variants)


def _load_reference(
    loaded: LoadedCampaign, name: str, at: PathKey, folders: ProfileSearch, problems: list[Problem]
) -> LoadedProfile | None:
    try:
        return load_profile(name, folders=folders)
    except ProfileError as err:
        problems.extend(err.problems or [loaded.problem(at, f"profile {name!r}: {err}")])
    except ServectlError as err:
        problems.append(loaded.problem(at, str(err)))
    return None


def check_variant(
    loaded: LoadedCampaign,
    spec: VariantSpec,
    folders: ProfileSearch,
    environ: Mapping[str, str],
    *,
    extends: str | None = None,
) -> CheckedVariant:
    """Load, validate and compile ``spec`` as the profile ``<campaign>.<name>`` that extends ``extends`` (default:
    the base) with its overrides; its problems name the variant and the campaign line that wrote it."""
    name = loaded.profile_name(spec.name)
    where = spec.locations[()]
    document: dict[str, Any] = {
        "name": name,
        "extends": extends or loaded.campaign.base,
        "status": "candidate",
        "evidence": None,  # a base's promotion evidence is not the variant's
        **spec.overrides,
    }
    locations: dict[PathKey, Location] = {(): where, ("name",): where, ("extends",): where}
    locations.update({k: v for k, v in spec.locations.items() if k})
    file = ProfileFile(name, where[0], "campaign")
    try:
        profile = checked(read_profile_document(file, document, locations, folders=folders))
    except ProfileError as err:
        return CheckedVariant(spec, name, problems=_named(spec.name, err, where))
    except ServectlError as err:
        return CheckedVariant(spec, name, problems=(_at(where, f"variant {spec.name}: {err}"),))
    return _compiled(spec, name, profile, environ, where)


def _parsed(variant: CheckedVariant, parse: ImageParse | None) -> CheckedVariant:
    """``variant`` as its image's own parser sees it (unchanged without a parser or when it did not compile)."""
    if parse is None or variant.loaded is None or variant.plan is None:
        return variant
    refused = parse(variant.loaded, variant.plan)
    if refused is None:
        return variant
    problem = _at(variant.spec.locations[()], f"variant {variant.name}: {refused}")
    return replace(variant, plan=None, plan_hash=None, problems=(problem,))


def _compiled(
    spec: VariantSpec, name: str, profile: LoadedProfile, environ: Mapping[str, str], where: Location
) -> CheckedVariant:
    try:
        plan = plan_for(profile, environ=environ)
    except ServectlError as err:
        return CheckedVariant(spec, name, loaded=profile, problems=_named(spec.name, err, where))
    return CheckedVariant(spec, name, loaded=profile, plan=plan, plan_hash=plan_hash(plan))


def _named(variant: str, err: ServectlError, where: Location) -> tuple[Problem, ...]:
    """The problems of ``err``, each saying which variant it refuses."""
    found = getattr(err, "problems", ()) or (_at(where, str(err)),)
    return tuple(
        Problem(p.file, p.line, p.field, f"variant {variant}: {p.message}", p.rule or "campaign.variant") for p in found
    )


def _at(where: Location, message: str) -> Problem:
    return Problem(display_path(where[0]), where[1], "", message, "campaign.variant")


def _gate_problems(loaded: LoadedCampaign) -> list[Problem]:
    gates = loaded.campaign.gates
    if gates.suite is None:
        return (
            [loaded.problem(("gates", "only"), "gate ids without a suite; name `gates.suite` too")]
            if gates.only
            else []
        )
    from servectl.bench.qualify.suite import GATE_ORDER, load_suite, suite_path

    try:
        suite = load_suite(suite_path(gates.suite, relative_to=loaded.path.parent)).suite
    except ServectlError as err:
        return [loaded.problem(("gates", "suite"), str(err).splitlines()[0])]
    present = [g for g in GATE_ORDER if getattr(suite.gates, g) is not None]
    return [
        loaded.problem(
            ("gates", "only", index),
            f"{gate!r} is no gate of suite {suite.name} ({', '.join(present)})",
        )
        for index, gate in enumerate(gates.only)
        if gate not in present
    ]
