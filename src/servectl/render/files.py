"""``servectl render``: load a profile, compile its portable plan, render it, and write the file.

Rendered files are meant to be committed and shared, so they hold nothing of the machine that rendered them:

- they come from the portable plan (:func:`servectl.plan.compile.compile_portable_plan`): home ``~`` (compose
  expands it; Kubernetes files write ``${HOME}``), a fixed state folder that never appears in the output
  (generated files become compose ``configs`` / a ConfigMap, an API key from the environment becomes a
  compose ``secrets`` entry / a Secret reference), every ``${VAR}`` of a host path kept as the literal
  ``${VAR}`` (compose fills it in from the shell; for Kubernetes it is an ``envsubst`` placeholder);
- host paths inside the profile's project folder (the folder above its ``profiles/`` folder: for the shipped
  profiles, the repository) are written relative to the compose file, and as ``${SERVECTL_PROJECT_DIR}/...``
  for Kubernetes;
- the ``servectl.source`` label names the profile file relative to the project folder.

The plan hash is always taken over the portable plan, so a rendered file carries the hash that
``servectl up`` gives the same profile, and ``servectl status`` shows no drift for a service started with
``docker compose up`` from an up-to-date file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from servectl.errors import RenderUnsupported, UsageError
from servectl.files import FileRefused, read_bounded, write_atomic
from servectl.paths import SHIPPED_PROFILES_DIR, source_checkout_dir
from servectl.plan.compile import LaunchPlan, compile_portable_plan, project_dir_of
from servectl.profile.loader import LoadedProfile, ProfileFolder, ProfileSearch, discover
from servectl.profile.validate import load_profile

Target = Literal["compose", "k8s"]
TARGETS: tuple[Target, ...] = ("compose", "k8s")
#: Folder (under the project) that holds each target's files.
TARGET_DIRS: Mapping[Target, str] = {"compose": "compose", "k8s": "k8s"}
#: What a higher layer adds to a rendered file (the gateway: :mod:`servectl.gateway.render`): it gets the
#: target, the plan and the document (compose: one mapping; k8s: the list of manifests), adds its objects in
#: place and returns the header notes they need.
Extension = Callable[[Target, LaunchPlan, Any], list[str]]


@dataclass(frozen=True)
class RenderedFile:
    """One rendered file and where it goes (``path`` None: standard output)."""

    profile: str
    target: Target
    path: Path | None
    text: str

    def write(self) -> None:
        """Write the file, creating its folder."""
        if self.path is None:
            raise ValueError("this rendering goes to standard output")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, self.text.encode("utf-8"))


@dataclass(frozen=True)
class Skipped:
    """A profile that was not rendered for a target, and why."""

    profile: str
    target: Target | None  # None: for every target (the profile does not validate)
    reason: str


@dataclass(frozen=True)
class RenderSet:
    """What ``render --all`` produces."""

    files: tuple[RenderedFile, ...]
    skipped: tuple[Skipped, ...]
    removed: tuple[Path, ...] = field(default=())


def parse_target(value: str) -> Target:
    """``compose`` or ``k8s``.

    Raises:
        UsageError: any other value.
    """
    for target in TARGETS:
        if value == target:
            return target
    raise UsageError(f"--to {value}: unknown render target; use one of {', '.join(TARGETS)}")


def render_text(
    loaded: LoadedProfile, *, target: Target, out_dir: Path, command: str, extend: Extension | None = None
) -> str:
    """The text of one rendered file.

    Args:
        loaded: a validated profile.
        target: ``compose`` or ``k8s``.
        out_dir: absolute folder the file goes to (compose resolves relative paths from it).
        command: the command that regenerates the file (named in its header).
        extend: adds a higher layer's objects to the document (see :data:`Extension`).

    Raises:
        RenderUnsupported: the profile cannot be expressed in ``target``.
        ProfileError: the profile cannot be compiled.
    """
    from servectl.render.compose import compose_notes, render_compose
    from servectl.render.k8s import k8s_notes, render_k8s
    from servectl.render.yaml_out import to_yaml

    project_dir = project_dir_of(loaded.file.path)
    source = _relative_source(loaded.file.path, project_dir)
    plan = compile_portable_plan(loaded.profile, catalog=loaded.flag_catalog(), source=source, project_dir=project_dir)
    profile = loaded.profile
    if target == "compose":
        relative = None if project_dir is None else os.path.relpath(project_dir, out_dir)
        document = render_compose(plan, profile, project_dir=relative)
        notes = compose_notes(plan, profile, document)
        notes += extend(target, plan, document) if extend is not None else []
        return to_yaml(document, plan=plan, command=command, notes=notes)
    if target == "k8s":
        manifests = render_k8s(plan, profile)
        notes = k8s_notes(plan, profile, manifests)
        notes += extend(target, plan, manifests) if extend is not None else []
        return to_yaml(manifests, plan=plan, command=command, notes=notes)
    raise UsageError(f"unknown render target {target!r}; use one of {', '.join(TARGETS)}")


def render_profile(
    name: str,
    *,
    target: Target,
    out: str | None = None,
    cwd: Path | None = None,
    folders: ProfileSearch,
    extend: Extension | None = None,
    flag: str = "",
) -> RenderedFile:
    """Render profile ``name`` for ``target`` (nothing written: call :meth:`RenderedFile.write`).

    Args:
        name: profile name (or a path to a profile file).
        target: ``compose`` or ``k8s``.
        out: file to write; ``-`` for standard output; default ``<target dir>/<name>.yaml`` under ``cwd``.
        cwd: the folder a relative ``out`` starts from (default: the current folder).
        folders: the profile search path (the host's, with its catalog folder).
        extend: adds a higher layer's objects (see :data:`Extension`); ``flag`` goes in the regenerate command.

    Raises:
        UsageError: unknown profile or target. RenderUnsupported, ProfileError: see :func:`render_text`.
    """
    if target not in TARGETS:
        raise UsageError(f"unknown render target {target!r}; use one of {', '.join(TARGETS)}")
    base = (Path.cwd() if cwd is None else cwd).resolve()
    loaded = load_profile(name, folders=folders)
    if out == "-":
        path, out_dir = None, base
    else:
        path = Path(out) if out else Path(TARGET_DIRS[target]) / f"{loaded.profile.name}.yaml"
        path = path if path.is_absolute() else base / path
        out_dir = path.parent
    command = f"servectl render {loaded.profile.name} --to {target}{flag}"
    text = render_text(loaded, target=target, out_dir=out_dir, command=command, extend=extend)
    return RenderedFile(loaded.profile.name, target, path, text)


def shipped_project_dir() -> Path:
    """The source checkout that holds the shipped profiles and their rendered copies.

    Raises:
        UsageError: servectl runs from an installed package, which has no rendered copies to refresh.
    """
    root = source_checkout_dir()
    if root is None:
        raise UsageError(
            f"the shipped profiles in {SHIPPED_PROFILES_DIR} are not in a source checkout; "
            "run render --all from a servectl checkout, or pass a project folder"
        )
    return root


def render_shipped(
    *, catalogs: Path, project_dir: Path | None = None, targets: Sequence[Target] = TARGETS
) -> RenderSet:
    """Render every runnable shipped profile for each target (nothing written); ``catalogs``: the host's catalog
    folder (where ``engine.catalog: image`` would be looked up).

    Profiles that do not validate are skipped for every target; a profile that one target cannot express
    is skipped for that target. Each skip carries its reason.
    """
    from servectl.errors import ProfileError

    root = (shipped_project_dir() if project_dir is None else project_dir).resolve()
    folders = ProfileSearch((ProfileFolder(root / "profiles", "shipped"),), catalogs=catalogs)
    files: list[RenderedFile] = []
    skipped: list[Skipped] = []
    for name, file in sorted(discover(folders).items()):
        if file.is_base:
            continue
        try:
            loaded = load_profile(name, folders=folders)
        except ProfileError as err:
            skipped.append(Skipped(name, None, f"does not validate ({len(err.problems) or 1} problem(s))"))
            continue
        for target in targets:
            out_dir = root / TARGET_DIRS[target]
            try:
                text = render_text(loaded, target=target, out_dir=out_dir, command="servectl render --all")
            except (RenderUnsupported, ProfileError) as err:
                skipped.append(Skipped(name, target, err.message))
                continue
            files.append(RenderedFile(name, target, out_dir / f"{name}.yaml", text))
    return RenderSet(tuple(files), tuple(skipped))


def stale_generated_files(rendered: RenderSet, *, project_dir: Path, targets: Sequence[Target]) -> list[Path]:
    """Generated files in the target folders that no shipped profile produces any more."""
    from servectl.render.yaml_out import GENERATED_MARK

    keep = {f.path for f in rendered.files}
    stale = []
    for target in targets:
        folder = project_dir / TARGET_DIRS[target]
        for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
            if path not in keep and GENERATED_MARK in _first_line(path):
                stale.append(path)
    return stale


def render_all(*, catalogs: Path, project_dir: Path | None = None, targets: Sequence[Target] = TARGETS) -> RenderSet:
    """Re-render the shipped profiles into ``compose/`` and ``k8s/``; remove generated files of gone ones
    (``catalogs``: as for :func:`render_shipped`)."""
    root = (shipped_project_dir() if project_dir is None else project_dir).resolve()
    if not (root / "profiles").is_dir():
        raise UsageError(f"{root}/profiles does not exist: render --all works in a servectl source checkout")
    rendered = render_shipped(catalogs=catalogs, project_dir=root, targets=targets)
    for file in rendered.files:
        file.write()
    removed = stale_generated_files(rendered, project_dir=root, targets=targets)
    for path in removed:
        path.unlink()
    return RenderSet(rendered.files, rendered.skipped, tuple(removed))


def _relative_source(path: Path, project_dir: Path | None) -> str:
    if project_dir is not None and path.is_relative_to(project_dir):
        return path.relative_to(project_dir).as_posix()
    return str(path)


def _first_line(path: Path) -> str:
    """The first line of ``path`` ("" for what is not a readable regular file: it is not servectl's)."""
    try:
        raw = read_bounded(path, limit_bytes=64 * 2**20, what="rendered file")
    except (OSError, FileRefused):
        return ""
    return raw.split(b"\n", 1)[0].decode("utf-8", "replace")
