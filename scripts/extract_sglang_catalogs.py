"""Regenerate the SGLang 0.5.23 flag catalog and log catalog from the real wheel.

    python3 scripts/extract_sglang_catalogs.py            # builds (or reuses) the parser venv
    python3 scripts/extract_sglang_catalogs.py --python P # any python that can import sglang

Writes src/servectl/profile/catalogs/sglang-<version>.json (the parser, from ``engine_dump.py flags``) and
src/servectl/profile/catalogs/logs/sglang-<version>.txt (the logger format strings of ``sglang/srt``, from
``engine_dump.py logs``, plus the lines of the libraries SGLang runs, listed below with their source) and
src/servectl/profile/catalogs/memory_saver/sglang-<version>.json (the memory saver's endpoints, body, tags and
flags, read from the source with ast by ``servectl/profile/memory_saver.py``; each entry cites file:line) and
src/servectl/profile/catalogs/routes/sglang-<version>.json (the HTTP route table and the Anthropic, Ollama and
OpenAI embeddings/rerank/score shapes, read with ast by ``servectl/profile/api_routes.py``; file:line cited).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(1, str(ROOT / "tests" / "tools"))  # servectl_ci: the parser venv recipe

from servectl.profile import engine_dump  # noqa: E402
from servectl.profile.api_routes import ROUTES_DIR  # noqa: E402
from servectl.profile.api_routes import extract as extract_routes  # noqa: E402
from servectl.profile.logcatalog import escape_template  # noqa: E402
from servectl.profile.memory_saver import MEMORY_SAVER_DIR  # noqa: E402
from servectl.profile.memory_saver import extract as extract_memory_saver  # noqa: E402

CATALOGS = ROOT / "src" / "servectl" / "profile" / "catalogs"
DUMP = Path(engine_dump.__file__)
P = engine_dump.PLACEHOLDER
BIND = "address already in use"

#: Lines SGLang's server prints through libraries rather than its loggers: (level, source, template).
LIBRARY_LINES: tuple[tuple[str, str, str], ...] = (
    # uvicorn (uvicorn/server.py, uvicorn/lifespan/on.py, uvicorn/protocols/http/*: access log)
    ("info", "uvicorn/server.py", f"Started server process [{P}]"),
    ("info", "uvicorn/lifespan/on.py", "Waiting for application startup."),
    ("info", "uvicorn/lifespan/on.py", "Application startup complete."),
    ("info", "uvicorn/server.py", f"Uvicorn running on {P} (Press CTRL+C to quit)"),
    ("info", "uvicorn/server.py", "Shutting down"),
    ("info", "uvicorn/lifespan/on.py", "Waiting for application shutdown."),
    ("info", "uvicorn/lifespan/on.py", "Application shutdown complete."),
    ("info", "uvicorn/server.py", f"Finished server process [{P}]"),
    ("error", "uvicorn/server.py", f"[Errno {P}] error while attempting to bind on address ({P}): {P}"),
    ("error", "uvicorn/server.py", f"[Errno {P}] error while attempting to bind on address ({P}): {BIND}"),
    ("info", "uvicorn/protocols/http/h11_impl.py", f'{P} - "{P} {P} HTTP/{P}" {P} {P}'),
    # tqdm bars with SGLang's labels and BAR_FORMAT (sglang/srt/utils/common.py BAR_FORMAT)
    (
        "info",
        "sglang/srt/model_loader/weight_utils.py:1166",
        f"Loading safetensors checkpoint shards: {P}% Completed | {P}/{P} [{P}<{P}, {P}]",
    ),
    (
        "info",
        "sglang/srt/model_loader/weight_utils.py:1412",
        f"Loading pt checkpoint shards: {P}% Completed | {P}/{P} [{P}<{P}, {P}]",
    ),
    (
        "info",
        "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py:1343",
        f"Capturing batches (bs={P} avail_mem={P} GB): {P}%|{P}| {P}/{P} [{P}<{P}{P}]",
    ),
    (
        "info",
        "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py:1343",
        f"Capturing batches (bs={P} avail_mem={P} GB): {P}it [{P}, {P}it/s]",
    ),
    # torch and NCCL errors, as the last line of a scheduler traceback (torch/csrc/cuda, torch/distributed)
    ("error", "torch CUDACachingAllocator", f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {P}"),
    ("error", "torch c10/cuda", "RuntimeError: CUDA error: out of memory"),
    ("error", "torch ProcessGroupNCCL", f"torch.distributed.DistBackendError: NCCL error in: {P}, {P}"),
    ("error", "nccl", "ncclInternalError: Internal check failed."),
    ("error", "nccl", f"ncclSystemError: System call (e.g. socket, malloc) or external library call failed{P}"),
    ("error", "nccl", "ncclUnhandledCudaError: Call to CUDA function failed."),
    # Python tracebacks (a crashing scheduler prints one)
    ("error", "python traceback", "Traceback (most recent call last):"),
    ("error", "python traceback", f'  File "{P}", line {P}, in {P}'),
    ("error", "python traceback", f"    {P}"),
    ("error", "python traceback", f"{P}Error: {P}"),
)


def _run_dump(python: str, what: str) -> dict[str, object]:
    done = subprocess.run([python, str(DUMP), what], capture_output=True, text=True, check=True)
    data: dict[str, object] = json.loads(done.stdout)
    return data


def _package_root(python: str) -> Path:
    """The site-packages folder that holds ``python``'s sglang (found without importing it)."""
    code = "import importlib.util as u; print(list(u.find_spec('sglang').submodule_search_locations)[0])"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return Path(done.stdout.strip()).parent


def write_log_catalog(data: dict[str, object], path: Path) -> int:
    """The text catalog from ``engine_dump.py logs`` output; one template per printed line."""
    version = str(data.get("version", ""))
    rows: list[tuple[str, str, str]] = []
    seen: set[tuple[str, str, str]] = set()
    entries = [(str(e["level"]), f"{e['file']}:{e['line']}", str(e["template"])) for e in data["lines"]]  # type: ignore[attr-defined]
    for level, where, raw in [*entries, *LIBRARY_LINES]:
        for physical in raw.split("\n"):
            if not physical.replace(P, "").strip():
                continue
            row = (level, where, escape_template(physical.replace("\t", " "), P))
            if row not in seen:
                seen.add(row)
                rows.append(row)
    header = [
        f"# SGLang {version}: every line its server's loggers can print (sglang/srt), one per printed line,",
        "# made by scripts/extract_sglang_catalogs.py from the wheel's source; plus uvicorn, tqdm and traceback",
        "# lines that SGLang prints through libraries. Columns: level, file:line, template ({} = a value).",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([*header, *("\t".join(r) for r in rows)]) + "\n", encoding="utf-8")
    return len(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", help="a python that imports sglang (default: build the parser venv)")
    args = parser.parse_args()
    python = args.python
    if python is None:
        from servectl_ci.sglang_venv import ensure_parser_venv

        python = str(ensure_parser_venv())
    flags = _run_dump(python, "flags")
    version = str(flags["version"])
    flag_path = CATALOGS / f"sglang-{version}.json"
    flag_path.write_text(json.dumps(flags, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    count = write_log_catalog(_run_dump(python, "logs"), CATALOGS / "logs" / f"sglang-{version}.txt")
    print(f"{flag_path.relative_to(ROOT)}: {len(flags['options'])} options")  # type: ignore[arg-type]
    print(f"catalogs/logs/sglang-{version}.txt: {count} lines")
    saver = extract_memory_saver(_package_root(python), version, python=python)
    MEMORY_SAVER_DIR.mkdir(exist_ok=True)
    saver_path = MEMORY_SAVER_DIR / f"sglang-{version}.json"
    saver_path.write_text(json.dumps(saver, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{saver_path.relative_to(ROOT)}: {len(saver['endpoints'])} endpoints, {len(saver['flags'])} flags")
    routes = extract_routes(_package_root(python), version)
    ROUTES_DIR.mkdir(exist_ok=True)
    routes_path = ROUTES_DIR / f"sglang-{version}.json"
    routes_path.write_text(json.dumps(routes, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{routes_path.relative_to(ROOT)}: {len(routes['routes'])} routes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
