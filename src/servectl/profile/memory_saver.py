"""SGLang's memory saver, as its source defines it: the release/resume endpoints, their body, the tags, the flags.

A ``swap.standby: warm`` profile runs with ``--enable-memory-saver``; a swap away calls
``POST /release_memory_occupation`` and a swap back ``POST /resume_memory_occupation``. What those are called,
what they take and answer, and what the server refuses comes from the SGLang source, read with :mod:`ast`
(never imported) by :func:`extract` and shipped as ``catalogs/memory_saver/sglang-<version>.json`` (made by
``scripts/extract_sglang_catalogs.py``; each entry cites its source file and line). The stand-in
(:mod:`servectl.standin.memory`) and servectl's client (:mod:`servectl.service.standby`) read that file through
:func:`load_memory_saver`.

Standard-library only: the stand-in image carries it.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from servectl.profile.catalog import DEFAULT_CATALOG

#: Where the shipped memory-saver catalogs live (beside the flag catalogs).
MEMORY_SAVER_DIR = Path(__file__).resolve().parent / "catalogs" / "memory_saver"
DEFAULT_MEMORY_SAVER = DEFAULT_CATALOG  # one memory-saver catalog per flag catalog, by the same name

_HTTP = "sglang/srt/entrypoints/http_server.py"
_IO = "sglang/srt/managers/io_struct.py"
_CONSTANTS = "sglang/srt/constants.py"
_UPDATER = "sglang/srt/managers/scheduler_components/weight_updater.py"
_FIELDS = "sglang/srt/arg_groups/fields/exec_.py"
_ENDPOINTS = {"release": "/release_memory_occupation", "resume": "/resume_memory_occupation"}
_FLAGS = ("enable_memory_saver", "enable_weights_cpu_backup")


def load_memory_saver(name: str = DEFAULT_MEMORY_SAVER) -> dict[str, Any]:
    """The shipped memory-saver catalog ``name`` (see the module docstring).

    Raises:
        KeyError: no such catalog (the message lists the shipped ones).
    """
    path = MEMORY_SAVER_DIR / f"{name}.json"
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in MEMORY_SAVER_DIR.glob("*.json")))
        raise KeyError(f"unknown memory-saver catalog {name!r}; shipped: {shipped}")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _tree(root: Path, rel: str) -> ast.Module:
    return ast.parse((root / rel).read_text(encoding="utf-8"), filename=rel)


def _endpoints(root: Path) -> dict[str, Any]:
    """The two routes: path, methods, request type, docstring, what a success and a failure answer."""
    found: dict[str, Any] = {}
    for node in ast.walk(_tree(root, _HTTP)):
        if not isinstance(node, ast.AsyncFunctionDef):
            continue
        for deco in node.decorator_list:
            if not (isinstance(deco, ast.Call) and getattr(deco.func, "attr", "") == "api_route" and deco.args):
                continue
            path = ast.literal_eval(deco.args[0])
            for key, wanted in _ENDPOINTS.items():
                if path != wanted:
                    continue
                methods = next((ast.literal_eval(k.value) for k in deco.keywords if k.arg == "methods"), ["GET"])
                body = node.body[1:] if ast.get_docstring(node) else node.body
                tries = [b for b in body if isinstance(b, ast.Try)]
                returns_on_success = bool(tries) and any(isinstance(n, ast.Return) for n in tries[0].body)
                request = node.args.args[0].annotation
                found[key] = {
                    "path": path,
                    "methods": methods,
                    "request_type": ast.unparse(request.slice.elts[0])  # Annotated[ReqInput, Body()]
                    if isinstance(request, ast.Subscript) and isinstance(request.slice, ast.Tuple)
                    else None,
                    "doc": ast.get_docstring(node),
                    "success": {"status": 200, "body": None} if not returns_on_success else None,
                    "failure": "_create_error_response",
                    "source": f"{_HTTP}:{deco.lineno}",
                }
    return found


def _error_response(root: Path) -> dict[str, Any]:
    """``_create_error_response(e)``: the body and the default status of a refused call."""
    for node in ast.walk(_tree(root, _HTTP)):
        if isinstance(node, ast.FunctionDef) and node.name == "_create_error_response":
            call = next(
                n for n in ast.walk(node) if isinstance(n, ast.Call) and ast.unparse(n.func) == "ORJSONResponse"
            )
            status = next(ast.unparse(k.value) for k in call.keywords if k.arg == "status_code")
            return {
                "body": ast.unparse(call.args[0]),
                "status": 400 if "HTTPStatus.BAD_REQUEST" in status else status,
                "source": f"{_HTTP}:{node.lineno}",
            }
    raise ValueError(f"{_HTTP}: no _create_error_response")


def _request_fields(root: Path, names: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for node in _tree(root, _IO).body:
        if isinstance(node, ast.ClassDef) and node.name in names:
            fields = {
                ast.unparse(f.target): {
                    "type": ast.unparse(f.annotation),
                    "default": ast.literal_eval(f.value) if f.value is not None else "required",
                }
                for f in node.body
                if isinstance(f, ast.AnnAssign)
            }
            out[node.name] = {"fields": fields, "source": f"{_IO}:{node.lineno}"}
    return out


def _tags(root: Path) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for node in _tree(root, _CONSTANTS).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.startswith("GPU_MEMORY_TYPE_"):
                values[name] = ast.literal_eval(node.value)
            elif name == "GPU_MEMORY_ALL_TYPES":
                values[name] = [values[ast.unparse(e)] for e in node.value.elts]  # type: ignore[attr-defined]
    # weight_updater.py: `if tags is None or len(tags) == 0: tags = GPU_MEMORY_ALL_TYPES`
    return {"all": values["GPU_MEMORY_ALL_TYPES"], "empty_means": "all", "source": f"{_CONSTANTS}, {_UPDATER}"}


def _idle_rule(root: Path) -> dict[str, Any]:
    """The release handler's precondition: the scheduler asserts it is idle."""
    for node in ast.walk(_tree(root, _UPDATER)):
        if isinstance(node, ast.FunctionDef) and node.name == "release_memory_occupation":
            for stmt in ast.walk(node):
                if isinstance(stmt, ast.Assert) and stmt.msg is not None:
                    return {"message": ast.literal_eval(stmt.msg), "source": f"{_UPDATER}:{stmt.lineno}"}
    raise ValueError(f"{_UPDATER}: no idle assertion in release_memory_occupation")


def _flags(root: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for node in ast.walk(_tree(root, _FIELDS)):
        if isinstance(node, ast.AnnAssign) and ast.unparse(node.target) in _FLAGS:
            help_text = node.annotation.slice.elts[1]  # type: ignore[attr-defined]  # A[bool, "help"]
            dest = ast.unparse(node.target)
            out["--" + dest.replace("_", "-")] = {
                "dest": dest,
                "help": ast.literal_eval(help_text),
                "source": f"{_FIELDS}:{node.lineno}",
            }
    return out


def extract(root: Path, version: str) -> dict[str, Any]:
    """The memory-saver catalog from an SGLang source tree (``root`` holds the ``sglang`` package).

    Raises:
        ValueError, KeyError, StopIteration: the source no longer has what this reads (a new SGLang layout).
    """
    endpoints = _endpoints(root)
    if set(endpoints) != set(_ENDPOINTS):
        raise ValueError(f"{_HTTP}: found {sorted(endpoints)} of the routes {sorted(_ENDPOINTS)}")
    types = {e["request_type"] for e in endpoints.values()}
    return {
        "engine": "sglang",
        "version": version,
        "extracted_from": f"sglang {version} source, read with ast by servectl/profile/memory_saver.py",
        "endpoints": endpoints,
        "error_response": _error_response(root),
        "requests": _request_fields(root, {t for t in types if t}),
        "tags": _tags(root),
        "release_requires_idle": _idle_rule(root),
        "flags": _flags(root),
    }


__all__ = ["DEFAULT_MEMORY_SAVER", "MEMORY_SAVER_DIR", "extract", "load_memory_saver"]
