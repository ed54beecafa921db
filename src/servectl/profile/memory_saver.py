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
import functools
import json
from pathlib import Path
from typing import Any

from servectl.profile.catalog import CATALOG_DIR, DEFAULT_CATALOG, read_shipped_catalog

#: Where the shipped memory-saver catalogs live (beside the flag catalogs).
MEMORY_SAVER_DIR = CATALOG_DIR / "memory_saver"
DEFAULT_MEMORY_SAVER = DEFAULT_CATALOG  # one memory-saver catalog per flag catalog, by the same name

_HTTP = "sglang/srt/entrypoints/http_server.py"
_AUTH = "sglang/srt/utils/auth.py"
_IO = "sglang/srt/managers/io_struct.py"
_CONSTANTS = "sglang/srt/constants.py"
_UPDATER = "sglang/srt/managers/scheduler_components/weight_updater.py"
_FIELDS = "sglang/srt/arg_groups/fields/exec_.py"
_SCHEDULER = "sglang/srt/managers/scheduler.py"
_TOKENIZER = "sglang/srt/managers/tokenizer_manager.py"
_WATCHDOG = "sglang/srt/utils/watchdog.py"
_COMMON = "sglang/srt/utils/common.py"
_ENVIRON = "sglang/srt/environ.py"
_MSGSPEC = "sglang/srt/utils/msgspec_utils.py"
_GRAPH_BACKENDS = (
    "sglang/srt/model_executor/runner_backend/full_cuda_graph_backend.py",
    "sglang/srt/model_executor/runner_backend/breakable_cuda_graph_backend.py",
)
_GRAPH_ENV = "SGLANG_MEMORY_SAVER_CUDA_GRAPH"
_LOADS = "sglang/srt/entrypoints/v1_loads.py"
_SNAPSHOT = "sglang/srt/managers/load_snapshot.py"
_ENDPOINTS = {"release": "/release_memory_occupation", "resume": "/resume_memory_occupation"}
_FLAGS = ("enable_memory_saver", "enable_weights_cpu_backup")


@functools.cache
def load_memory_saver(name: str = DEFAULT_MEMORY_SAVER) -> dict[str, Any]:
    """The shipped memory-saver catalog ``name`` (see the module docstring), read once per process (a standby's
    release asks it for each route, the fake engine for each request): the one copy is shared, read it only.

    Raises:
        KeyError: no such catalog (the message lists the shipped ones).
    """
    return read_shipped_catalog(MEMORY_SAVER_DIR.name, name, "memory-saver catalog")


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
            level = next(
                (
                    (d.args[0], d.lineno)
                    for d in node.decorator_list
                    if isinstance(d, ast.Call) and ast.unparse(d.func) == "auth_level" and d.args
                ),
                None,
            )
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
                    "auth": None if level is None else _auth_level(root, level[0], f"{_HTTP}:{level[1]}"),
                }
    return found


def _auth_level(root: Path, level: ast.expr, where: str) -> dict[str, Any]:
    """An endpoint's ``@auth_level(AuthLevel.X)``: the level's value, and for ``ADMIN_OPTIONAL`` the line of
    ``decide_request_auth`` that decides it (with ``--admin-api-key`` only that key opens the route, else the
    ``--api-key``, else it is open)."""
    member = ast.unparse(level).rsplit(".", 1)[-1]
    tree = _tree(root, _AUTH)
    enum = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "AuthLevel")
    value = next(
        ast.literal_eval(a.value)
        for a in enum.body
        if isinstance(a, ast.Assign) and any(getattr(t, "id", None) == member for t in a.targets)
    )
    decide = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.If) and ast.unparse(n.test) == f"auth_level == AuthLevel.{member}"
    )
    return {"level": value, "source": where, "rule": f"{_AUTH}:{decide.lineno} decide_request_auth"}


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


def _template(node: ast.JoinedStr | ast.Constant) -> dict[str, Any]:
    """A logged f-string as a template: its text with ``{name}`` for each value (dots become underscores)."""
    if isinstance(node, ast.Constant):
        return {"template": str(node.value), "values": []}
    text, values = "", []
    for part in node.values:
        if isinstance(part, ast.Constant):
            text += str(part.value).replace("{", "{{").replace("}", "}}")
        elif isinstance(part, ast.FormattedValue):
            name = ast.unparse(part.value).replace(".", "_")
            values.append(name)
            text += "{" + name + "}"
    return {"template": text, "values": values}


def _logged(root: Path, rel: str, function: str, level: str, contains: str = "") -> dict[str, Any]:
    """The first ``logger.<level>(...)`` line of ``function`` in ``rel`` whose text holds ``contains``."""
    for node in ast.walk(_tree(root, rel)):
        if not (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function):
            continue
        for call in ast.walk(node):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == level
                and call.args
                and isinstance(call.args[0], (ast.JoinedStr, ast.Constant))
            ):
                found = _template(call.args[0])
                if contains in found["template"]:
                    return {**found, "level": level, "source": f"{rel}:{call.lineno}"}
    raise ValueError(f"{rel}: no logger.{level} holding {contains!r} in {function}")


def _crash(root: Path) -> dict[str, Any]:
    """How a scheduler that fails takes the whole server down, with the lines each step logs.

    An exception in the scheduler's loop is logged and SIGQUITs the server; a scheduler that exits on its own
    (a library's ``exit(1)``) is seen by the subprocess watchdog, which SIGQUITs the server too; the running
    server's SIGQUIT handler logs and kills its process tree, itself included (SIGKILL: exit status 137).
    """
    kill = next(
        n for n in ast.walk(_tree(root, _COMMON)) if isinstance(n, ast.FunctionDef) and n.name == "kill_process_tree"
    )
    kills_itself = next(n for n in ast.walk(kill) if isinstance(n, ast.Call) and ast.unparse(n.func) == "itself.kill")
    return {
        "scheduler_exception": _logged(root, _SCHEDULER, "run_scheduler_process", "error", "hit an exception"),
        "subprocess_exit": _logged(root, _WATCHDOG, "_check_processes", "error", "crashed"),
        "sigquit": _logged(root, _TOKENIZER, "running_phase_sigquit_handler", "error", "SIGQUIT"),
        "kill_process_tree": _logged(root, _COMMON, "kill_process_tree", "info", "kill_process_tree"),
        "exit_status": 128 + 9,
        "exit_source": f"{_COMMON}:{kills_itself.lineno} (itself.kill(): SIGKILL)",
        "scheduler_name": "scheduler_{rank}",
    }


def _tag_state(root: Path) -> dict[str, Any]:
    """The scheduler's set of released tags: a release adds, a resume removes (``set.remove``: KeyError for
    a tag that was not released); a release of ``kv_cache`` flushes the cache."""
    found: dict[str, Any] = {}
    for node in ast.walk(_tree(root, _UPDATER)):
        if isinstance(node, ast.FunctionDef) and node.name in ("release_memory_occupation", "resume_memory_occupation"):
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and ast.unparse(call.func) in (
                    "self.offload_tags.add",
                    "self.offload_tags.remove",
                    "self.flush_cache",
                ):
                    found[ast.unparse(call.func)] = f"{_UPDATER}:{call.lineno}"
    return {
        "release_adds": found["self.offload_tags.add"],
        "resume_removes": found["self.offload_tags.remove"],
        "resume_unreleased_raises": "KeyError",
        "kv_cache_release_flushes": found["self.flush_cache"],
        "flushed": _logged(root, _SCHEDULER, "flush_cache", "info", "flushed"),
    }


def _graph_memory(root: Path) -> dict[str, Any]:
    """Whether the ``cuda_graph`` tag frees anything: only when its environment variable is on (default off)."""
    default = None
    for node in ast.walk(_tree(root, _ENVIRON)):
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == _GRAPH_ENV:
            default = {"default": ast.literal_eval(node.value.args[0]), "source": f"{_ENVIRON}:{node.lineno}"}  # type: ignore[attr-defined]
    if default is None:
        raise ValueError(f"{_ENVIRON}: no {_GRAPH_ENV}")
    gates = []
    for rel in _GRAPH_BACKENDS:
        for node in ast.walk(_tree(root, rel)):
            if isinstance(node, ast.Call) and ast.unparse(node) == f"get_bool_env_var({_GRAPH_ENV!r})":
                gates.append(f"{rel}:{node.lineno}")
    truthy = next(
        ast.literal_eval(n.value)
        for n in ast.walk(_tree(root, _COMMON))
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "truthy_values"
    )
    return {"env": _GRAPH_ENV, **default, "truthy": list(truthy), "gates": gates, "tag": "cuda_graph"}


def _load(root: Path) -> dict[str, Any]:
    """The engine's own load (``GET /v1/loads``): per DP rank its running and waiting requests, the two
    numbers the release's idle assertion reads (``running_batch``, ``waiting_queue``)."""
    route = None
    for node in ast.walk(_tree(root, _LOADS)):
        if isinstance(node, ast.AsyncFunctionDef):
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and ast.unparse(deco.func) == "router.get" and deco.args:
                    route = {"path": ast.literal_eval(deco.args[0]), "source": f"{_LOADS}:{deco.lineno}"}
    if route is None:
        raise ValueError(f"{_LOADS}: no router.get route")
    snapshot = next(n for n in _tree(root, _SNAPSHOT).body if isinstance(n, ast.ClassDef) and n.name == "LoadSnapshot")
    fields = {
        ast.unparse(f.target): ast.literal_eval(f.value)
        for f in snapshot.body
        if isinstance(f, ast.AnnAssign) and f.value is not None and not ast.unparse(f.annotation).startswith("Optional")
    }
    return {
        **route,
        "query": {"include": "core"},
        "list": "loads",
        "core_defaults": fields,
        "running": "num_running_reqs",
        "waiting": "num_waiting_reqs",
        "snapshot_source": f"{_SNAPSHOT}:{snapshot.lineno}",
    }


#: What SGLang's memory saver runs on (``torch_memory_saver``, a C++ library, not SGLang's source): a pause
#: of a region that is paused already, or a resume of one that is not, prints this and ends the process with
#: ``exit(1)`` (torch_memory_saver 0.0.10 ``csrc/core.cpp``; SGLang 0.5.23 requires ``torch_memory_saver>=0.0.9
#: .post1``). Listed by hand, as the log catalog lists library lines (scripts/extract_sglang_catalogs.py).
LIBRARY = {
    "name": "torch_memory_saver",
    "pause_paused": "[torch_memory_saver.cpp] Cannot pause allocation that is not active.",
    "resume_active": "[torch_memory_saver.cpp] Cannot resume allocation that is not paused. ",
    "exit_status": 1,
    "source": "torch_memory_saver 0.0.10 csrc/core.cpp (strings of torch_memory_saver_hook_mode_preload_cu13.abi3.so)",
}

#: FastAPI's answer to a body that does not validate (fastapi/exception_handlers.py
#: request_validation_exception_handler: 422, ``{"detail": errors}``) and to a missing body
#: (fastapi/dependencies/utils.py request_body_to_args: a required body param gets get_missing_field_error at
#: ``("body",)``). Library behaviour, listed by hand like :data:`LIBRARY`; the errors themselves come from
#: pydantic running SGLang's own schema (:func:`body_errors`).
FASTAPI_422 = {
    "status": 422,
    "envelope": "detail",
    "missing_body": [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": None}],
    "loc_prefix": "body",
    "source": "fastapi/exception_handlers.py request_validation_exception_handler, "
    "fastapi/dependencies/utils.py request_body_to_args",
}

#: Bodies that do not validate, each a case the stand-in answers: not an object, tags not a list, a tag not
#: a string.
BODY_SAMPLES: dict[str, Any] = {"not_object": [], "tags_not_list": {"tags": "weights"}, "tag_not_string": {"tags": [7]}}

_BODY_PROBE = """
import ast, json, pathlib, sys, msgspec
from typing import List, Optional
from pydantic import TypeAdapter, ValidationError
import sglang
from sglang.srt.utils.msgspec_utils import msgspec_struct_pydantic_core_schema as schema
source = (pathlib.Path(sglang.__file__).parent / "srt/managers/io_struct.py").read_text()
ns = {"msgspec": msgspec, "Optional": Optional, "List": List, "msgspec_struct_pydantic_core_schema": schema}
wanted = sys.argv[1]
for node in ast.parse(source).body:
    if isinstance(node, ast.ClassDef) and node.name in ("BaseReq", wanted):
        exec(compile(ast.Module([node], []), "io_struct.py", "exec"), ns)
adapter, out = TypeAdapter(ns[wanted]), {}
for case, body in json.loads(sys.argv[2]).items():
    try:
        adapter.validate_python(body, from_attributes=True)  # as FastAPI validates a body param
        out[case] = None
    except ValidationError as err:
        out[case] = err.errors(include_url=False)
print(json.dumps(out))
"""


def body_errors(python: str, request_type: str) -> dict[str, Any]:
    """The validation errors of :data:`BODY_SAMPLES` for ``request_type``, computed by ``python`` (one that
    imports SGLang's ``msgspec_utils`` and pydantic) with SGLang's own class (its ``io_struct.py`` source) and
    schema hook, as FastAPI validates a body."""
    import subprocess

    done = subprocess.run(
        [python, "-c", _BODY_PROBE, request_type, json.dumps(BODY_SAMPLES)],
        capture_output=True,
        text=True,
        check=True,
    )
    errors: dict[str, Any] = json.loads(done.stdout)
    return errors


def extract(root: Path, version: str, *, python: str) -> dict[str, Any]:
    """The memory-saver catalog from an SGLang source tree (``root`` holds the ``sglang`` package); ``python``
    imports that SGLang's pydantic (for :func:`body_errors`).

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
        "load": _load(root),
        "tag_state": _tag_state(root),
        "graph_memory": _graph_memory(root),
        "crash": _crash(root),
        "library": LIBRARY,
        "body_validation": {
            **FASTAPI_422,
            "schema": f"{_MSGSPEC}: msgspec_struct_pydantic_core_schema",
            "errors": {t: body_errors(python, t) for t in sorted({e["request_type"] for e in endpoints.values()})},
        },
    }


__all__ = ["DEFAULT_MEMORY_SAVER", "LIBRARY", "MEMORY_SAVER_DIR", "body_errors", "extract", "load_memory_saver"]
