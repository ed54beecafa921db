"""What a service needs on the host besides its container: the plan's generated files and its key files.

Each key (the API key, the admin key) comes from the variable or file the profile names; servectl writes an
env-sourced key to a 0600 file under the state folder and deletes that file (never a user's own) when the
service stops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from servectl.adapters.state import atomic_write_text
from servectl.adapters.state_sharing import make_folder
from servectl.errors import UsageError
from servectl.files import FileRefused, read_text_bounded

if TYPE_CHECKING:
    from servectl.plan.compile import LaunchPlan, SecretRef


#: An API key file is a line of text; anything larger is the wrong file.
_KEY_FILE_LIMIT_BYTES = 64 * 1024


def read_key(source: str, name: str, environ: Mapping[str, str], *, setting: str, then: str = "") -> str:
    """The API key in environment variable ``name`` (``source`` "env") or in file ``name`` ("file"), stripped.

    The one reader of API keys: a service's (``serve.api_key_env``/``api_key_file``, :func:`read_api_key`) and
    a benchmark's (``--api-key-env``, or the profile's key, :func:`servectl.bench.model.read_api_key`).
    ``setting`` names what asked for it at the start of each error; ``then`` ends the "export it" fix.

    Raises:
        UsageError: the variable is not set or empty, or the file cannot be read or is empty.
    """
    if source == "env":
        value = environ.get(name, "").strip()
        if not value:
            raise UsageError(f"{setting}: ${name} is not set; export {name}=<key>{then}")
        return value
    try:
        value = read_text_bounded(Path(name), limit_bytes=_KEY_FILE_LIMIT_BYTES, what="key file").strip()
    except FileNotFoundError:
        raise UsageError(f"{setting}: cannot read {name} (No such file or directory); create it with the key") from None
    except FileRefused as e:
        raise UsageError(f"{setting}: {name} {e.reason}; the key file is one line of text") from None
    if not value:
        raise UsageError(f"{setting}: {name} is empty; write the key into it")
    return value


def read_api_key(plan: LaunchPlan, environ: Mapping[str, str]) -> str | None:
    """The service's API key (from the env var or file the profile names), or None if it has none.

    Raises:
        UsageError: the variable is not set or the file cannot be read.
    """
    return None if plan.secret is None else read_secret(plan, plan.secret, environ)


def read_admin_key(plan: LaunchPlan, environ: Mapping[str, str]) -> str | None:
    """The service's admin key (``serve.admin_api_key_env``/``_file``), or None if it has none.

    Raises:
        UsageError: the variable is not set or the file cannot be read.
    """
    return None if plan.admin_secret is None else read_secret(plan, plan.admin_secret, environ)


def read_secret(plan: LaunchPlan, ref: SecretRef, environ: Mapping[str, str]) -> str:
    """The key ``ref`` names, read for ``plan``'s service (errors name the profile's setting)."""
    then = f" before servectl up {plan.profile}"
    return read_key(ref.source, ref.name, environ, setting=f"{plan.source}: {ref.setting}", then=then)


def read_plan_keys(plan: LaunchPlan, environ: Mapping[str, str]) -> dict[str, str]:
    """Every key the plan's container reads, by its path in the container (read before anything starts).

    Raises:
        UsageError: a variable is not set or a file cannot be read.
    """
    return {ref.container_path: read_secret(plan, ref, environ) for ref in plan.secrets}


def write_plan_files(plan: LaunchPlan, *, keys: Mapping[str, str]) -> list[Path]:
    """Write the plan's generated files and, for each env-sourced key in ``keys`` (by container path), its 0600
    key file; return their paths."""
    written: list[Path] = []
    for generated in plan.files:
        path = Path(generated.host_path)
        atomic_write_text(path, generated.content)
        written.append(path)
    for ref in plan.secrets:
        value = keys.get(ref.container_path)
        if ref.source == "env" and value is not None:
            path = Path(ref.host_path)
            make_folder(path.parent, mode=0o700)
            atomic_write_text(path, value + "\n", mode=0o600)
            written.append(path)
    return written


def remove_key_file(mounts: Sequence[tuple[str, str]], state_dir: Path) -> None:
    """Delete the key files servectl wrote for a container (never a user's own key file)."""
    from servectl.plan.keys import KEY_FLAGS

    try:
        generated = (state_dir / "generated").resolve()
    except (OSError, RuntimeError):  # a symbolic link loop: nothing servectl wrote can be under it
        return
    for source, destination in mounts:
        if destination not in KEY_FLAGS or not source:
            continue
        path = Path(source)
        with contextlib.suppress(OSError, RuntimeError):
            if path.resolve().is_relative_to(generated):
                path.unlink(missing_ok=True)


def discard_key_file(plan: LaunchPlan) -> None:
    """Delete the key files servectl wrote for ``plan`` (a start that failed before its container ran)."""
    for ref in plan.secrets:
        if ref.source == "env":
            with contextlib.suppress(OSError):
                Path(ref.host_path).unlink(missing_ok=True)
