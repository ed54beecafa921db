"""``rollback`` (swap back to the profile that ran before, from history) and ``rollback-check`` (prove that
each profile's rollback target could start now, starting nothing).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from servectl.adapters.state import RUN_EVENTS, previous_profile
from servectl.errors import PreflightFailed, ServectlError, ServiceConflict, UsageError
from servectl.service.context import Context
from servectl.service.journal import SwapJournal, read_journal
from servectl.service.services import ALIVE_STATES, ServiceInfo
from servectl.service.swap import SwapOptions, open_swap, run_swap
from servectl.service.swap_preflight import Preflight, overlaps, profile_preflight
from servectl.service.transaction.model import SwapResult

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerEngine
    from servectl.adapters.gpu import GpuInventory
    from servectl.plan.resolve import Resolved
    from servectl.profile.loader import ProfileSearch


@dataclass(frozen=True)
class CheckItem:
    """One point of a rollback check: ``declared``, ``validates``, ``image``, ``model`` or ``preflight``."""

    check: str
    ok: bool
    message: str


@dataclass(frozen=True)
class RollbackCheck:
    """Whether ``profile``'s rollback target could start now."""

    profile: str
    target: str | None
    items: tuple[CheckItem, ...]

    @property
    def ok(self) -> bool:
        return bool(self.items) and all(item.ok for item in self.items)

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "target": self.target,
            "ok": self.ok,
            "items": [asdict(i) for i in self.items],
        }


def rollback(ctx: Context, *, opts: SwapOptions | None = None) -> SwapResult:
    """Swap back to the profile that ran before the current one (from history). Same errors as :func:`swap`.

    A journal left by a killed transaction is settled first (the transaction's undo, as ``recover``); when
    that transaction had in fact finished, the rollback then goes back from it as from any finished swap.
    ``ctx`` and ``opts`` are :func:`~servectl.service.swap.swap`'s; the same context serves the settling and
    the swap.

    Raises:
        UsageError: nothing runs, several services run, or history has no earlier profile.
    """
    opts = opts or SwapOptions()
    settled = ""
    journal = read_journal(ctx.state_dir)
    if journal is not None:
        # A killed transaction: the journal knows what ran before it (the history does not), so rolling
        # back means settling it; if it had finished, what ran before it is now in the history.
        done = _settle_journal(journal, ctx=ctx, opts=opts)
        if not isinstance(done, str):
            return done
        settled = done + "; then "
    before, events = _history_target(ctx)
    swap_tx = open_swap(ctx, opts, kind="rollback")
    drift = _drift_note(before, events, swap_tx.tx.resolve)  # the swap starts the plan this resolution gives
    result = run_swap(swap_tx, target=before, opts=opts)
    return replace(result, message=settled + result.message + drift) if settled or drift else result


def _history_target(ctx: Context) -> tuple[str, list[dict[str, Any]]]:
    """The profile that ran before the one service running now, from the history; and the history."""
    alive = [s for s in ctx.runtime.services(probe=False) if s.state in ALIVE_STATES]
    if not alive:
        raise UsageError("nothing of servectl runs, so there is nothing to roll back; `servectl up NAME` starts one")
    if len(alive) > 1:
        raise UsageError("several services run (" + ", ".join(s.profile for s in alive) + "); use `servectl swap NAME`")
    events = [dict(e) for e in ctx.history.events()]
    before = previous_profile(events, alive[0].profile)
    if before is None:
        malformed = getattr(ctx.history, "malformed", 0)  # the state folder's History counts them; fakes need not
        shape = "entry of the wrong shape was" if malformed == 1 else "entries of the wrong shape were"
        ignored = f" ({malformed} {shape} ignored)" if malformed else ""
        raise UsageError(
            f"the history has no profile that ran before {alive[0].profile}{ignored}; name the target with "
            "`servectl swap NAME` (a plain `servectl swap` goes to its declared rollback)"
        )
    return before, events


def _drift_note(profile: str, events: Sequence[Mapping[str, Any]], resolve_profile: Callable[[str], Resolved]) -> str:
    """A note when ``profile``'s file changed since it last ran (rollback starts it as the file is now)."""
    ran = next(
        (
            str(e["plan_hash"])
            for e in reversed(events)
            if e.get("profile") == profile and e.get("event") in RUN_EVENTS and e.get("plan_hash")
        ),
        None,
    )
    if ran is None:
        return ""
    try:
        now = resolve_profile(profile).plan.plan_hash
    except ServectlError:
        return ""
    if now == ran:
        return ""
    return (
        f"; note: {profile} last ran with plan {ran}, its profile now compiles to {now} (the file or host "
        f"changed since): this is what started (`servectl diff` or the history show what changed)"
    )


def _settle_journal(journal: SwapJournal, *, ctx: Context, opts: SwapOptions) -> SwapResult | str:
    """Settle a killed transaction's journal: the rollback's result, or (when that transaction had
    finished, so there is something to roll back from) the words of what settling did."""
    from servectl.service.recover import recover

    settled = recover(ctx, lock_timeout_s=opts.lock_timeout_s, on_phase=opts.on_phase)  # rollback --wait
    if settled.outcome in ("finished", "nothing"):
        return settled.message
    return SwapResult(
        from_profile=journal.to_profile,
        to_profile=settled.restored or journal.to_profile,
        outcome="rolled-back",
        message=f"rolled back from the journal: {settled.message}",
    )


def rollback_check(
    ctx: Context,
    *,
    names: Sequence[str] | None,
    preflight: Preflight | None = None,
    path_is_dir: Callable[[str], bool] = os.path.isdir,
) -> list[RollbackCheck]:
    """Prove that each profile's rollback target could start now. Starts and stops nothing.

    For each profile (``names``; default: every profile that declares ``rollback:``) its target must
    validate, its image must be present (with the pinned digest), its model folder must exist, and
    preflight must pass counting the service the target would replace as stopped.

    Args:
        ctx: the adapters and state; preflight reads :attr:`~servectl.service.context.Context.gpus`.
        names: the profiles whose target to check.
        preflight: the check (default :func:`profile_preflight` on the context's state folder and probe).
        path_is_dir: whether a model folder exists (tests).
    """
    check = preflight or profile_preflight(history=ctx.history, host=ctx.probe)
    if names is None:
        names = _profiles_with_rollback(ctx.profile_folders)
    running = ctx.runtime.services(probe=False)
    docker, gpus = ctx.docker, ctx.gpus
    checks = [_check_one(n, docker, gpus, check, ctx.resolve, running, path_is_dir) for n in names]
    return [_with_way_back(c, ctx, running) for c in checks]


def _with_way_back(check: RollbackCheck, ctx: Context, running: Sequence[ServiceInfo]) -> RollbackCheck:
    """A target on warm standby comes back by a resume: say so, with its last measured cost."""
    from servectl.service.standby import way_back_words

    words = None if check.target is None else way_back_words(ctx.state_dir, check.target, running)
    if words is None:
        return check
    return replace(check, items=(*check.items, CheckItem("standby", True, words)))


def _profiles_with_rollback(folders: ProfileSearch) -> list[str]:
    from servectl.profile.loader import discover
    from servectl.profile.validate import load_profile_file

    out = []
    for name, file in sorted(discover(folders).items()):
        if file.is_base:
            continue
        try:
            if load_profile_file(file, folders=folders).profile.rollback:
                out.append(name)
        except ServectlError:
            continue  # a profile that does not load says so in `servectl validate`
    return out


def _check_one(
    name: str,
    docker: DockerEngine,
    gpus: GpuInventory,
    preflight: Preflight,
    resolve: Callable[[str], Resolved],
    running: Sequence[ServiceInfo],
    path_is_dir: Callable[[str], bool],
) -> RollbackCheck:
    try:
        source = resolve(name)
    except ServectlError as e:
        return RollbackCheck(name, None, (CheckItem("declared", False, f"{name} does not load: {e.lines()[0]}"),))
    target = source.loaded.profile.rollback
    if target is None:
        return RollbackCheck(name, None, (CheckItem("declared", False, f"{name} declares no `rollback:` target"),))
    items = [CheckItem("declared", True, f"{name} rolls back to {target}")]
    try:
        resolved = resolve(target)
    except ServectlError as e:
        problems = e.lines()
        more = f" (+{len(problems) - 1} more: `servectl validate {target}`)" if len(problems) > 1 else ""
        items.append(CheckItem("validates", False, f"{target} does not validate: {problems[0]}{more}"))
        return RollbackCheck(name, target, tuple(items))
    items.append(CheckItem("validates", True, f"{target} validates and compiles"))
    items.append(_image_item(resolved, docker))
    model_dir = resolved.plan.docker.mounts[0].source
    if path_is_dir(model_dir):
        items.append(CheckItem("model", True, f"model folder {model_dir} is there"))
    else:
        items.append(CheckItem("model", False, f"model folder {model_dir} does not exist; fix model.path of {target}"))
    blocking = [s for s in running if overlaps(s, resolved)]
    if len(blocking) > 1:
        names = ", ".join(s.profile for s in blocking)
        items.append(CheckItem("preflight", False, f"{target} would replace several services at once ({names})"))
        return RollbackCheck(name, target, tuple(items))
    replacing = blocking[0] if blocking else None
    try:
        preflight(resolved=resolved, replacing=replacing, skip=frozenset(), docker=docker, gpus=gpus, running=running)
        once = f" once {replacing.profile} is stopped" if replacing is not None else ""
        items.append(CheckItem("preflight", True, f"preflight passes{once}"))
    except (PreflightFailed, ServiceConflict) as e:
        items.append(CheckItem("preflight", False, f"preflight fails: {e.lines()[0]}"))
    except ServectlError as e:
        items.append(CheckItem("preflight", False, f"preflight could not run: {e.lines()[0]}"))
    return RollbackCheck(name, target, tuple(items))


def _image_item(resolved: Resolved, docker: DockerEngine) -> CheckItem:
    image = resolved.loaded.profile.image
    ref = resolved.plan.docker.image  # repo@digest when a digest is pinned
    try:
        present = bool(docker.image_present(ref)) or (
            image.digest is not None and bool(docker.image_present(image.digest))
        )
    except ServectlError as e:
        return CheckItem("image", False, f"cannot ask Docker about {ref}: {e.lines()[0]}")
    if present:
        pinned = f" with the pinned digest {image.digest}" if image.digest else " (no digest pinned)"
        return CheckItem("image", True, f"image {image.ref} is present{pinned}")
    if image.build == "standin" and image.digest is None:
        return CheckItem("image", True, f"image {image.ref} is missing; servectl builds it at start (stand-in)")
    if image.digest:
        return CheckItem(
            "image",
            False,
            f"image {image.ref} with digest {image.digest} is not on this host; `docker pull {ref}`",
        )
    return CheckItem("image", False, f"image {image.ref} is not on this host; `docker pull {image.ref}`")
