"""Adopted services: containers servectl did not start, recognised as the profile ``servectl adopt`` wrote.

They carry none of servectl's labels, so a container counts as the service of an adopted profile when both
hold:

* it is the container the profile was adopted from: the id recorded in ``adopted.container_id``, or else the
  profile's container name (``container.name``, which adopt copies) - and servectl did not start it;
* its configuration still matches the profile's plan on every field servectl controls
  (:func:`servectl.plan.container_match.container_diff` is empty): image, SGLang flags, environment, GPUs,
  network and ports, mounts, IPC and shared memory, ulimits, restart policy, init, stop timeout, labels.

A container that was changed since (another flag, another mount) is not the profile's service: ``status``
does not list it and ``swap`` treats it like any other container in the way. Stopping an adopted service
removes its container, as for servectl's own: the profile recreates it exactly (that is what the match says).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from servectl.errors import ServectlError
from servectl.files import FileRefused, read_bounded
from servectl.plan.labels import LABEL_MANAGED
from servectl.profile.loader import MAX_PROFILE_BYTES, discover, search_path

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerEngine
    from servectl.plan.resolve import Resolved


@dataclass(frozen=True)
class AdoptedMatch:
    """A running (or stopped) container recognised as an adopted profile's service."""

    resolved: Resolved
    document: Mapping[str, Any]  # its docker inspect


def adopted_profiles(environ: Mapping[str, str]) -> list[Resolved]:
    """The profiles on the search path of ``environ`` (default ``os.environ``) that ``servectl adopt`` wrote (an
    ``adopted:`` key), resolved in that environment.

    Profiles that no longer load are left out (``servectl validate`` reports them).
    """
    folders = search_path(environ=environ)
    out: list[Resolved] = []
    for _, file in sorted(discover(folders).items()):
        if file.is_base:
            continue
        try:  # a cheap look first: status runs this for every profile, and few were adopted
            if b"adopted" not in read_bounded(file.path, limit_bytes=MAX_PROFILE_BYTES, what="profile"):
                continue
        except (OSError, FileRefused):  # a FIFO, a folder, binary junk: its own row says so (`validate`)
            continue
        # here: only an adopted profile needs the validator and the compiler (read once, with its bases)
        from servectl.plan.resolve import Resolved, plan_for
        from servectl.profile.validate import load_profile_file

        try:
            loaded = load_profile_file(file, folders=folders)
            if loaded.profile.adopted is not None:
                out.append(Resolved(loaded=loaded, plan=plan_for(loaded, environ=environ)))
        except ServectlError:
            continue
    return out


def find_adopted(
    docker: DockerEngine,
    profiles: Sequence[Resolved],
    *,
    scope: Mapping[str, str] | None = None,
) -> list[AdoptedMatch]:
    """The containers that are the services of ``profiles`` (see the module docstring for the rule)."""
    if not profiles:
        return []
    from servectl.plan.container_match import container_diff

    matches: list[AdoptedMatch] = []
    seen: set[str] = set()
    for resolved in profiles:
        spec = resolved.loaded.profile.adopted
        if spec is None:
            continue
        document = None
        for key in (spec.container_id, resolved.plan.docker.name):
            if key:
                document = docker.container_document(key)
            if document is not None:
                break
        if document is None or str(document.get("Id")) in seen:
            continue
        labels = (document.get("Config") or {}).get("Labels") or {}
        if labels.get(LABEL_MANAGED) == "1":
            continue  # servectl's own container of this profile: the labelled read model lists it
        if scope and any(labels.get(k) != v for k, v in scope.items()):
            continue
        image = docker.image_document(str(document.get("Image") or "")) if document.get("Image") else None
        if container_diff(resolved.plan, document, resolved.loaded.flag_catalog(), image=image):
            continue
        seen.add(str(document.get("Id")))
        matches.append(AdoptedMatch(resolved, document))
    return matches
