"""Checks of what the profile pins: its status, the image digest and the model revision."""

from __future__ import annotations

from typing import Any

from servectl.preflight.checks.base import make_result
from servectl.preflight.facts import Facts
from servectl.preflight.model import CheckResult, PreflightRequest, Result


def check_profile_status(request: PreflightRequest, facts: Facts) -> CheckResult:
    """A retired profile is not started."""
    if request.status == "retired":
        return make_result(
            "profile.status",
            "fail",
            f"profile {request.profile_name} is retired",
            "promote it again or start another profile",
            status=request.status,
        )
    return make_result("profile.status", "pass", f"status {request.status}", status=request.status)


def check_image_pinned(request: PreflightRequest, facts: Facts) -> CheckResult:
    """The image is local and is the pinned one (by image id or repo digest)."""
    strict = request.status == "promoted"
    out: dict[str, Any] = {"image_ref": request.image_ref, "pinned_digest": request.image_digest}
    if not request.image_ref:
        return make_result("image.pinned", "fail", "no image in the request", "set the profile's image", **out)
    if facts.engine is None:
        return make_result("image.pinned", "unknown", "Docker unreachable, see docker.engine", **out)
    image = facts.image
    if image is not None:
        out.update(image_id=image.id, repo_digests=list(image.repo_digests), tags=list(image.tags))
    if request.image_digest is None:
        if image is None:
            return make_result(
                "image.pinned",
                "fail",
                f"image {request.image_ref} is not present locally",
                f"docker pull {request.image_ref} (or docker load it)",
                **out,
            )
        return make_result(
            "image.pinned",
            "fail" if strict else "warn",
            f"image {request.image_ref} ({image.id[:19]}) is not pinned to a digest",
            f"pin it in the profile: image digest {image.id}",
            **out,
        )
    if image is not None and request.image_digest in image.digests():
        return make_result("image.pinned", "pass", f"{request.image_ref} is {request.image_digest[:19]}", **out)
    pinned = facts.image_by_digest
    if image is None and pinned is None:
        return make_result(
            "image.pinned",
            "fail",
            f"image {request.image_ref} is not present locally (pinned {request.image_digest[:19]})",
            f"docker pull the pinned image (repo@{request.image_digest}) or docker load it",
            **out,
        )
    if image is None:
        assert pinned is not None
        out.update(pinned_image_id=pinned.id, pinned_tags=list(pinned.tags))
        return make_result(
            "image.pinned",
            "fail" if strict else "warn",
            f"tag {request.image_ref} is not present, but the pinned image is ({pinned.id[:19]})",
            "run the image by digest, or tag the pinned image again",
            **out,
        )
    message = f"tag {request.image_ref} now points to {image.id[:19]}, not the pinned {request.image_digest[:19]}"
    if pinned is not None:
        out.update(pinned_image_id=pinned.id, pinned_tags=list(pinned.tags))
        message += " (the pinned image is still present)"
    return make_result(
        "image.pinned",
        "fail" if strict else "warn",
        message,
        "run the image by digest, or re-pin after qualifying the new image",
        **out,
    )


def check_model_revision(request: PreflightRequest, facts: Facts) -> CheckResult:
    """A Hugging Face snapshot (or local-dir download) is the pinned revision."""
    model = facts.model
    pinned = request.model_revision
    if model is None or not model.exists:
        return make_result("model.revision", "unknown", "no model folder, see model.present", pinned=pinned)
    actual = model.hf_snapshot_revision or model.local_dir_revision
    source = "hf cache snapshot" if model.hf_snapshot_revision else "hf local-dir metadata"
    out: dict[str, Any] = {
        "pinned": pinned,
        "actual": actual,
        "source": source if actual else None,
        "hf_refs": dict(model.hf_refs),
    }
    if pinned is None:
        result: Result = "warn" if request.status == "promoted" else "pass"
        return make_result(
            "model.revision",
            result,
            "no revision pinned" + (f" (folder is {actual})" if actual else ""),
            f"pin it in the profile: revision {actual}" if actual else "",
            **out,
        )
    if actual is None:
        return make_result(
            "model.revision",
            "unknown",
            f"cannot tell the revision of {model.path} (not a Hugging Face snapshot)",
            "serve from the Hugging Face cache snapshot to have the pin checked",
            **out,
        )
    from servectl.adapters.host import revision_matches

    if revision_matches(pinned, actual, model.hf_refs):
        return make_result("model.revision", "pass", f"revision {actual[:12]} ({source}) matches the pin", **out)
    return make_result(
        "model.revision",
        "fail",
        f"{source} is {actual[:12]}, the profile pins {pinned[:12]}",
        f"hf download {model.hf_repo_id or 'REPO'} --revision {pinned}, or re-pin after qualifying",
        **out,
    )
