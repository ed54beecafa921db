"""What a service needs on the host besides its container: the plan's generated files and the API-key file.

The key comes from the variable or file the profile names; servectl writes an env-sourced key to a 0600
file under the state folder and deletes that file (never a user's own) when the service stops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from servectl.adapters.state import atomic_write_text
from servectl.errors import UsageError
from servectl.plan.compile import API_KEY_CONTAINER_PATH, LaunchPlan

if TYPE_CHECKING:
    pass


def read_api_key(plan: LaunchPlan, environ: Mapping[str, str]) -> str | None:
    """The service's API key (from the env var or file the profile names), or None if it has none.

    Raises:
        UsageError: the variable is not set or the file cannot be read.
    """
    secret = plan.secret
    if secret is None:
        return None
    if secret.source == "env":
        value = environ.get(secret.name, "").strip()
        if not value:
            raise UsageError(
                f"{plan.source}: serve.api_key_env: ${secret.name} is not set; "
                f"export {secret.name}=<key> before servectl up {plan.profile}"
            )
        return value
    try:
        value = Path(secret.name).read_text(encoding="utf-8").strip()
    except OSError as e:
        raise UsageError(
            f"{plan.source}: serve.api_key_file: cannot read {secret.name} ({e.strerror}); create it with the key"
        ) from e
    if not value:
        raise UsageError(f"{plan.source}: serve.api_key_file: {secret.name} is empty; write the key into it")
    return value


def write_plan_files(plan: LaunchPlan, *, api_key: str | None) -> list[Path]:
    """Write the plan's generated files and, for an env-sourced key, the 0600 key file; return their paths."""
    written: list[Path] = []
    for generated in plan.files:
        path = Path(generated.host_path)
        atomic_write_text(path, generated.content)
        written.append(path)
    if plan.secret is not None and plan.secret.source == "env" and api_key is not None:
        path = Path(plan.secret.host_path)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write_text(path, api_key + "\n", mode=0o600)
        written.append(path)
    return written


def remove_key_file(mounts: Sequence[tuple[str, str]], state_dir: Path) -> None:
    """Delete the key file servectl wrote for a container (never a user's own key file)."""
    try:
        generated = (state_dir / "generated").resolve()
    except (OSError, RuntimeError):  # a symbolic link loop: nothing servectl wrote can be under it
        return
    for source, destination in mounts:
        if destination != API_KEY_CONTAINER_PATH or not source:
            continue
        path = Path(source)
        with contextlib.suppress(OSError, RuntimeError):
            if path.resolve().is_relative_to(generated):
                path.unlink(missing_ok=True)


def discard_key_file(plan: LaunchPlan) -> None:
    if plan.secret is not None and plan.secret.source == "env":
        with contextlib.suppress(OSError):
            Path(plan.secret.host_path).unlink(missing_ok=True)
