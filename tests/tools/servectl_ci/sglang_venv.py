"""A small venv with the real SGLang wheel's parser, for tests that compare servectl with it (no GPU needed).

``sglang.srt.server_args`` imports torch, triton and a few service libraries at module level, so the venv holds
the wheel (``--no-deps``) plus exactly what that import needs, pinned (found by importing it in an empty venv
and adding what was missing, until it imported). Torch is the CPU build that this machine kind keeps on disk
(``pip install torch==2.13.0`` takes that file); the wheel asks for 2.14.1, which only matters for GPU code.

The venv is cached by a hash of its recipe under ``~/.cache/servectl-ci/sglang-parser-<hash>`` (or
``$SERVECTL_CI_CACHE``), built in a temporary folder and renamed into place, so an interrupted build never
counts as cached. ``python3 -m servectl_ci.sglang_venv`` builds it and prints its python; the stand-in
image builder and the catalog extraction script use the same recipe.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

SGLANG_VERSION = "0.5.23"
SGLANG_REQUIREMENT = f"sglang=={SGLANG_VERSION}"
#: What ``import sglang.srt.server_args`` needs on a CPU machine, pinned; installed with --no-deps.
PARSER_REQUIREMENTS: tuple[str, ...] = (
    "torch==2.13.0",
    "triton==3.9.0",
    "numpy==2.4.6",
    "orjson==3.13.0",
    "psutil==7.2.2",
    "pybase64==1.5.1",
    "requests==2.34.2",
    "urllib3==2.8.0",
    "idna==3.20",
    "certifi==2026.10.19.post1",
    "charset-normalizer==3.5.3",
    "packaging==26.4",
    "pillow==13.0.0",
    "starlette==1.10.0",
    "anyio==4.16.0",
    "typing_extensions==4.16.0",
    "typing-inspection==0.4.5",
    "annotated-types==0.8.0",
    "msgspec==0.23.0",
    "pydantic==2.14.4",
    "pydantic_core==2.50.5",
    "pyzmq==27.3.0",
    "tqdm==4.70.1",
    "ipython==9.18.1",
    "ipython_pygments_lexers==1.1.1",
    "jedi==0.20.1",
    "parso==0.8.7",
    "pexpect==4.9.0",
    "ptyprocess==0.7.0",
    "prompt_toolkit==3.0.53",
    "wcwidth==0.9.4",
    "Pygments==2.21.0",
    "stack-data==0.6.3",
    "asttokens==3.0.2",
    "executing==2.3.0",
    "pure_eval==0.2.4",
    "traitlets==5.16.1",
    "matplotlib-inline==0.2.2",
    "aiohttp==3.14.5",
    "aiohappyeyeballs==2.7.1",
    "aiosignal==1.4.0",
    "attrs==26.1.0",
    "frozenlist==1.8.0",
    "multidict==7.2.1",
    "propcache==0.5.4",
    "yarl==1.25.1",
    "filelock==4.3.1",
    "fsspec==2026.9.0",
    "Jinja2==3.1.6",
    "MarkupSafe==3.0.4",
    "networkx==3.6.1",
    "sympy==1.14.0",
    "mpmath==1.3.0",
)
#: Imported to prove the venv works (and to fail the build, not the first test, when it does not).
PROBE = (
    "import argparse; from sglang.srt.server_args import ServerArgs; ServerArgs.add_cli_args(argparse.ArgumentParser())"
)


def cache_root() -> Path:
    """``$SERVECTL_CI_CACHE`` or ``~/.cache/servectl-ci``."""
    return Path(os.environ.get("SERVECTL_CI_CACHE") or Path.home() / ".cache" / "servectl-ci")


def recipe_hash() -> str:
    """Names the venv: the requirements and the Python that builds it."""
    recipe = "\n".join((SGLANG_REQUIREMENT, *PARSER_REQUIREMENTS, sys.version.split()[0], PROBE))
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def venv_dir(root: Path | None = None) -> Path:
    return (root or cache_root()) / f"sglang-parser-{recipe_hash()}"


def venv_python(root: Path | None = None) -> Path:
    return venv_dir(root) / "bin" / "python"


def is_built(root: Path | None = None) -> bool:
    return (venv_dir(root) / "servectl-ok").is_file()


def ensure_parser_venv(root: Path | None = None, *, log: Callable[[str], None] | None = None) -> Path:
    """Build the venv unless it is cached; return its python.

    Raises:
        RuntimeError: pip or the import probe failed (the message names the step and ends with pip's output).
    """
    target = venv_dir(root)
    if is_built(root):
        return target / "bin" / "python"
    say = log or (lambda line: print(line, file=sys.stderr))
    target.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=target.name + ".build-", dir=target.parent))
    try:
        say(f"building the SGLang {SGLANG_VERSION} parser venv in {target} (cached afterwards)")
        _run([sys.executable, "-m", "venv", str(build)], "create the venv")
        pip = [str(build / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check"]
        _run([*pip, SGLANG_REQUIREMENT], f"install {SGLANG_REQUIREMENT}")
        _run([*pip, *PARSER_REQUIREMENTS], "install the parser's imports")
        _run([str(build / "bin" / "python"), "-c", PROBE], "import sglang.srt.server_args")
        # A venv's scripts name its folder; the python symlink does not, so renaming keeps it usable.
        (build / "servectl-ok").write_text(recipe_hash() + "\n")
        if target.exists():
            shutil.rmtree(target)
        build.rename(target)
    finally:
        if build.exists():
            shutil.rmtree(build, ignore_errors=True)
    return target / "bin" / "python"


def _run(cmd: list[str], step: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-15:]
        raise RuntimeError(f"sglang parser venv: could not {step} (exit {done.returncode}):\n" + "\n".join(tail))


if __name__ == "__main__":
    try:
        print(ensure_parser_venv())
    except RuntimeError as err:
        print(err, file=sys.stderr)
        raise SystemExit(1) from None


class RealParser:
    """The real SGLang parser in a child process (``engine_dump.py parse``): argv in, verdict out.

    Use as a context manager; :meth:`verdict` returns ``{"ok": True, "args": {dest: value}}`` (only the flags
    given) or ``{"ok": False, "error": "argparse's message"}``.
    """

    def __init__(self, python: Path | str) -> None:
        self._python = str(python)
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> RealParser:
        from servectl.profile import engine_dump

        self._proc = subprocess.Popen(
            [self._python, engine_dump.__file__, "parse"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.wait(timeout=30)
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._proc = None

    def verdict(self, argv: list[str]) -> dict[str, object]:
        import json

        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None, "use RealParser in a with"
        proc.stdin.write(json.dumps(argv) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the real parser exited (status {proc.poll()})")
        reply: dict[str, object] = json.loads(line)
        return reply
