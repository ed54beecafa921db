"""Host methods on profiles, images and catalogs: load, compile, validate, render, promote, adopt."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from servectl.host.base import HostBase

if TYPE_CHECKING:
    from servectl.adapters.plan_cache import DryRun
    from servectl.plan.compile import LaunchPlan
    from servectl.plan.inventory import ProfileRow, Validation
    from servectl.profile.catalog import FlagCatalog
    from servectl.profile.catalog_diff import FlagChange
    from servectl.profile.evidence import EvidenceRecord
    from servectl.profile.loader import LoadedProfile
    from servectl.render.files import RenderedFile, RenderSet
    from servectl.service.adopt import AdoptResult, DockerDocuments
    from servectl.service.catalog import ExtractedCatalog, InImageValidation


Completable = Literal["profile", "check", "catalog", "flag"]
"""What :meth:`ProfileCommands.completions` completes: a profile name, a preflight check id (``--force``), a
flag catalog or profile (``catalog NAME``), a flag of the shipped catalogs (``catalog --grep``)."""


@dataclass(frozen=True)
class ShownProfile:
    """What ``servectl show`` prints: the resolved profile (after ``extends``) as data, the files it came
    from (the profile first) and, from :meth:`evidence`, the lines about its evidence."""

    loaded: LoadedProfile
    data: dict[str, Any]
    #: the environment its plan is compiled in to tell stale evidence (the host's)
    environ: Mapping[str, str] = field(repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.loaded.profile.name

    @property
    def chain(self) -> tuple[Path, ...]:
        return tuple(self.loaded.chain)

    def evidence(self) -> list[str]:
        """The lines about the profile's evidence, marked stale when its plan changed (none when it has none)."""
        from servectl.plan.inventory import evidence_lines

        return evidence_lines(self.loaded, self.environ)


@dataclass(frozen=True)
class ProfileDiff:
    """What differs between the launch plans of profiles ``a`` and ``b``: ``changes`` as ``(field, value in a,
    value in b)`` (None: unset; engine flags compared by flag), ``lines`` the same as text."""

    a: str
    b: str
    changes: list[tuple[str, Any, Any]]
    lines: list[str]

    def to_dict(self) -> dict[str, Any]:
        """``diff --json``: ``{"a": ..., "b": ..., "changes": [{"field", "a", "b"}, ...]}``."""
        changes = [{"field": field, "a": va, "b": vb} for field, va, vb in self.changes]
        return {"a": self.a, "b": self.b, "changes": changes}


@dataclass(frozen=True)
class CatalogListing:
    """One flag catalog ``servectl catalog`` lists: a shipped one (``source`` "shipped") or one extracted from an
    image (``name`` its image id, ``source`` the references it was extracted under)."""

    name: str
    engine: str
    version: str
    options: int
    source: str


class ProfileCommands(HostBase):
    """Profiles and images: nothing here starts or stops a service."""

    # -- profiles (no adapters) ----------------------------------------------------------------------------
    def load_profile(self, *, name: str) -> LoadedProfile:
        """Find, merge and validate profile ``name`` (a name on the search path, or a ``.yaml`` path).

        Raises:
            UsageError: no such profile. ProfileError: every problem, one line each, with file and line.
        """
        from servectl.profile.validate import load_profile

        return load_profile(name, folders=self.ctx.profile_folders)

    def compile_plan(self, *, name: str) -> LaunchPlan:
        """The launch plan of profile ``name`` on this host; starts nothing, opens no adapter.

        Reads the host's environment for the home and state folders and the ``${VAR}`` references.
        """
        return self._resolve(name).plan

    def dry_run(self, *, name: str) -> DryRun:
        """What ``up --dry-run`` shows: the plan of profile ``name`` as data and as the exact ``docker run``
        script; starts nothing, opens no adapter.

        An unset ``${VAR}`` in a host path stays as written and is named in ``unset`` (a plan to show, never
        to run). A plan compiled from the same inputs before comes from the plan cache in the state folder.

        Raises:
            UsageError: no such profile. ProfileError: every problem, one line each, with file and line.
        """
        return self.plan_cache.dry_run(name, keep_unset=True)

    def profiles(self) -> list[ProfileRow]:
        """Every runnable profile on the search path (bases left out), in natural order, with its key settings
        (model, TP, context, port, role, the evidence headline), or why it does not load."""
        from servectl.plan.inventory import list_profiles

        return list_profiles(self.environ)

    def completions(self, *, of: Completable, incomplete: str = "") -> list[str]:
        """Shell completion: the candidates ``of`` one kind that start with what the user typed so far.

        ``profile``: runnable profiles on the search path (bases, ``_`` names, left out); ``check``: preflight
        check ids; ``catalog``: shipped flag catalogs, then profiles; ``flag``: flag names of every shipped
        catalog without their dashes (a shell reads a word starting with ``--`` as an option of its own), so
        ``--speculative-n`` and ``speculative-n`` both complete ``speculative-num-steps``. Runs on every Tab
        press: reads files only, opens no adapter, and a profile folder it cannot read completes nothing.
        """
        from servectl.profile import completion

        if of == "check":
            from servectl.preflight.checks import CHECK_IDS

            return [check_id for check_id in CHECK_IDS if check_id.startswith(incomplete)]
        if of == "flag":
            return completion.flag_names(incomplete)
        profiles = completion.profile_names(incomplete, folders=self.ctx.profile_folders)
        return profiles if of == "profile" else completion.catalog_names(incomplete) + profiles

    def show(self, *, name: str) -> ShownProfile:
        """Profile ``name`` resolved (after ``extends``), with the files it came from and its evidence lines.

        Raises:
            UsageError: no such profile. ProfileError: every problem, one line each, with file and line.
        """
        loaded = self.load_profile(name=name)
        data = loaded.profile.model_dump(mode="json", exclude_none=True)
        return ShownProfile(loaded=loaded, data=data, environ=self.environ)

    def diff_profiles(self, *, a: str, b: str) -> ProfileDiff:
        """What differs between the launch plans of profiles ``a`` and ``b``; starts nothing, opens no adapter.

        Like ``up --dry-run``, an unset ``${VAR}`` stays as written instead of failing.
        """
        from servectl.plan.resolve import resolve
        from servectl.plan.script import plan_changes, plan_diff

        plan_a = resolve(a, environ=self.environ, keep_unset=True).plan
        plan_b = resolve(b, environ=self.environ, keep_unset=True).plan
        return ProfileDiff(a=a, b=b, changes=plan_changes(plan_a, plan_b), lines=plan_diff(plan_a, plan_b))

    def profile_schema(self) -> dict[str, Any]:
        """The JSON Schema of the profile format (shipped as ``schema/profile.schema.json``)."""
        from servectl.profile.models import profile_json_schema

        return profile_json_schema()

    def validate(self, *, names: Sequence[str] | None = None) -> list[Validation]:
        """Validate profiles (all runnable ones when ``names`` is None), each read once: per profile its error,
        or its warnings and a note when its flag catalog may be stale for its image. Never raises for one profile.

        Raises:
            UsageError: a name is no profile on the search path.
        """
        from dataclasses import replace

        from servectl.plan.inventory import validations
        from servectl.service.catalog import profile_catalog_note

        return [
            replace(v, note=profile_catalog_note(v.loaded)) if v.loaded is not None else v
            for v in validations(list(names) if names else None, folders=self.ctx.profile_folders)
        ]

    def render(
        self, *, name: str, to: str, out: str | None = None, gateway: bool = False, gateway_image: str | None = None
    ) -> RenderedFile:
        """Profile ``name`` as a docker compose file (``to="compose"``) or Kubernetes manifests (``to="k8s"``),
        from the plan ``up`` would run; nothing is written until ``.write()`` (``out``: the file, ``-`` for
        standard output, default ``compose/NAME.yaml`` or ``k8s/NAME.yaml``). ``gateway``: the gateway beside
        it (:mod:`servectl.gateway.render`), configured from the user's gateway file, from ``gateway_image``
        (default: the image ``servectl gateway up`` builds from this servectl).

        Raises:
            UsageError: an unknown target. RenderUnsupported: the target cannot express this profile.
            ProfileError: the gateway file is invalid.
        """
        from servectl.render.files import parse_target, render_profile

        target = parse_target(to)
        if not gateway:
            return render_profile(name, target=target, out=out, folders=self.ctx.profile_folders)
        from servectl.gateway.config import load_gateway_config
        from servectl.gateway.image import gateway_image_ref
        from servectl.gateway.render import gateway_extension

        config = load_gateway_config(environ=self.environ)
        extend = gateway_extension(config, image=gateway_image or gateway_image_ref())
        return render_profile(
            name, target=target, out=out, folders=self.ctx.profile_folders, extend=extend, flag=" --gateway"
        )

    def render_all(self, *, to: str | None = None) -> RenderSet:
        """Re-render the shipped profiles into a servectl source checkout's ``compose/`` and ``k8s/`` (``to``:
        only that target) and remove the files of profiles that are gone.

        Raises:
            UsageError: an unknown target, or not a source checkout.
        """
        from servectl.render.files import TARGETS, parse_target, render_all

        targets = TARGETS if to is None else (parse_target(to),)
        return render_all(catalogs=self.ctx.profile_folders.catalogs, targets=targets)

    def promote(self, *, name: str, evidence_dir: Path, qualification_dir: Path | None = None) -> EvidenceRecord:
        """Mark profile ``name`` promoted on the bench results in ``evidence_dir`` and its qualification evidence
        (``qualification_dir``, default ``evidence_dir``), both of its current plan, image and model pins.

        Raises:
            UsageError: unreadable or missing evidence. ProfileError: the evidence does not match the profile, or
                a gate failed (every reason, one line each).
        """
        from servectl.bench.promote import promote

        return promote(
            name=name,
            evidence_dir=evidence_dir,
            qualification_dir=qualification_dir,
            environ=self.environ,
            model_dir=self.ctx.probe.model_dir,
        )

    # -- images and catalogs -------------------------------------------------------------------------------
    def validate_in_image(self, *, name: str) -> InImageValidation:
        """Profile ``name``'s argv parsed by its image's own SGLang in a throwaway container (``--in-image``).

        Raises:
            ProfileError: the profile does not validate. PreflightFailed: its image is not on this host.
            ImageProbeError: the image has no usable Python or SGLang.
        """
        from servectl.service.catalog import validate_in_image

        return validate_in_image(self._resolve(name), engine=self.docker)

    def flag_catalog(self, *, name: str) -> FlagCatalog:
        """A flag catalog by what ``engine.catalog`` accepts (shipped name, ``sha256:...``, file), a profile's
        catalog, or an image's extracted one.

        Raises:
            UsageError: nothing by that name.
        """
        from servectl.service.catalog import load_catalog_target

        return load_catalog_target(name, engine=None, folders=self.ctx.profile_folders)[1]

    def catalogs(self) -> list[CatalogListing]:
        """The shipped flag catalogs, then those extracted from images (``catalog extract``)."""
        from servectl.profile.catalog import FlagCatalog
        from servectl.profile.catalog_store import stored_catalogs

        found = []
        for name in FlagCatalog.available():
            cat = FlagCatalog.load(name)
            found.append(CatalogListing(name, cat.engine, cat.version, len(cat.options), "shipped"))
        for stored in stored_catalogs(self.ctx.profile_folders.catalogs):
            image, cat = stored.image, stored.catalog
            name, refs = (image.id, ", ".join(image.refs)) if image else (str(stored.path), "")
            found.append(CatalogListing(name, cat.engine, cat.version, len(cat.options), refs))
        return found

    def build_standin_image(self, *, rebuild: bool = False) -> str:
        """Build (or find) the stand-in SGLang image for tests and demos without a GPU; its reference
        (``servectl-standin:<hash>``, also tagged ``latest``). ``rebuild``: build even when it exists.

        Raises:
            EngineUnavailable: no Docker engine answers.
        """
        from servectl.standin.image import build_standin_image

        return build_standin_image(docker=self.docker, force=rebuild)

    def extract_catalog(
        self,
        *,
        image: str,
        out: Path | None = None,
        logs: bool = False,
        python: str | None = None,
        timeout_s: float | None = None,
    ) -> ExtractedCatalog:
        """Dump an image's own SGLang parser into a flag catalog (``servectl catalog extract``).

        ``image`` is an image reference or a profile name (its image and ``image.entrypoint``); ``python``
        overrides the image's Python; ``timeout_s``: the throwaway container is killed after it (default
        :data:`servectl.adapters.engine_image.DEFAULT_TIMEOUT_S`). The catalog is kept in the host's catalog
        folder by image id, and written to ``out``.

        Raises:
            PreflightFailed: the image is not on this host. ImageProbeError: no usable Python or SGLang in it.
        """
        from servectl.service.catalog import extract_catalog, image_target

        folders = self.ctx.profile_folders
        target = image_target(image, folders=folders)
        entrypoint = (python, "-m", "sglang.launch_server") if python else target.entrypoint
        return extract_catalog(
            image=target.image,
            engine=self.docker,
            entrypoint=entrypoint,
            out=out,
            logs=logs,
            store_dir=folders.catalogs,
            **({} if timeout_s is None else {"timeout_s": timeout_s}),
        )

    def diff_catalogs(self, *, a: str, b: str, name: str | None = None) -> tuple[str, str, list[FlagChange]]:
        """Flags added, removed or changed from catalog ``a`` to ``b`` (each as :meth:`flag_catalog` takes, or an
        image, extracted on the spot when it has no catalog yet); with ``name``, only that profile's flags.

        Returns:
            (label of a, label of b, the changes).
        """
        from servectl.profile.catalog_diff import diff_catalogs, flags_affected
        from servectl.service.catalog import load_catalog_target

        folders = self.ctx.profile_folders
        label_a, cat_a = load_catalog_target(a, engine=self.docker, folders=folders)
        label_b, cat_b = load_catalog_target(b, engine=self.docker, folders=folders)
        changes = diff_catalogs(cat_a, cat_b)
        if name is not None:
            flags = {t.split("=", 1)[0] for t in self._resolve(name).plan.engine_argv if t.startswith("--")}
            primary = {opt.primary_flag for f in flags if (opt := cat_a.option(f)) is not None}
            changes = flags_affected(changes, primary | flags)
        return label_a, label_b, changes

    # -- adopt ---------------------------------------------------------------------------------------------
    def adopt(
        self,
        *,
        container: str | None = None,
        compose_file: Path | None = None,
        service: str | None = None,
        recipe: Path | None = None,
        name: str | None = None,
        out: Path | None = None,
        dry_run: bool = False,
        overwrite: bool = False,
    ) -> AdoptResult:
        """Write a profile that reproduces a container (``docker inspect``), service ``service`` of a compose file,
        or the docker launch of a ``local-ai-registry/v1`` recipe.

        Args:
            container: name or id of the container to adopt.
            compose_file: with ``service``, adopt that compose service instead (read through the compose CLI).
            service: the compose service.
            recipe: a registry recipe file (JSON); its argv is checked against the flag catalog and, when its image
                is on this host, the image's own SGLang parser; its problems are in ``result.adoption.problems``.
            name: profile name (default: from the container name, or the recipe id).
            out: file to write (default: ``profiles/NAME.yaml``).
            dry_run: build the profile, write nothing.
            overwrite: replace a profile of that name (the old file is kept as ``.bak``).
        """
        from servectl.adapters.conflicts import detect_compose
        from servectl.service.adopt import AdoptOptions, adopt, image_parser

        compose_config = None
        compose = detect_compose() if compose_file is not None else None
        if compose is not None:

            def compose_config(path: Path) -> dict[str, object]:
                assert compose is not None
                return compose.config(str(path))

        return adopt(
            docker=cast("DockerDocuments", self.docker),  # DockerSdkEngine reads volumes too; fakes need not
            container=container,
            compose_file=compose_file,
            service=service,
            recipe=recipe,
            name=name,
            out=out,
            opts=AdoptOptions(
                dry_run=dry_run,
                force=overwrite,
                folders=self.ctx.profile_folders,
                environ=self.environ,
                compose_config=compose_config,
                engine_parser=image_parser(self.docker) if recipe is not None else None,
            ),
        )

    def diff_container(self, *, name: str, container: str) -> list[str]:
        """What differs between a container (``docker inspect``) and the container profile ``name`` would create.

        Empty when they match on every field servectl controls (how ``status`` recognises an adopted service).

        Raises:
            UsageError: no such container or profile. ProfileError: the profile does not validate.
        """
        from servectl.service.adopt import diff_container

        return diff_container(self.ctx, profile=name, container=container)
