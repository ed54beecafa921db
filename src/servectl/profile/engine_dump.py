"""Dump an SGLang build's command-line parser and log lines as JSON: the source of servectl's catalogs.

Standard-library only and runnable as a plain file with any Python that can import ``sglang`` (a venv built
from the wheel, or the python inside an engine image)::

    python3 engine_dump.py flags            # the parser, in flag-catalog format (catalogs/<name>.json)
    python3 engine_dump.py logs [--root D]  # every logger format string in sglang/srt (catalogs/logs/<name>.json)
    python3 engine_dump.py routes [--root D]  # the HTTP server's route table (catalogs/routes/<name>.json's routes)
    python3 engine_dump.py parse            # JSON argv lists on stdin -> the real parser's verdict per line

``flags`` builds the parser with ``ServerArgs.add_cli_args`` (what ``python -m sglang.launch_server`` uses) and
records each action's flags, dest, kind, type, nargs, choices and default, plus the data SGLang's own type
functions check against (the phases and keys of ``--cuda-graph-config``). ``logs`` reads the source with
:mod:`ast` and never imports it, so it also runs on a source tree alone.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Logger methods whose first argument is a format string.
LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal"})
#: SGLang helpers that log a message on one rank or once: ``helper(logger, msg)`` or ``helper(msg)``.
LOG_HELPERS = frozenset(
    {"log_info_on_rank0", "print_info_once", "print_warning_once", "warning_once", "info_once", "log_once"}
)
_NO_VALUE_KINDS = {"DeprecatedStoreTrueAction": "switch-deprecated", "DeprecatedStoreConstAction": "const-deprecated"}
_MAX_VARIANTS = 8
#: Marks a placeholder in a log template (a value formatted in at run time).
PLACEHOLDER = "\x00"


# -- flags ---------------------------------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    """``value`` if JSON can hold it unchanged, else None (defaults such as objects are not recorded)."""
    try:
        return json.loads(json.dumps(value)) if value is not None else None
    except (TypeError, ValueError):
        return None


def option_record(action: argparse.Action) -> dict[str, Any] | None:
    """One catalog option from an argparse action; None for help and positionals."""
    if not action.option_strings or isinstance(action, argparse._HelpAction):
        return None
    flags = [f for f in action.option_strings if f.startswith("--")]
    name = type(action).__name__
    kind = "value"  # what decides is nargs: a deprecated store_const with nargs=None still takes a value
    if isinstance(action, argparse.BooleanOptionalAction):
        kind = "bool-optional"
    elif action.nargs == 0:
        kind = _NO_VALUE_KINDS.get(name, "switch")
    record: dict[str, Any] = {"flags": flags, "dest": action.dest, "kind": kind}
    if kind == "value":
        record["type"] = getattr(action.type, "__name__", None) or "str"
        if action.nargs is not None:
            record["nargs"] = str(action.nargs)
        if action.nargs == "?":
            record["const"] = _plain(action.const)  # what the flag alone stores
    if name.startswith("Deprecated"):
        record["deprecated"] = True
    elif kind == "value" and type(action).__module__ != "argparse":
        record["action"] = name  # SGLang's own action (LoRAPathAction checks its values)
    if action.choices is not None:
        choices = [str(c) for c in action.choices]
        record["choices"] = sorted(choices) if isinstance(action.choices, set | frozenset) else choices
    default = _plain(action.default)
    if default not in (None, False, [], ""):
        record["default"] = default
    return record


def _type_rules() -> dict[str, Any]:
    """Data that SGLang's JSON type functions validate against (read from the build, not copied)."""
    rules: dict[str, Any] = {}
    try:
        from sglang.srt.model_executor import cuda_graph_config as cg  # type: ignore[import-not-found]  # the engine
    except ImportError:  # an older build without per-phase CUDA graph settings
        return rules
    rules["parse_cuda_graph_config_arg"] = {
        "phases": list(cg.Phase.ALL),
        "allowed_keys": {k: list(v) for k, v in cg.ALLOWED_KEYS_PER_PHASE.items()},
        "removed_backends": [cg.Backend.TC_PIECEWISE] if hasattr(cg.Backend, "TC_PIECEWISE") else [],
    }
    rules["parse_cuda_graph_backend_arg"] = rules["parse_cuda_graph_config_arg"]["removed_backends"]
    return rules


#: Where :func:`sglang_version` read the version when the distribution metadata has none (key ``version_source``
#: of the dumped documents; absent when the metadata had it, as in the shipped catalogs).
VERSION_FROM_MODULE = "sglang/version.py (the image has no sglang distribution metadata)"
VERSION_UNKNOWN = "nowhere (no sglang distribution metadata and no sglang.version module)"


def sglang_version() -> tuple[str, str | None]:
    """The importable sglang's version, and where it came from when not from its distribution metadata.

    Images that copy the sglang package without installing it have no ``*.dist-info``: then the package's own
    ``sglang/version.py`` says it (:data:`VERSION_FROM_MODULE`); with neither, the version is ``""``.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang"), None
    except PackageNotFoundError:
        pass
    try:
        from sglang.version import __version__  # type: ignore[import-not-found]  # the engine, not servectl
    except ImportError:
        return "", VERSION_UNKNOWN
    return str(__version__), VERSION_FROM_MODULE


def dump_flags() -> dict[str, Any]:
    """The parser of the importable sglang, in flag-catalog format."""
    from sglang.srt.server_args import ServerArgs  # type: ignore[import-not-found]  # the engine, not servectl

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    options = [r for r in (option_record(a) for a in parser._actions) if r is not None]
    sglang, version_source = sglang_version()
    return {
        "engine": "sglang",
        "version": sglang,
        **({"version_source": version_source} if version_source else {}),
        "extracted_from": (
            f"sglang {sglang}: the argparse parser built by "
            "sglang.srt.server_args.ServerArgs.add_cli_args (servectl/profile/engine_dump.py flags)"
        ),
        "entrypoint": "python3 -m sglang.launch_server",
        "argparse": {
            "python": ".".join(str(v) for v in sys.version_info[:3]),
            "negative_number": parser._negative_number_matcher.pattern,
            "allow_abbrev": parser.allow_abbrev,
        },
        "type_rules": _type_rules(),
        "options": options,
    }


# -- parsing -------------------------------------------------------------------------------------------------
class _Refused(Exception):
    pass


def serve_parser(lines: Iterator[str], out: Any) -> None:
    """Answer argv lists (one JSON list per input line) with the real parser's verdict, one JSON per line.

    ``{"ok": true, "args": {dest: value, ...}}`` (only the flags given) or ``{"ok": false, "error": "..."}``.
    """
    from sglang.srt.server_args import ServerArgs

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> Any:
            raise _Refused(message)

        def exit(self, status: int = 0, message: str | None = None) -> Any:
            raise _Refused(message or f"exit {status} (help)")

    parser = Parser()
    ServerArgs.add_cli_args(parser)
    unset = object()  # argparse fills in a default only where the namespace has no value yet
    for line in lines:
        if not line.strip():
            continue
        argv = json.loads(line)
        try:
            import contextlib
            import io

            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                start = argparse.Namespace(**{a.dest: unset for a in parser._actions if a.dest != "help"})
                namespace = parser.parse_args(argv, namespace=start)
            given = {k: _plain(v) for k, v in vars(namespace).items() if v is not unset}
            reply: dict[str, Any] = {"ok": True, "args": given}
        except _Refused as err:
            reply = {"ok": False, "error": str(err)}
        except Exception as err:  # a type function that raises something argparse does not catch
            reply = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


# -- log lines -----------------------------------------------------------------------------------------------
def _is_logger(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "log" in name.lower()


def _templates(node: ast.expr, env: dict[str, list[ast.expr]] | None = None) -> list[str] | None:
    """The literal text of a message expression with a placeholder for every formatted value.

    Handles literals, f-strings, implicit concatenation, ``+``, ``%`` and ``.format``. A formatted value that
    picks between literals (``{'a' if x else 'b'}``) gives one template per choice. None when the message is
    not built from a literal (``logger.info(msg)``). ``env``: local names assigned message pieces in the
    function (``name = f"{label} KV Cache" if label else "KV Cache"``) are read through, one template per value.
    """
    env = env or {}
    if isinstance(node, ast.Name) and node.id in env:
        rest = {k: v for k, v in env.items() if k != node.id}
        each = [_templates(value, rest) for value in env[node.id]]
        return None if any(e is None for e in each) else [t for e in each for t in e or ()][:_MAX_VARIANTS]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        body, orelse = _templates(node.body, env), _templates(node.orelse, env)
        return None if body is None or orelse is None else body + orelse
    if isinstance(node, ast.JoinedStr):
        out = [""]
        for part in node.values:
            value = part.value if isinstance(part, ast.FormattedValue) else part
            choices = _templates(value, env) if isinstance(value, ast.Constant | ast.IfExp | ast.Name) else None
            if isinstance(part, ast.FormattedValue) and part.format_spec is not None:
                choices = None  # a formatted number: its text depends on the value
            out = [o + c for o in out for c in (choices or [PLACEHOLDER])][:_MAX_VARIANTS]
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _templates(node.left, env), _templates(node.right, env)
        if left is None and right is None:
            return None
        return [a + b for a in left or [PLACEHOLDER] for b in right or [PLACEHOLDER]][:_MAX_VARIANTS]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        fmt = _templates(node.left, env)
        return None if fmt is None else [_percent(f) for f in fmt]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and (fmt := _templates(node.func.value, env)) is not None
    ):
        return [_braces(f) for f in fmt]
    return None


def _percent(fmt: str) -> str:
    """``%s``/``%d``/``%.2f``/``%(name)s`` -> placeholder; ``%%`` -> ``%``."""
    import re

    return re.sub(
        r"%(?:\([^)]*\))?[-#0 +]*(?:\d+|\*)?(?:\.(?:\d+|\*))?[diouxXeEfFgGcrsa%]",
        lambda m: "%" if m.group() == "%%" else PLACEHOLDER,
        fmt,
    )


def _braces(fmt: str) -> str:
    import re

    return re.sub(r"\{\{|\}\}|\{[^{}]*\}", lambda m: m.group()[0] if m.group() in ("{{", "}}") else PLACEHOLDER, fmt)


def _local_strings(tree: ast.AST) -> dict[int, dict[str, list[ast.expr]]]:
    """Per logging-call line: the values assigned to each local name of its function (to read messages through)."""
    out: dict[int, dict[str, list[ast.expr]]] = {}
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        assigned: dict[str, list[ast.expr]] = {}
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                assigned.setdefault(node.targets[0].id, []).append(node.value)
        env = {name: values for name, values in assigned.items() if len(values) <= 4}
        for node in ast.walk(func):
            if isinstance(node, ast.Call):
                out[node.lineno] = env
    return out


def _log_calls(tree: ast.AST) -> Iterator[tuple[int, str, ast.expr, bool]]:
    """(line, level, message expression, whether %-arguments follow it) of each logging call."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in LOG_METHODS and _is_logger(func.value):
            yield node.lineno, func.attr, node.args[0], len(node.args) > 1
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in LOG_HELPERS:
            level = "warning" if "warn" in name else "info"
            first = 1 if len(node.args) > 1 and _is_logger(node.args[0]) else 0
            yield node.lineno, level, node.args[first], len(node.args) > first + 1
        elif isinstance(func, ast.Attribute) and func.attr == "log" and _is_logger(func.value) and len(node.args) > 1:
            yield node.lineno, "log", node.args[1], len(node.args) > 2


def dump_logs(root: Path, *, package: str = "sglang", subdir: str = "srt") -> dict[str, Any]:
    """Every log format string of the server runtime: ``root/package/subdir`` (``root`` holds ``package``).

    Only ``srt`` by default: ``python -m sglang.launch_server`` runs that; other folders of the wheel
    (``multimodal_gen``, the diffusion server) log lines this server never prints.
    """
    lines: list[dict[str, Any]] = []
    for path in sorted((root / package / subdir).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # generated or Python-2 files: SGLang never imports them
        envs = _local_strings(tree)
        for lineno, level, message, formatted in _log_calls(tree):
            for raw in _templates(message, envs.get(lineno)) or ():
                template = _percent(raw) if formatted else raw  # logging applies msg % args
                if template.replace(PLACEHOLDER, "").strip():  # no literal text: the line could say anything
                    lines.append({"file": rel, "line": lineno, "level": level, "template": template})
    return {"engine": package, "placeholder": PLACEHOLDER, "lines": lines}


# -- routes --------------------------------------------------------------------------------------------------
HTTP_SERVER = "sglang/srt/entrypoints/http_server.py"
_ROUTE_DECORATORS = {"get": "GET", "post": "POST", "put": "PUT", "delete": "DELETE", "head": "HEAD",
                     "websocket": "WEBSOCKET"}  # fmt: skip


def _route_literal(node: ast.AST | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else None
    except ValueError:
        return None


def _path_of(arg: ast.expr, names: dict[str, ast.expr]) -> tuple[str | None, str | None]:
    """``(path, environment variable)`` of a decorator's first argument: a literal, ``os.environ.get(NAME,
    DEFAULT)``, or a module variable holding one of those."""
    if isinstance(arg, ast.Name) and arg.id in names:
        arg = names[arg.id]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value, None
    if isinstance(arg, ast.Call) and ast.unparse(arg.func) == "os.environ.get":
        env = _route_literal(arg.args[0])
        default = _route_literal(arg.args[1]) if len(arg.args) > 1 else None
        return default, env
    raise ValueError(f"{HTTP_SERVER}:{arg.lineno}: a route path this reader does not know: {ast.unparse(arg)}")


def route_table(root: Path) -> list[dict[str, Any]]:
    """The HTTP server's routes (``@app.get``/``post``/``api_route`` in ``http_server.py``), read with :mod:`ast`:
    path (an env-overridable one at its default, its variable in ``env``), methods, handler, request type,
    JSON-only, and the source line; ``root`` holds the ``sglang`` package."""
    server = root / HTTP_SERVER
    tree = ast.parse(server.read_text(encoding="utf-8"), filename=HTTP_SERVER)
    names = {
        n.targets[0].id: n.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
    }
    routes: list[dict[str, Any]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for deco in node.decorator_list:
            if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute) and deco.args):
                continue
            if ast.unparse(deco.func.value) != "app":
                continue
            kind = deco.func.attr
            if kind == "api_route":
                methods = next((_route_literal(k.value) for k in deco.keywords if k.arg == "methods"), ["GET"])
            elif kind in _ROUTE_DECORATORS:
                methods = [_ROUTE_DECORATORS[kind]]
            else:
                continue
            path, env = _path_of(deco.args[0], names)
            request = next(
                (ast.unparse(a.annotation) for a in node.args.args if a.annotation is not None and a.arg == "request"),
                None,
            )
            deps = next((ast.unparse(k.value) for k in deco.keywords if k.arg == "dependencies"), "")
            routes.append(
                {
                    "path": path,
                    "methods": sorted(methods),
                    "handler": node.name,
                    "request": request,
                    "json_only": "validate_json_request" in deps,
                    "env": env,
                    "source": f"{HTTP_SERVER}:{deco.lineno}",
                }
            )
    routes.sort(key=lambda r: (str(r["path"]), r["methods"]))
    return routes


def dump_routes(root: Path) -> dict[str, Any]:
    """The route table of the sglang under ``root`` (a route catalog's ``routes``, without the shapes)."""
    return {"engine": "sglang", "routes": route_table(root)}


def package_root(package: str = "sglang") -> Path:
    """The folder holding ``package``, found without importing it."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"engine_dump: {package} is not importable by {sys.executable}")
    return Path(next(iter(spec.submodule_search_locations))).parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="engine_dump", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["flags", "logs", "routes", "parse"])
    parser.add_argument("--root", type=Path, help="the folder holding the sglang package (default: importable)")
    args = parser.parse_args(argv)
    if args.what == "parse":
        serve_parser(iter(sys.stdin.readline, ""), sys.stdout)
        return 0
    if args.what == "flags":
        data = dump_flags()
    elif args.what == "routes":
        data = dump_routes(args.root or package_root())
        data["version"], version_source = sglang_version()
        if version_source:
            data["version_source"] = version_source
    else:
        data = dump_logs(args.root or package_root())
        data["version"], version_source = sglang_version()
        if version_source:
            data["version_source"] = version_source
    json.dump(data, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
