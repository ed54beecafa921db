"""Helpers for the render tests: the repository, test profiles, rendering and schema loading."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import yaml

from servectl.plan.compile import LaunchPlan, compile_portable_plan, project_dir_of
from servectl.profile.loader import LoadedProfile, ProfileFolder, ProfileSearch
from servectl.profile.validate import load_profile
from servectl.render.files import Target, render_text

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data"
RENDER_PROFILES = DATA / "render-profiles"
#: The shipped and fixture profiles name shipped catalogs: no folder of extracted ones is looked in (this one does
#: not exist, so an ``engine.catalog: image`` profile would say that nothing was extracted).
NO_EXTRACTED_CATALOGS = DATA / "no-extracted-catalogs"
SHIPPED_FOLDERS = ProfileSearch((ProfileFolder(REPO / "profiles", "shipped"),), catalogs=NO_EXTRACTED_CATALOGS)
FIXTURE_FOLDERS = ProfileSearch((ProfileFolder(RENDER_PROFILES, "test"),), catalogs=NO_EXTRACTED_CATALOGS)


@functools.cache
def load(name: str) -> LoadedProfile:
    """A shipped profile, or one of tests/data/render-profiles."""
    return load_profile(name, folders=_folders_of(name))


def _folders_of(name: str) -> ProfileSearch:
    return FIXTURE_FOLDERS if (RENDER_PROFILES / f"{name}.yaml").is_file() else SHIPPED_FOLDERS


def portable(loaded: LoadedProfile) -> LaunchPlan:
    """The plan the renderers get for ``loaded`` (as ``servectl render`` compiles it)."""
    project = project_dir_of(loaded.file.path)
    assert project is not None
    source = loaded.file.path.relative_to(project).as_posix()
    return compile_portable_plan(loaded.profile, catalog=loaded.flag_catalog(), source=source, project_dir=project)


@functools.cache
def text_of(name: str, target: Target) -> str:
    """The rendered file of a profile as ``render --all`` writes it into the repository (cached)."""
    return fresh_text_of(name, target)


def fresh_text_of(name: str, target: Target) -> str:
    """:func:`text_of`, rendered now (for tests that change the environment first)."""
    loaded = load_profile(name, folders=_folders_of(name))
    return render_text(loaded, target=target, out_dir=REPO / target, command="servectl render --all")


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def compose_schema() -> dict[str, Any]:
    """The Compose Specification schema (tests/data, see SOURCE.md)."""
    return dict(json.loads((DATA / "compose-spec.schema.json").read_text(encoding="utf-8")))


def lws_schema() -> dict[str, Any]:
    """The LeaderWorkerSet v1 schema, strict as ``kubectl --validate=strict``: no unknown fields."""
    schema = json.loads((DATA / "lws-v1.schema.json").read_text(encoding="utf-8"))
    return dict(forbid_unknown_fields(schema))


def forbid_unknown_fields(node: Any) -> Any:
    """Add ``additionalProperties: false`` to object schemas that list properties and keep no unknowns."""
    if isinstance(node, dict):
        out = {key: forbid_unknown_fields(value) for key, value in node.items()}
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            # the properties map itself holds field names, not schemas to change: undo for it
            out["properties"] = {k: forbid_unknown_fields(v) for k, v in node["properties"].items()}
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [forbid_unknown_fields(item) for item in node]
    return node
