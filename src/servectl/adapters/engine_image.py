"""Ask the engine image itself: run a standard-library program with the image's own Python and read its answer.

Each program runs in a throwaway container of the image (:meth:`~servectl.adapters.docker.DockerEngine.run_oneshot`:
no network, no GPU, read-only, removed afterwards, killed at a time limit): :mod:`servectl.profile.engine_dump`
(the same dumper that made the shipped catalogs) dumps the parser's flags, the logger format strings or the HTTP
server's route table (:func:`dump_flags`, :func:`dump_logs`, :func:`dump_routes`),
:mod:`servectl.adapters.sglang_probe` parses an argv (:func:`parse_in_image`). The Python comes from the
profile's ``image.entrypoint`` when that is a Python, else is probed from :data:`PYTHON_CANDIDATES`. The readers of
the containers' output are pure.

What the commands make of the answers (a stored catalog, a verdict on a profile) is :mod:`servectl.service.catalog`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from servectl.adapters import sglang_probe
from servectl.adapters.docker import DockerEngine, OneShotResult
from servectl.errors import ServectlError
from servectl.profile import engine_dump

#: Where images keep the Python that has SGLang, most likely first.
PYTHON_CANDIDATES = ("python3", "/opt/venv/bin/python", "/usr/local/bin/python3", "/usr/bin/python3", "python")
DEFAULT_TIMEOUT_S = 120.0
_NO_SGLANG = re.compile(r"No module named '?sglang")


class ImageProbeError(ServectlError):
    """The image could not be asked (no Python, no SGLang, the program broke or ran out of time)."""

    exit_code = 3


class ProbeOutputError(ValueError):
    """What the program in the image printed is not the document it should print."""


def _source(module: Any) -> str:
    return Path(module.__file__).read_text(encoding="utf-8")


def python_candidates(entrypoint: Sequence[str] | None = None) -> list[str]:
    """The Pythons to try: the entrypoint's own when it is one (``python3 -m sglang...``), else the usual ones."""
    if entrypoint:
        first = entrypoint[0]
        if Path(first).name.startswith("python"):
            return [first]
    return list(PYTHON_CANDIDATES)


def parse_probe_output(stdout: str) -> dict[str, Any]:
    """The parse probe's JSON document from everything the container printed on stdout.

    Raises:
        ProbeOutputError: no framed document, or one that is not a JSON object.
    """
    start = stdout.rfind(sglang_probe.BEGIN)
    end = stdout.rfind(sglang_probe.END)
    if start < 0 or end < start:
        raise ProbeOutputError("the probe printed no result")
    return _json_object(stdout[start + len(sglang_probe.BEGIN) : end])


def parse_dump_output(stdout: str) -> dict[str, Any]:
    """``engine_dump.py flags``' catalog document from the container's stdout (SGLang may print before it).

    Raises:
        ProbeOutputError: no JSON object with an ``options`` list.
    """
    start = stdout.find("{\n")
    while start > 0 and stdout[start - 1] != "\n":
        start = stdout.find("{\n", start + 1)
    if start < 0:
        raise ProbeOutputError("the dumper printed no JSON document")
    data = _json_object(stdout[start:])
    if not isinstance(data.get("options"), list) or not data["options"]:
        raise ProbeOutputError("the dumper's document has no options")
    return data


def _json_object(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as err:
        raise ProbeOutputError(f"the result is not JSON: {err}") from err
    if not isinstance(data, dict):
        raise ProbeOutputError("the result is not a JSON object")
    return data


@dataclass(frozen=True)
class ProbeRun:
    """One answer from the image: its document, which Python gave it, and how long the container took."""

    data: dict[str, Any]
    python: str
    seconds: float


def _tail(text: str, lines: int = 2) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:])[-400:]


def run_in_image(
    engine: DockerEngine,
    image: str,
    *,
    source: str,
    args: Sequence[str],
    read: Callable[[OneShotResult], dict[str, Any]],
    entrypoint: Sequence[str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ProbeRun:
    """Run a program's ``source`` with ``args`` under the first of the image's Pythons that has SGLang.

    ``read`` turns the container's output into the program's document; it returns ``{"no_sglang": True}``
    when that Python cannot import SGLang, and raises :class:`ProbeOutputError` when the output is unusable.

    Raises:
        ImageProbeError: no candidate Python exists, none imports SGLang, or the program broke or timed out.
        PreflightFailed: the image is not on this host.
    """
    tried: list[str] = []
    no_sglang = False
    for python in python_candidates(entrypoint):
        result = engine.run_oneshot(image, [python, "-c", source, *args], timeout_s=timeout_s)
        if result.not_found is not None:
            tried.append(f"{python} (not in the image)")
            continue
        if result.timed_out:
            raise ImageProbeError(
                f"image {image}: SGLang's parser did not answer within {timeout_s:.0f} s; the container was "
                "stopped (raise --timeout, or check that the image starts without a GPU)"
            )
        try:
            data = read(result)
        except ProbeOutputError as err:
            detail = _tail(result.stderr) or _tail(result.stdout) or f"exit code {result.exit_code}"
            raise ImageProbeError(f"image {image}: {python}: {err}: {detail}") from err
        if data.get("no_sglang"):
            tried.append(f"{python} (no sglang)")
            no_sglang = True
            continue
        return ProbeRun(data=data, python=python, seconds=result.seconds)
    fix = "set image.entrypoint (or --python) to the image's Python that has SGLang, e.g. /opt/venv/bin/python"
    if no_sglang:
        raise ImageProbeError(f"image {image} has no SGLang: tried {', '.join(tried)}; {fix}")
    raise ImageProbeError(f"image {image} has no Python at {', '.join(python_candidates(entrypoint))}; {fix}")


def _read_dump(result: OneShotResult) -> dict[str, Any]:
    if result.exit_code != 0:
        if _NO_SGLANG.search(result.stderr):
            return {"no_sglang": True}
        raise ProbeOutputError(f"the dumper failed (exit {result.exit_code})")
    return parse_dump_output(result.stdout)


def _read_logs(result: OneShotResult) -> dict[str, Any]:
    if result.exit_code != 0:
        raise ProbeOutputError(f"the log dumper failed (exit {result.exit_code})")
    data = _json_object(result.stdout[result.stdout.find("{") :])
    if not isinstance(data.get("lines"), list):
        raise ProbeOutputError("the log dump has no lines")
    return data


def _read_routes(result: OneShotResult) -> dict[str, Any]:
    if result.exit_code != 0:
        raise ProbeOutputError(f"the route dumper failed (exit {result.exit_code})")
    data = _json_object(result.stdout[result.stdout.find("{") :])
    if not isinstance(data.get("routes"), list):
        raise ProbeOutputError("the route dump has no routes")
    return data


def _read_probe(result: OneShotResult) -> dict[str, Any]:
    data = parse_probe_output(result.stdout)
    if data.get("error") and not data.get("no_sglang"):
        raise ProbeOutputError(str(data["error"]))
    return data


def dump_flags(
    engine: DockerEngine, image: str, *, entrypoint: Sequence[str] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> ProbeRun:
    """The image's parser as a catalog document (``engine_dump.py flags``), from the first Python with SGLang.

    Raises:
        ImageProbeError: the image has no usable Python or SGLang, or the dumper broke or timed out.
        PreflightFailed: the image is not on this host.
    """
    return run_in_image(
        engine, image, source=_source(engine_dump), args=["flags"], read=_read_dump, entrypoint=entrypoint,
        timeout_s=timeout_s,
    )  # fmt: skip


def dump_logs(engine: DockerEngine, image: str, *, python: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> ProbeRun:
    """The logger format strings of the image's ``sglang/srt`` (``engine_dump.py logs``), run with ``python``.

    Raises:
        ImageProbeError: the dumper broke or timed out.
    """
    return run_in_image(
        engine, image, source=_source(engine_dump), args=["logs"], read=_read_logs, entrypoint=(python,),
        timeout_s=timeout_s,
    )  # fmt: skip


def dump_routes(engine: DockerEngine, image: str, *, python: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> ProbeRun:
    """The route table of the image's SGLang HTTP server (``engine_dump.py routes``), run with ``python``.

    Raises:
        ImageProbeError: the dumper broke or timed out.
    """
    return run_in_image(
        engine, image, source=_source(engine_dump), args=["routes"], read=_read_routes, entrypoint=(python,),
        timeout_s=timeout_s,
    )  # fmt: skip


# -- argv parse in the image ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParseVerdict:
    """What the image's own SGLang said of an argv."""

    image: str
    parsed: bool
    error: str | None  # SGLang's (argparse's) message when it did not parse
    resolved: bool | None  # the post-parse resolution ran through (None: not reached)
    resolve_error: str | None  # its exception, which may only mean "needs a GPU or the model files"
    sglang_version: str
    python: str
    seconds: float
    memory_saver_error: str | None = None  # with --enable-memory-saver: importing torch_memory_saver failed


def parse_in_image(
    *,
    image: str,
    argv: Sequence[str],
    engine: DockerEngine,
    entrypoint: Sequence[str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ParseVerdict:
    """Parse ``argv`` (engine flags only) with the image's own parser and run its post-parse resolution.

    Raises:
        PreflightFailed: the image is not on this host.
        ImageProbeError: the image has no usable Python or SGLang, or the probe broke.
    """
    run = run_in_image(
        engine, image, source=_source(sglang_probe), args=["parse", *argv], read=_read_probe, entrypoint=entrypoint,
        timeout_s=timeout_s,
    )  # fmt: skip
    data = run.data
    return ParseVerdict(
        image=image,
        parsed=bool(data.get("parsed")),
        error=str(data["parse_error"]) if data.get("parse_error") else None,
        resolved=data.get("resolved") if isinstance(data.get("resolved"), bool) else None,
        resolve_error=str(data["resolve_error"]) if data.get("resolve_error") else None,
        sglang_version=str(data.get("sglang_version") or ""),
        python=run.python,
        seconds=run.seconds,
        memory_saver_error=str(data["memory_saver_error"]) if data.get("memory_saver_error") else None,
    )


class ParseMemo:
    """One transaction's verdicts of the image's parser, so that a question is asked of the image once.

    Keyed by image id (immutable content, whichever reference found it), argv and entrypoint: a swap's
    preflight (``engine.parse``) and its staging ask the same question of the same image; the second gets the
    first's verdict. Only verdicts are kept; a probe that broke is asked again.
    """

    def __init__(self) -> None:
        self._verdicts: dict[tuple[str, tuple[str, ...], tuple[str, ...]], ParseVerdict] = {}
        #: How many times the image was really asked.
        self.asked = 0

    def parse(
        self,
        *,
        image: str,
        argv: Sequence[str],
        engine: DockerEngine,
        entrypoint: Sequence[str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> ParseVerdict:
        """:func:`parse_in_image`, or the verdict this memo already holds for the same image, argv and entrypoint."""
        found = engine.image(image)
        key = None if found is None else (found.id, tuple(argv), tuple(entrypoint or ()))
        if key is not None and key in self._verdicts:
            return replace(self._verdicts[key], image=image)
        self.asked += 1
        verdict = parse_in_image(image=image, argv=argv, engine=engine, entrypoint=entrypoint, timeout_s=timeout_s)
        if key is not None:
            self._verdicts[key] = verdict
        return verdict


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "PYTHON_CANDIDATES",
    "ImageProbeError",
    "ParseMemo",
    "ParseVerdict",
    "ProbeOutputError",
    "ProbeRun",
    "dump_flags",
    "dump_logs",
    "parse_dump_output",
    "parse_in_image",
    "parse_probe_output",
    "python_candidates",
    "run_in_image",
]
