"""The program servectl runs inside an engine image: it imports the image's own SGLang and reports on it.

Standard library only, plus the image's ``sglang``: the source of this file is handed to the image's Python
as ``python -c SOURCE MODE ...`` and must run under whatever Python and packages that image has. Output is
one JSON document on stdout, framed by :data:`BEGIN` / :data:`END` so that whatever SGLang prints while it
imports (warnings, banners) cannot corrupt it.

Modes:
    ``catalog``: every action of the parser built by ``ServerArgs.add_cli_args``, as raw facts (action class
        and its bases, option strings, dest, nargs, type name, choices, default, const), plus the SGLang
        version. :mod:`servectl.profile.catalog_dump` turns that into a flag catalog.
    ``parse ARG...``: SGLang's own ``prepare_server_args(ARGS)`` (argparse plus the ``ServerArgs`` record),
        then ``resolve_once()``, the post-parse resolution, which may need a GPU: its failure is reported
        apart from a parse failure. argparse's own error message is captured as SGLang prints it.
"""

from __future__ import annotations

BEGIN = "<<<servectl-probe>>>"
END = "<<<servectl-probe-end>>>"

# Everything below runs inside the image; keep it importable on Python 3.8+ and stdlib-only.


def _jsonable(value):  # type: ignore[no-untyped-def]  # runs on any Python: no annotations on purpose
    import json

    if isinstance(value, (set, frozenset)):
        value = sorted(value, key=str)
    if isinstance(value, tuple):
        value = list(value)
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return {"__repr__": repr(value)}
    return value


def _type_name(kind):  # type: ignore[no-untyped-def]
    if kind is None:
        return None
    func = getattr(kind, "func", None)  # functools.partial
    if func is not None:
        kind = func
    return getattr(kind, "__name__", None) or type(kind).__name__


def _dump_catalog():  # type: ignore[no-untyped-def]
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    actions = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        choices = action.choices
        actions.append(
            {
                "option_strings": list(action.option_strings),
                "dest": action.dest,
                "action": type(action).__name__,
                "action_bases": [c.__name__ for c in type(action).__mro__[1:] if c is not object],
                "nargs": action.nargs if action.nargs is None or isinstance(action.nargs, (int, str)) else None,
                "type": _type_name(action.type),
                "choices": None if choices is None else _jsonable(choices),
                "choices_ordered": not isinstance(choices, (set, frozenset)),
                "default": _jsonable(action.default),
                "const": _jsonable(action.const),
                "required": bool(action.required),
            }
        )
    return {"actions": actions}


def _parse(argv):  # type: ignore[no-untyped-def]
    import contextlib
    import io
    import sys

    from sglang.srt.server_args import prepare_server_args

    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            server_args = prepare_server_args(list(argv))
    except SystemExit as stop:
        lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
        message = lines[-1] if lines else "the parser exited with status %s" % stop.code
        return {"parsed": False, "error": message, "stderr_tail": lines[-5:]}
    except Exception as err:  # SGLang's ServerArgs construction raised: its own message
        return {"parsed": False, "error": "%s: %s" % (type(err).__name__, err)}
    finally:
        sys.stderr.write(stderr.getvalue())
    result = {"parsed": True}
    resolve = getattr(server_args, "resolve_once", None)
    if resolve is None:  # older SGLang resolves in __post_init__, which already ran
        result["resolved"] = True
        return result
    try:
        resolve()
    except Exception as err:  # may need a GPU or the model files: reported, the caller judges
        result["resolved"] = False
        result["resolve_error"] = "%s: %s" % (type(err).__name__, err)
    else:
        result["resolved"] = True
    return result


def _version():  # type: ignore[no-untyped-def]
    try:
        from sglang.version import __version__

        return str(__version__)
    except Exception:
        try:
            import importlib.metadata

            return importlib.metadata.version("sglang")
        except Exception:
            return ""


def main(argv):  # type: ignore[no-untyped-def]
    """Run one mode and print its framed JSON result; exit 0 unless the probe itself broke."""
    import json
    import sys

    mode = argv[0] if argv else "catalog"
    out = {"mode": mode, "python": sys.version.split()[0]}
    try:
        import sglang.srt.server_args  # noqa: F401  # the import itself is the first fact to report
    except Exception as err:
        out["error"] = "cannot import sglang.srt.server_args: %s: %s" % (type(err).__name__, err)
        out["no_sglang"] = isinstance(err, ImportError) and getattr(err, "name", "") in ("sglang", "sglang.srt")
    else:
        out["sglang_version"] = _version()
        if mode == "catalog":
            out.update(_dump_catalog())
        elif mode == "parse":
            out.update(_parse(argv[1:]))
        else:
            out["error"] = "unknown probe mode %r" % mode
    sys.stdout.write("\n" + BEGIN + "\n" + json.dumps(out) + "\n" + END + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
