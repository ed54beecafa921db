"""The program servectl runs inside an engine image to parse an argv with the image's own SGLang.

Standard library only, plus the image's ``sglang``: the source of this file is handed to the image's Python
as ``python -c SOURCE parse ARG...`` and must run under whatever Python and packages that image has. (The
parser's catalog comes from :mod:`servectl.profile.engine_dump`, run the same way.) The result is one JSON
document on stdout, framed by :data:`BEGIN` / :data:`END` so that whatever SGLang prints while it imports
(warnings, banners) cannot corrupt it.

``parse ARG...`` runs SGLang's own ``prepare_server_args(ARGS)`` (argparse plus the ``ServerArgs`` record),
then ``resolve_once()``, the post-parse resolution, which may need a GPU or the model files: its failure is
reported apart from a parse failure. argparse's own error line is captured as SGLang prints it.
"""

from __future__ import annotations

import sys
from typing import Any

BEGIN = "<<<servectl-probe>>>"
END = "<<<servectl-probe-end>>>"


def _parse(argv: list[str]) -> dict[str, Any]:
    import contextlib
    import io

    from sglang.srt.server_args import prepare_server_args  # type: ignore[import-not-found]  # the image's

    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            server_args = prepare_server_args(list(argv))
    except SystemExit as stop:  # argparse: usage and "error: ..." on stderr, then exit 2
        lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
        message = lines[-1] if lines else f"the parser exited with status {stop.code}"
        return {"parsed": False, "parse_error": message}
    except Exception as err:  # SGLang's ServerArgs construction raised: its own message
        return {"parsed": False, "parse_error": f"{type(err).__name__}: {err}"}
    finally:
        sys.stderr.write(stderr.getvalue())
    result: dict[str, Any] = {"parsed": True}
    if "--enable-memory-saver" in argv:  # SGLang imports it then (torch_memory_saver_adapter.py) and raises
        result["memory_saver_error"] = _memory_saver_error()
    resolve = getattr(server_args, "resolve_once", None)
    if resolve is None:  # older SGLang resolves in __post_init__, which already ran
        result["resolved"] = True
        return result
    try:
        resolve()
    except Exception as err:  # may need a GPU or the model files: reported, the caller judges
        result["resolved"] = False
        result["resolve_error"] = f"{type(err).__name__}: {err}"
    else:
        result["resolved"] = True
    return result


def _memory_saver_error() -> str | None:
    """Whether the image's Python imports ``torch_memory_saver`` as SGLang's adapter does (None: it does)."""
    try:
        import torch_memory_saver  # type: ignore[import-not-found]  # noqa: F401  # the image's
    except ImportError as err:
        return f"{type(err).__name__}: {err}"
    except Exception as err:  # it imports but fails (its CUDA build against the image's torch, say)
        return f"{type(err).__name__}: {err}"
    return None


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:  # no distribution metadata: ask the package
        try:
            from sglang.version import __version__  # type: ignore[import-not-found]  # the image's

            return str(__version__)
        except Exception:
            return ""


def main(argv: list[str]) -> int:
    """Run ``parse ARG...`` and print the framed JSON result; exit 0 unless the probe itself broke."""
    import json

    mode = argv[0] if argv else ""
    out: dict[str, Any] = {"mode": mode, "python": sys.version.split()[0]}
    try:
        import sglang.srt.server_args  # type: ignore[import-not-found]  # noqa: F401  # the import is the first fact
    except Exception as err:
        out["error"] = f"cannot import sglang.srt.server_args: {type(err).__name__}: {err}"
        name = str(getattr(err, "name", "") or "")
        out["no_sglang"] = isinstance(err, ImportError) and (name == "sglang" or name.startswith("sglang."))
    else:
        out["sglang_version"] = _version()
        if mode == "parse":
            out.update(_parse(argv[1:]))
        else:
            out["error"] = f"unknown probe mode {mode!r} (parse)"
    sys.stdout.write("\n" + BEGIN + "\n" + json.dumps(out) + "\n" + END + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
