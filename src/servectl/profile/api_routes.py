"""The API families an SGLang build serves, as its source defines them: the route table and the shapes.

Which paths the HTTP server answers (``@app.get``/``post``/``api_route`` in ``http_server.py``), and for the
families beyond OpenAI chat what a client sends and gets back: the Anthropic Messages API
(``entrypoints/anthropic/``: request and response fields, the server-sent event types and their framing, the
error envelope and the status -> error type map, the stop reasons), the Ollama API (``entrypoints/ollama/``:
fields, the NDJSON stream's media type, ``/api/tags`` and ``/api/show`` constants, the option mapping), and
OpenAI embeddings, rerank and score (fields, and which name an embeddings answer carries in ``model``).

Read with :mod:`ast` (never imported) by :func:`extract` and shipped as ``catalogs/routes/sglang-<version>.json``
(made by ``scripts/extract_sglang_catalogs.py``; each entry cites its source file and line). The stand-in
(:mod:`servectl.standin.families`) serves what it says and the gateway (:mod:`servectl.gateway.families`)
refuses a path the profile's engine lacks, both through :func:`load_routes`.

Standard-library only: the stand-in image carries it.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from servectl.files import read_text_bounded
from servectl.profile.catalog import CATALOG_DIR, DEFAULT_CATALOG, MAX_CATALOG_BYTES, read_shipped_catalog
from servectl.profile.engine_dump import HTTP_SERVER, route_table

#: Where the shipped route catalogs live (beside the flag catalogs).
ROUTES_DIR = CATALOG_DIR / "routes"
DEFAULT_ROUTES = DEFAULT_CATALOG  # one route catalog per flag catalog, by the same name

_HTTP = HTTP_SERVER
_A_PROTOCOL = "sglang/srt/entrypoints/anthropic/protocol.py"
_A_SERVING = "sglang/srt/entrypoints/anthropic/serving.py"
_O_PROTOCOL = "sglang/srt/entrypoints/ollama/protocol.py"
_O_SERVING = "sglang/srt/entrypoints/ollama/serving.py"
_OPENAI = "sglang/srt/entrypoints/openai/protocol.py"
_EMBEDDING = "sglang/srt/entrypoints/openai/serving_embedding.py"

_ANTHROPIC_MODELS = (
    "AnthropicMessagesRequest",
    "AnthropicCountTokensRequest",
    "AnthropicCountTokensResponse",
    "AnthropicMessagesResponse",
    "AnthropicUsage",
    "AnthropicError",
    "AnthropicErrorResponse",
)
_OLLAMA_MODELS = (
    "OllamaMessage",
    "OllamaChatRequest",
    "OllamaChatResponse",
    "OllamaChatStreamResponse",
    "OllamaGenerateRequest",
    "OllamaGenerateResponse",
    "OllamaGenerateStreamResponse",
    "OllamaModelInfo",
    "OllamaTagsResponse",
    "OllamaShowRequest",
    "OllamaShowResponse",
)
_OPENAI_MODELS = (
    "ErrorResponse",
    "ModelCard",
    "ModelList",
    "UsageInfo",
    "EmbeddingRequest",
    "EmbeddingObject",
    "EmbeddingResponse",
    "V1RerankReqInput",
    "RerankResponse",
    "ScoringRequest",
    "ScoringResponse",
)


def load_routes(name: str = DEFAULT_ROUTES) -> dict[str, Any]:
    """The shipped route catalog ``name`` (see the module docstring).

    Raises:
        KeyError: no such catalog (the message lists the shipped ones).
    """
    return read_shipped_catalog(ROUTES_DIR.name, name, "route catalog")


def load_routes_file(path: Path) -> dict[str, Any]:
    """A route catalog extracted from an image (``catalog extract`` writes ``<catalog>.routes.json``).

    Raises:
        FileRefused, OSError, ValueError: it cannot be read, or it is no route catalog.
    """
    data = json.loads(read_text_bounded(path, limit_bytes=MAX_CATALOG_BYTES, what="route catalog"))
    if not isinstance(data, dict) or not isinstance(data.get("routes"), list):
        raise ValueError(f"{path} is not a route catalog (no routes list)")
    return data


def route_paths(catalog: dict[str, Any], method: str | None = None) -> set[str]:
    """The paths ``catalog`` serves (with ``method``: only those that answer it)."""
    return {
        str(r["path"])
        for r in catalog["routes"]
        if r["path"] is not None and (method is None or method in r["methods"])
    }


def _tree(root: Path, rel: str) -> ast.Module:
    return ast.parse((root / rel).read_text(encoding="utf-8"), filename=rel)


def _literal(node: ast.AST | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else None
    except ValueError:
        return None


# -- the route table -------------------------------------------------------------------------------------------


# -- pydantic models -------------------------------------------------------------------------------------------


def _field(node: ast.AnnAssign) -> dict[str, Any]:
    value = node.value
    required = value is None
    default: Any = None
    if isinstance(value, ast.Call) and ast.unparse(value.func) == "Field":
        first = value.args[0] if value.args else None
        kw = {k.arg: k.value for k in value.keywords}
        if isinstance(first, ast.Constant) and first.value is Ellipsis:
            required = True
        elif first is not None:
            default = _literal(first)
        elif "default" in kw:
            default = _literal(kw["default"])
        elif "default_factory" in kw:
            default = {"factory": ast.unparse(kw["default_factory"])}
        else:
            required = True
    elif value is not None:
        default = _literal(value)
        if default is None and not (isinstance(value, ast.Constant) and value.value is None):
            default = {"expr": ast.unparse(value)}
    return {"type": ast.unparse(node.annotation), "required": required, "default": default}


def _models(root: Path, rel: str, names: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for node in _tree(root, rel).body:
        if isinstance(node, ast.ClassDef) and node.name in names:
            fields = {
                ast.unparse(f.target): _field(f)
                for f in node.body
                if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name)
            }
            out[node.name] = {
                "fields": fields,
                "bases": [ast.unparse(b) for b in node.bases],
                "source": f"{rel}:{node.lineno}",
            }
    missing = set(names) - set(out)
    if missing:
        raise ValueError(f"{rel}: no class {sorted(missing)}")
    return out


def _type_literals(root: Path, rel: str, suffix: str) -> dict[str, str]:
    """``{class name: its type literal}`` of the classes ending in ``suffix`` (stream events, deltas)."""
    out: dict[str, str] = {}
    for node in _tree(root, rel).body:
        if isinstance(node, ast.ClassDef) and node.name.endswith(suffix):
            for f in node.body:
                if isinstance(f, ast.AnnAssign) and ast.unparse(f.target) == "type" and f.value is not None:
                    out[node.name] = str(_literal(f.value))
    return out


def _dict_assign(root: Path, rel: str, name: str, *, inside: str | None = None) -> tuple[dict[Any, Any], int]:
    """A dict literal assigned to ``name`` (at module level, or anywhere in function ``inside``)."""
    tree = _tree(root, rel)
    scope: ast.AST = tree
    if inside is not None:
        scope = next(
            n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == inside
        )
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == name and isinstance(node.value, ast.Dict):
            return ast.literal_eval(node.value), node.lineno
    raise ValueError(f"{rel}: no dict {name}")


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return node
    raise ValueError(f"no function {name}")


def _template(node: ast.JoinedStr) -> str:
    """An f-string as a template: ``f"event: {event_type}\\n"`` -> ``"event: {event_type}\\n"``."""
    return "".join(
        str(v.value) if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"  # type: ignore[attr-defined]
        for v in node.values
    )


# -- families --------------------------------------------------------------------------------------------------


def _anthropic(root: Path) -> dict[str, Any]:
    serving = _tree(root, _A_SERVING)
    wrap = _function(serving, "_wrap_sse_event")
    frame = next(n for n in ast.walk(wrap) if isinstance(n, ast.JoinedStr))
    error_types, error_line = _dict_assign(root, _A_SERVING, "ERROR_TYPE_MAP")
    stops, stop_line = _dict_assign(root, _A_SERVING, "STOP_REASON_MAP")
    http = _tree(root, _HTTP)
    handler = next(
        n
        for n in ast.walk(http)
        if isinstance(n, ast.AsyncFunctionDef)
        and n.name == "validation_exception_handler"
        and any("HTTPException" in ast.unparse(d) for d in n.decorator_list)
    )
    http_types = next(
        n.func.value
        for n in ast.walk(handler)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Dict)
    )
    scrub = _function(serving, "_scrub_error_message")
    internal = next(
        _literal(n.body[0].value)  # type: ignore[attr-defined]
        for n in ast.walk(scrub)
        if isinstance(n, ast.If) and "500" in ast.unparse(n.test)
    )
    envelope = _function(http, "_anthropic_error_response")
    return {
        "models": _models(root, _A_PROTOCOL, _ANTHROPIC_MODELS),
        "stream_events": _type_literals(root, _A_PROTOCOL, "Event"),
        "content_deltas": {**_type_literals(root, _A_PROTOCOL, "Delta")},
        "content_blocks": _type_literals(root, _A_PROTOCOL, "Block"),
        "sse_frame": {"template": _template(frame), "source": f"{_A_SERVING}:{wrap.lineno}"},
        "error_envelope": {
            "body": {"type": "error", "error": {"type": "<error type>", "message": "<message>"}},
            "source": f"{_HTTP}:{envelope.lineno}",
        },
        "error_types": {"map": {str(k): v for k, v in error_types.items()}, "source": f"{_A_SERVING}:{error_line}"},
        "http_error_types": {
            "map": {str(k): v for k, v in ast.literal_eval(http_types).items()},
            "default": "api_error",
            "source": f"{_HTTP}:{handler.lineno}",
        },
        "internal_error_message": {"message": internal, "source": f"{_A_SERVING}:{scrub.lineno}"},
        "stop_reasons": {"map": stops, "default": "end_turn", "source": f"{_A_SERVING}:{stop_line}"},
    }


def _ollama(root: Path) -> dict[str, Any]:
    serving = _tree(root, _O_SERVING)
    media = sorted(
        {
            _literal(k.value)
            for n in ast.walk(serving)
            if isinstance(n, ast.Call) and ast.unparse(n.func) == "StreamingResponse"
            for k in n.keywords
            if k.arg == "media_type"
        }
    )
    options, options_line = _dict_assign(
        root, _O_SERVING, "param_mapping", inside="_convert_options_to_sampling_params"
    )
    convert = _function(serving, "_convert_options_to_sampling_params")
    default_max = next(
        _literal(n.value)
        for n in ast.walk(convert)
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "sampling_params['max_new_tokens']"
    )
    tags = _function(serving, "get_tags")
    info = next(n for n in ast.walk(tags) if isinstance(n, ast.Call) and ast.unparse(n.func) == "OllamaModelInfo")
    kw = {k.arg: k.value for k in info.keywords}
    show = _function(serving, "get_show")
    show_call = next(
        n for n in ast.walk(show) if isinstance(n, ast.Call) and ast.unparse(n.func) == "OllamaShowResponse"
    )
    show_kw = {k.arg: k.value for k in show_call.keywords}
    stamp = _function(serving, "_get_timestamp")
    return {
        "models": _models(root, _O_PROTOCOL, _OLLAMA_MODELS),
        "stream_media_type": {"values": media, "source": _O_SERVING},
        "options": {"map": options, "source": f"{_O_SERVING}:{options_line}"},
        "default_max_new_tokens": {"value": default_max, "source": f"{_O_SERVING}:{convert.lineno}"},
        "timestamp": {"code": ast.unparse(stamp.body[-1]), "source": f"{_O_SERVING}:{stamp.lineno}"},
        "tags": {
            "digest": _literal(kw["digest"]),
            "size": _literal(kw["size"]),
            "details": ast.unparse(kw["details"]),
            "source": f"{_O_SERVING}:{tags.lineno}",
        },
        "show": {
            "modelfile": _template(show_kw["modelfile"]) if isinstance(show_kw["modelfile"], ast.JoinedStr) else None,
            "parameters": _template(show_kw["parameters"])
            if isinstance(show_kw["parameters"], ast.JoinedStr)
            else None,
            "capabilities": _literal(show_kw["capabilities"]),
            "details": ast.unparse(show_kw["details"]),
            "model_info": ast.unparse(show_kw["model_info"]),
            "family_suffixes": next(
                _literal(n.iter) for n in ast.walk(show) if isinstance(n, ast.For) and isinstance(n.iter, ast.List)
            ),
            "source": f"{_O_SERVING}:{show.lineno}",
        },
    }


def _openai(root: Path) -> dict[str, Any]:
    serving = _tree(root, _EMBEDDING)
    build = _function(serving, "_build_embedding_response")
    call = next(n for n in ast.walk(build) if isinstance(n, ast.Call) and ast.unparse(n.func) == "EmbeddingResponse")
    model = next(ast.unparse(k.value) for k in call.keywords if k.arg == "model")
    return {
        "models": _models(root, _OPENAI, _OPENAI_MODELS),
        "embedding_response_model": {
            "expr": model,
            "answers": "model_path" if model.endswith(".model_path") else "served_model_name",
            "source": f"{_EMBEDDING}:{call.lineno}",
        },
    }


def extract(root: Path, version: str) -> dict[str, Any]:
    """The route catalog from an SGLang source tree (``root`` holds the ``sglang`` package).

    Raises:
        ValueError, KeyError, StopIteration: the source no longer has what this reads (a new SGLang layout).
    """
    return {
        "engine": "sglang",
        "version": version,
        "extracted_from": f"sglang {version} source, read with ast by servectl/profile/api_routes.py",
        "routes": route_table(root),
        "anthropic": _anthropic(root),
        "ollama": _ollama(root),
        "openai": _openai(root),
    }


__all__ = ["DEFAULT_ROUTES", "ROUTES_DIR", "extract", "load_routes", "load_routes_file", "route_paths"]
