"""The environment enters once (STYLE 11d, issue 40): guards over the source of ``src/servectl``.

* **Environment reads.** Only the module that builds the :class:`~servectl.service.context.Context`
  (``service/context.py``) reads the process's environment (``os.environ``, ``os.getenv``, ``from os import
  environ``); everything else gets the context's ``environ``. ``paths.py`` computes the folders of the environment
  it is given: the catalog folder too, which the profile search carries to the validator and the compiler (it
  read the process's when none was given, so a host whose ``SERVECTL_CATALOG_CACHE`` differs validated an
  ``engine.catalog: image`` profile against the wrong folder).
* **Environment defaults.** Below ``host/`` no parameter or field named ``environ`` has a default: a caller that
  forgets to pass the host's environment is a type error, not a silent read of the process's (the bug of
  ``bench``, ``qualify`` and ``diff_container`` on a profile only the host's ``SERVECTL_PROFILES`` names).
  ``Host``, ``from_env``, ``api.py`` and ``Context`` itself build from ``os.environ`` when given none.
* **Clocks.** Below ``host/`` no parameter or field defaults to a clock or a pause (``time.time``,
  ``time.monotonic``, ``time.perf_counter``, ``time.sleep``): the Context's :class:`Clocks` reach every wait,
  deadline and timestamp (``DockerRuntime.start`` dropped ``ctx.clocks``: the gate ran on the real clock under a
  fake one). ``service/clocks.py`` is the real clocks' one home.
* **Adapters.** The real adapters (Docker SDK engine and client, NVML, the psutil probe, the state folder's
  history and lock, declared conflicts, the runtime, the code sandbox, the plan cache, HTTP) are constructed only where
  the context is built: ``service/context.py``, and ``host/base.py`` (the host's plan cache beside it).
* **Waits and requests.** ``time.sleep(...)`` and httpx's module functions (``httpx.get``, ``httpx.post``...,
  each a client of its own per call) are called only by the adapters and the clocks that own them; the core takes
  the context's ``Clocks.sleep`` and HTTP adapter, so a fake clock and a fake engine's transport drive it in tests.
* **The GPU inventory is never None.** Below ``host/`` no parameter or field is typed an optional GPU inventory
  (``GpuInventory | None``): ``None`` meant four things (open NVML here, no GPUs, no wait, unknown). The
  Context's :attr:`gpus` is the one door, and a :class:`NullGpuInventory` is the inventory that reads no card.
* **Adapter defaults.** Below ``host/`` no parameter or field typed an adapter (an interface or class the
  Context holds, a ``Protocol`` of ``adapters/``, a real adapter class) defaults to ``None``: a callee that builds
  its own, or reads "none given" as a meaning of its own, is how the context was bypassed. The types come from
  the code: the Context's constructor, the protocols under ``adapters/``, :data:`ADAPTER_CLASSES`.
* **Numeric defaults.** A default (a parameter's, a class field's, a module constant) has one home: the same
  number under the same name in two modules is one default written twice (the cards-free deadline 30.0 had four
  homes). Names are compared without a ``default_`` prefix and a ``_s`` suffix, and a name of two words or more
  matches another that ends with it (``CARDS_FREE_DEADLINE_S`` and ``free_deadline_s``). 0 and 1 are left out.

Each guard has a list of permanent exceptions, each with its reason, and a ``NOT_YET`` list of what issue 40
has still to move; both may only shrink (a test fails on an entry that no longer applies). ``standin/`` (a
program of its own, also run inside its image, configured by its environment as SGLang is) and ``testing/``
(fakes mirror the interfaces' signatures) are outside the guards. Each guard is shown failing on a synthetic
module.
"""

from __future__ import annotations

import ast
import textwrap
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "servectl"
OUTSIDE = ("standin/", "testing/")

# -- environment reads ---------------------------------------------------------------------------------------
ENV_READERS = {
    "service/context.py": "builds the Context from the environment (Context(environ=None) is os.environ)",
    "cli/app.py": "sets PYDANTIC_DISABLE_PLUGINS for the process before pydantic loads (a setting, not a read)",
    "cli/service.py": "bold table headers unless TERM=dumb, as rich decides for its own tables (display only)",
    "adapters/host.py": "which tools this process can run (shutil.which) is a fact of its own PATH",
}
ENV_NOT_YET: dict[str, str] = {
    # module -> what issue 40 still has to take from the Context's environ
}

# -- environment defaults -------------------------------------------------------------------------------------
ABOVE_THE_CONTEXT = ("host/", "cli/", "api.py")
ENV_DEFAULTS = {
    "service/context.py": "Context(environ=None) is the process's environment: the one place it is read",
}
ENV_DEFAULTS_NOT_YET: dict[str, str] = {
    # module -> what issue 40 still has to give the host's environ
}

# -- clock defaults -------------------------------------------------------------------------------------------
CLOCK_FUNCTIONS = frozenset({"time", "monotonic", "perf_counter", "sleep", "time_ns", "monotonic_ns"})
CLOCK_HOMES = {
    "service/clocks.py": "Clocks: the real wall and monotonic clocks and sleep, the one home of their defaults",
    "bench/runner.py": "run_bench times a live server's tokens with time.perf_counter (a measurement, not the "
    "context's time: servectl.run_bench needs no host; tests over a mock transport pass a fake one)",
}
CLOCKS_NOT_YET: dict[str, str] = {
    # module -> what issue 40 still has to take from the Context's clocks
}

# -- adapter construction --------------------------------------------------------------------------------------
ADAPTER_CLASSES = frozenset(
    {
        "DockerSdkEngine",
        "NvmlInventory",
        "PsutilHostProbe",
        "History",
        "StateLock",
        "DockerConflicts",
        "DockerRuntime",
        "DockerSandbox",
        "PlanCache",
        "StandardHttp",
    }
)
#: Adapters of libraries, typed where a caller's is passed (an ``httpx.Client | None = None`` is a client built
#: by the callee where none is given: the Context's HTTP adapter opens them).
LIBRARY_ADAPTERS = frozenset({"httpx.Client", "httpx.AsyncClient"})
CONTEXT_BUILDERS = {
    "service/context.py": "builds the Context and opens its adapters",
    "host/base.py": "builds the host's Context and, beside it, the host's plan cache",
    "adapters/docker/sdk.py": "the SDK engine is the adapter around the SDK's client: the one docker.from_env()",
}
ADAPTERS_NOT_YET: dict[str, str] = {
    # module -> what issue 40 still has to take from the Context
}

# -- waits and requests ------------------------------------------------------------------------------------------
HTTPX_FUNCTIONS = frozenset({"get", "post", "put", "patch", "delete", "head", "options", "request", "stream"})
WAITERS = {
    "adapters/plain_http.py": "the socket HTTP adapter backs off between connection attempts",
    "adapters/state.py": "the state lock's adapter polls the lock file",
}
WAITS_NOT_YET: dict[str, str] = {
    # module -> what issue 40 still has to take from the Context's clocks or a passed HTTP client
}

# -- optional GPU inventories ----------------------------------------------------------------------------------------
INVENTORY_PROTOCOL = "GpuInventory"
OPTIONAL_INVENTORY = {
    "service/context.py": "Context(gpus=None) is the Context's own NVML, opened at its first read: the one place "
    "an inventory is built where none is given",
}

# -- adapter defaults -------------------------------------------------------------------------------------------------
PLAIN_VALUES = frozenset({"Path", "bool", "float", "int", "str"})
ADAPTER_DEFAULTS = {
    "service/context.py": "Context(...=None) builds its own adapter where none is given: the one place they are built",
    "adapters/conflicts.py": "DockerConflicts(compose=None) detects the compose CLI on first need: the adapter that "
    "owns it (False: there is none)",
    "bench/qualify/runner.py": "run_qualify(sandbox=None, http=None) is a public entry point for a server at a URL, "
    "with no host: without a sandbox a suite with a coding gate is refused in one line before anything runs; without "
    "an HTTP adapter the routed gate uses the standard one (service.context.standard_http, where adapters are built)",
}
ADAPTER_DEFAULTS_NOT_YET: dict[str, str] = {
    # module -> what issue 40 still has to take from the Context
}

# -- numeric defaults ----------------------------------------------------------------------------------------------
DEFAULT_TWINS: dict[tuple[str, float], str] = {
    # (name stem, value): why the same number under that name in several modules is not one default
}
DEFAULTS_NOT_YET: dict[tuple[str, float], str] = {
    # (name stem, value) -> what issue 40 still has to give one home
}


def modules(root: Path) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if not relative.startswith(OUTSIDE):
            yield relative, ast.parse(path.read_text(encoding="utf-8"))


def environ_reads(tree: ast.Module) -> list[int]:
    """Lines that read the process's environment."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr in {"environ", "environb", "getenv", "getenvb"}
        ):
            found.append(node.lineno)
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [node.lineno for a in node.names if a.name in {"environ", "environb", "getenv", "getenvb"}]
    return found


def _defaults(node: ast.AST) -> Iterator[tuple[str, ast.expr]]:
    """``(name, default)`` of each parameter of a function, or each field of a class, that has a default."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        args = node.args
        positional = args.posonlyargs + args.args
        defaulted = positional[len(positional) - len(args.defaults) :]
        yield from ((a.arg, d) for a, d in zip(defaulted, args.defaults, strict=True))
        yield from ((a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None)
    elif isinstance(node, ast.ClassDef):
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is not None:
                yield item.target.id, item.value


def environ_defaults(tree: ast.Module) -> list[tuple[str, int]]:
    """``(name, line)`` of each parameter or field named ``environ`` (or ``*_environ``) given a default."""
    return [
        (name, default.lineno)
        for node in ast.walk(tree)
        for name, default in _defaults(node)
        if name == "environ" or name.endswith("_environ")
    ]


def clock_defaults(tree: ast.Module) -> list[tuple[str, int]]:
    """``(name, line)`` of each parameter or field whose default is a clock or a pause of the time module."""
    found = []
    for node in ast.walk(tree):
        for name, default in _defaults(node):
            attr = isinstance(default, ast.Attribute) and isinstance(default.value, ast.Name)
            if attr and default.value.id == "time" and default.attr in CLOCK_FUNCTIONS:  # type: ignore[attr-defined]
                found.append((name, default.lineno))
    return found


def adapter_constructions(tree: ast.Module) -> list[tuple[str, int]]:
    """``(what, line)`` of every adapter constructed (``docker.from_env()`` too)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in ADAPTER_CLASSES:
            found.append((func.id, node.lineno))
        elif isinstance(func, ast.Attribute) and func.attr in ADAPTER_CLASSES:
            found.append((func.attr, node.lineno))
        elif (
            isinstance(func, ast.Attribute)
            and func.attr == "from_env"
            and isinstance(func.value, ast.Name)
            and func.value.id == "docker"
        ):
            found.append(("docker.from_env", node.lineno))
    return found


def waits_and_requests(tree: ast.Module) -> list[tuple[str, int]]:
    """``(what, line)`` of each ``time.sleep(...)`` and httpx module-function call."""
    found = []
    for node in ast.walk(tree):
        func = node.func if isinstance(node, ast.Call) else None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if (func.value.id, func.attr) == ("time", "sleep"):
                found.append(("time.sleep", node.lineno))
            elif func.value.id == "httpx" and func.attr in HTTPX_FUNCTIONS:
                found.append((f"httpx.{func.attr}", node.lineno))
    return found


def wait_offenders(root: Path) -> dict[str, list[tuple[str, int]]]:
    return {m: c for m, tree in modules(root) if (c := waits_and_requests(tree)) and m not in WAITERS}


def _union_arms(annotation: ast.expr) -> list[ast.expr]:
    """The types of ``A | B | None`` or ``Optional[A]`` (a quoted annotation parsed first), else ``[annotation]``."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = ast.parse(annotation.value, mode="eval").body
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _union_arms(annotation.left) + _union_arms(annotation.right)
    if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) in {"Optional", "typing.Optional"}:
        return [*_union_arms(annotation.slice), ast.Constant(None)]
    return [annotation]


def annotated(tree: ast.Module) -> Iterator[tuple[str, ast.expr, ast.expr | None, int]]:
    """``(name, annotation, default or None, line)`` of each annotated parameter and class field."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            positional = args.posonlyargs + args.args
            defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
            pairs = list(zip(positional, [*defaults, *args.defaults], strict=True))
            pairs += list(zip(args.kwonlyargs, args.kw_defaults, strict=True))
            yield from ((a.arg, a.annotation, d, a.lineno) for a, d in pairs if a.annotation is not None)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    yield item.target.id, item.annotation, item.value, item.lineno


def optional_of(tree: ast.Module, types: frozenset[str]) -> list[tuple[str, int]]:
    """``(name, line)`` of each parameter or field typed one of ``types`` or None."""
    found = []
    for name, annotation, _default, line in annotated(tree):
        arms = [ast.unparse(arm) for arm in _union_arms(annotation)]
        if "None" in arms and types & set(arms):
            found.append((name, line))
    return found


def inventory_types(root: Path) -> frozenset[str]:
    """The GPU inventory protocol and every class of ``adapters/gpu.py`` that answers ``snapshot()``."""
    tree = ast.parse((root / "adapters" / "gpu.py").read_text(encoding="utf-8"))
    return frozenset(
        {INVENTORY_PROTOCOL}
        | {
            c.name
            for c in tree.body
            if isinstance(c, ast.ClassDef)
            and any(isinstance(f, ast.FunctionDef) and f.name == "snapshot" for f in c.body)
        }
    )


def optional_inventory_offenders(root: Path) -> dict[str, list[tuple[str, int]]]:
    types = inventory_types(root)
    return {
        m: found
        for m, tree in modules(root)
        if not m.startswith(ABOVE_THE_CONTEXT) and (found := optional_of(tree, types)) and m not in OPTIONAL_INVENTORY
    }


def adapter_types(root: Path) -> frozenset[str]:
    """The adapter types, from the code: each type the Context's constructor takes that is not a plain value
    (``DockerEngine``, ``GpuInventory``, ``HttpAdapter``, ``HistoryLog``, ``Lock``, ``Clocks``...), every
    ``Protocol`` under ``adapters/``, the real adapter classes, a library's clients and the GPU inventories."""
    context = ast.parse((root / "service" / "context.py").read_text(encoding="utf-8"))
    init = next(
        f
        for c in context.body
        if isinstance(c, ast.ClassDef) and c.name == "Context"
        for f in c.body
        if isinstance(f, ast.FunctionDef) and f.name == "__init__"
    )
    taken = {
        ast.unparse(arm)
        for a in init.args.kwonlyargs
        if a.annotation is not None
        for arm in _union_arms(a.annotation)
        if isinstance(arm, ast.Name | ast.Attribute)
    }
    protocols = {
        c.name
        for m, tree in modules(root)
        if m.startswith("adapters/")
        for c in ast.walk(tree)
        if isinstance(c, ast.ClassDef) and any(ast.unparse(b) == "Protocol" for b in c.bases)
    }
    adapters = protocols | ADAPTER_CLASSES | LIBRARY_ADAPTERS | inventory_types(root)
    return frozenset((taken - PLAIN_VALUES - {"None"}) | adapters)


def adapter_defaults(tree: ast.Module, types: frozenset[str]) -> list[tuple[str, int]]:
    """``(name, line)`` of each parameter or field typed one of ``types`` (or None) that defaults to None."""
    return [
        (name, line)
        for name, annotation, default, line in annotated(tree)
        if isinstance(default, ast.Constant)
        and default.value is None
        and types & {ast.unparse(arm) for arm in _union_arms(annotation)}
    ]


def adapter_default_offenders(root: Path) -> dict[str, list[tuple[str, int]]]:
    types = adapter_types(root)
    return {
        m: found
        for m, tree in modules(root)
        if not m.startswith(ABOVE_THE_CONTEXT)
        and (found := adapter_defaults(tree, types))
        and m not in ADAPTER_DEFAULTS
    }


def _stem(name: str) -> str:
    stem = name.lower().removeprefix("default_")
    return stem.removesuffix("_s")


def _number(node: ast.expr | None) -> float | None:
    if isinstance(node, ast.Call) and node.args:  # pydantic's Field(30.0, ...)
        node = node.args[0]
    if isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value not in (0, 1):
        return float(node.value)
    return None


def numeric_defaults(tree: ast.Module) -> Iterator[tuple[str, float, int]]:
    """``(name stem, value, line)`` of each numeric default: parameters, class fields, module constants."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
            for arg, default in pairs:
                if (value := _number(default)) is not None:
                    yield _stem(arg.arg), value, default.lineno
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                field = item.target if isinstance(item, ast.AnnAssign) else None
                if isinstance(field, ast.Name) and (value := _number(getattr(item, "value", None))) is not None:
                    yield _stem(field.id), value, item.lineno
    for item in tree.body:
        targets = [item.target] if isinstance(item, ast.AnnAssign) else getattr(item, "targets", [])
        for target in targets:
            constant = isinstance(target, ast.Name) and target.id.isupper()
            if constant and (value := _number(getattr(item, "value", None))) is not None:
                yield _stem(target.id), value, item.lineno


def _same_default(a: str, b: str) -> bool:
    """The same name, or one of two words or more that the other ends with (``free_deadline`` in
    ``cards_free_deadline``; a one-word name such as ``timeout`` is too common to match by its end)."""
    short, long = sorted((a, b), key=len)
    return a == b or ("_" in short and long.endswith("_" + short))


def repeated_defaults(found: dict[str, list[tuple[str, float, int]]]) -> dict[tuple[str, float], set[str]]:
    """``(shortest stem, value) -> modules`` for each default written in more than one module."""
    by_value: dict[float, list[tuple[str, str]]] = defaultdict(list)
    for module, defaults in found.items():
        for stem, value, _line in defaults:
            by_value[value].append((stem, module))
    repeated: dict[tuple[str, float], set[str]] = {}
    for value, entries in by_value.items():
        for stem, _module in entries:
            twins = {m for s, m in entries if _same_default(stem, s)}
            if len(twins) > 1:
                shortest = min((s for s, _ in entries if _same_default(stem, s)), key=len)
                repeated.setdefault((shortest, value), set()).update(twins)
    return repeated


# -- the three guards over the package -----------------------------------------------------------------------
def environ_offenders(root: Path) -> dict[str, list[int]]:
    return {m: lines for m, tree in modules(root) if (lines := environ_reads(tree)) and m not in ENV_READERS}


def environ_default_offenders(root: Path) -> dict[str, list[tuple[str, int]]]:
    return {
        m: found
        for m, tree in modules(root)
        if not m.startswith(ABOVE_THE_CONTEXT) and (found := environ_defaults(tree)) and m not in ENV_DEFAULTS
    }


def clock_offenders(root: Path) -> dict[str, list[tuple[str, int]]]:
    return {
        m: found
        for m, tree in modules(root)
        if not m.startswith(ABOVE_THE_CONTEXT) and (found := clock_defaults(tree)) and m not in CLOCK_HOMES
    }


def adapter_offenders(root: Path) -> dict[str, list[tuple[str, int]]]:
    return {m: c for m, tree in modules(root) if (c := adapter_constructions(tree)) and m not in CONTEXT_BUILDERS}


def default_offenders(root: Path) -> dict[tuple[str, float], set[str]]:
    found = {m: list(numeric_defaults(tree)) for m, tree in modules(root)}
    return {key: where for key, where in repeated_defaults(found).items() if key not in DEFAULT_TWINS}


def test_only_the_context_module_reads_the_environment() -> None:
    offenders = environ_offenders(SRC)
    unexpected = {m: lines for m, lines in offenders.items() if m not in ENV_NOT_YET}
    assert unexpected == {}, f"read the Context's environ instead of os.environ: {unexpected}"
    assert set(ENV_NOT_YET) <= set(offenders), f"done: remove from ENV_NOT_YET: {set(ENV_NOT_YET) - set(offenders)}"
    assert {m for m, _ in modules(SRC) if environ_reads(_tree(m))} >= set(ENV_READERS) - {"service/context.py"}


def test_below_the_host_no_environ_has_a_default() -> None:
    offenders = environ_default_offenders(SRC)
    unexpected = {m: found for m, found in offenders.items() if m not in ENV_DEFAULTS_NOT_YET}
    assert unexpected == {}, f"take the environment without a default (the host passes its own): {unexpected}"
    assert set(ENV_DEFAULTS_NOT_YET) <= set(offenders), f"done: remove from ENV_DEFAULTS_NOT_YET: {offenders}"
    assert all(environ_defaults(_tree(m)) for m in ENV_DEFAULTS), "an exception that no longer applies"


def test_below_the_host_no_clock_or_pause_has_a_default() -> None:
    offenders = clock_offenders(SRC)
    unexpected = {m: found for m, found in offenders.items() if m not in CLOCKS_NOT_YET}
    assert unexpected == {}, f"take the clock from the Context's Clocks (no default): {unexpected}"
    assert set(CLOCKS_NOT_YET) <= set(offenders), f"done: remove from CLOCKS_NOT_YET: {offenders}"
    assert all(clock_defaults(_tree(m)) for m in CLOCK_HOMES), "an exception that no longer applies"


def test_only_the_context_module_constructs_adapters() -> None:
    offenders = adapter_offenders(SRC)
    unexpected = {m: found for m, found in offenders.items() if m not in ADAPTERS_NOT_YET}
    assert unexpected == {}, f"take the adapter from the Context instead: {unexpected}"
    assert set(ADAPTERS_NOT_YET) <= set(offenders), f"done: remove from ADAPTERS_NOT_YET: {offenders.keys()}"


def test_only_adapters_and_clocks_sleep_or_open_a_client_per_request() -> None:
    offenders = wait_offenders(SRC)
    unexpected = {m: found for m, found in offenders.items() if m not in WAITS_NOT_YET}
    assert unexpected == {}, f"take the context's Clocks.sleep and HTTP client instead: {unexpected}"
    assert set(WAITS_NOT_YET) <= set(offenders), f"done: remove from WAITS_NOT_YET: {offenders.keys()}"
    assert {m for m, tree in modules(SRC) if waits_and_requests(tree)} >= set(WAITERS)


@pytest.mark.parametrize(
    "source",
    [
        "import time\n\ndef wait():\n    time.sleep(0.2)\n",
        "import httpx\n\ndef ask(url):\n    return httpx.post(url, json={})\n",
        "import httpx\n\ndef load(url):\n    return httpx.get(url).json()\n",
    ],
)
def test_the_waits_guard_fails_on_a_module_sleeping_or_posting_itself(tmp_path: Path, source: str) -> None:
    root = _package(tmp_path, {"service/bad.py": source, "service/clocks.py": "import time\n\nSLEEP = time.sleep\n"})
    assert list(wait_offenders(root)) == ["service/bad.py"]


def test_below_the_host_no_gpu_inventory_is_optional() -> None:
    offenders = optional_inventory_offenders(SRC)
    assert offenders == {}, f"take a GpuInventory (a NullGpuInventory reads no card), never None: {offenders}"
    assert {"GpuInventory", "NvmlInventory", "NullGpuInventory"} <= inventory_types(SRC)
    assert all(optional_of(_tree(m), inventory_types(SRC)) for m in OPTIONAL_INVENTORY), "no longer applies"


def test_below_the_host_no_adapter_defaults_to_none() -> None:
    offenders = adapter_default_offenders(SRC)
    unexpected = {m: found for m, found in offenders.items() if m not in ADAPTER_DEFAULTS_NOT_YET}
    assert unexpected == {}, f"take the Context's adapter (no None default): {unexpected}"
    assert set(ADAPTER_DEFAULTS_NOT_YET) <= set(offenders), f"done: remove from ADAPTER_DEFAULTS_NOT_YET: {offenders}"
    types = adapter_types(SRC)
    assert all(adapter_defaults(_tree(m), types) for m in ADAPTER_DEFAULTS), "an exception that no longer applies"
    expected = {"DockerEngine", "GpuInventory", "HostProbe", "HttpAdapter", "httpx.Client", "HistoryLog", "Lock"}
    assert expected | {"Clocks", "ComposeCli", "CodeSandbox", "StateLock", "ServiceRuntime", "StandardHttp"} <= types


def test_a_numeric_default_has_one_home() -> None:
    offenders = default_offenders(SRC)
    unexpected = {k: sorted(v) for k, v in offenders.items() if k not in DEFAULTS_NOT_YET}
    assert unexpected == {}, f"one constant per default, imported where it is used: {unexpected}"
    assert set(DEFAULTS_NOT_YET) <= set(offenders), f"done: remove from DEFAULTS_NOT_YET: {offenders.keys()}"
    assert set(DEFAULT_TWINS) <= set(repeated_defaults({m: list(numeric_defaults(t)) for m, t in modules(SRC)}))


def _tree(module: str) -> ast.Module:
    return ast.parse((SRC / module).read_text(encoding="utf-8"))


# -- each guard fails on a synthetic package -------------------------------------------------------------------
def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "servectl"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


@pytest.mark.parametrize(
    "source",
    [
        "import os\n\ndef home():\n    return os.environ.get('HOME')\n",
        "import os\n\nHOME = os.getenv('HOME')\n",
        "from os import environ\n",
        "import os\n\ndef f(environ=None):\n    return os.environ if environ is None else environ\n",
    ],
)
def test_the_environment_guard_fails_on_a_module_reading_os_environ(tmp_path: Path, source: str) -> None:
    root = _package(tmp_path, {"service/context.py": "import os\nENV = os.environ\n", "plan/bad.py": source})
    assert list(environ_offenders(root)) == ["plan/bad.py"]


@pytest.mark.parametrize(
    "source",
    [
        "def resolve(name, *, environ=None):\n    ...\n",
        "def search_path(environ={}):\n    ...\n",
        "from dataclasses import dataclass\n\n@dataclass\nclass Options:\n    environ: dict | None = None\n",
        "class Runner:\n    def __init__(self, *, child_environ=None) -> None: ...\n",
    ],
)
def test_the_environ_default_guard_fails_on_a_defaulted_environ_below_the_host(tmp_path: Path, source: str) -> None:
    host = "def from_env(*, environ=None):\n    ...\n"  # above the Context: builds it from os.environ
    root = _package(tmp_path, {"host/__init__.py": host, "api.py": host, "plan/bad.py": source})
    assert list(environ_default_offenders(root)) == ["plan/bad.py"]


@pytest.mark.parametrize(
    "source",
    [
        "import time\n\ndef wait(*, clock=time.monotonic):\n    ...\n",
        "import time\n\ndef poll(deadline_s, sleep=time.sleep):\n    ...\n",
        "import time\nfrom dataclasses import dataclass\n\n@dataclass\nclass Gate:\n    clock: object = time.time\n",
        "import time\n\nclass Ring:\n    def __init__(self, *, now=time.perf_counter) -> None: ...\n",
    ],
)
def test_the_clock_guard_fails_on_a_defaulted_clock_below_the_host(tmp_path: Path, source: str) -> None:
    clocks = (
        "import time\nfrom dataclasses import dataclass\n\n@dataclass\nclass Clocks:\n    wall: object = time.time\n"
    )
    host = "import time\n\ndef sleep_between(*, sleep=time.sleep):\n    ...\n"  # above the Context
    root = _package(tmp_path, {"service/clocks.py": clocks, "host/watch.py": host, "service/bad.py": source})
    assert list(clock_offenders(root)) == ["service/bad.py"]


@pytest.mark.parametrize(
    "source",
    [
        "from servectl.adapters.gpu import NvmlInventory\n\ndef f():\n    with NvmlInventory() as nvml:\n        ...\n",
        "def f(state_dir):\n    from servectl.adapters.state import History\n\n    return History(state_dir)\n",
        "def f():\n    import docker\n\n    return docker.from_env()\n",
        "import servectl.adapters.host as h\n\nPROBE = h.PsutilHostProbe()\n",
    ],
)
def test_the_adapter_guard_fails_on_a_module_constructing_one(tmp_path: Path, source: str) -> None:
    context = "from servectl.adapters.gpu import NvmlInventory\n\ndef gpus():\n    return NvmlInventory()\n"
    root = _package(tmp_path, {"service/context.py": context, "preflight/bad.py": source})
    assert list(adapter_offenders(root)) == ["preflight/bad.py"]


@pytest.mark.parametrize(
    "source",
    [
        "def stop(service, *, gpus: GpuInventory | None = None) -> None: ...\n",
        "from typing import Optional\n\ndef host_facts(gpus: Optional[GpuInventory]) -> dict: ...\n",
        "from dataclasses import dataclass\n\n@dataclass\nclass Tx:\n    gpus: 'NvmlInventory | None' = None\n",
        "class Runtime:\n    def stop(self, *, cards: None | NullGpuInventory) -> None: ...\n",
    ],
)
def test_the_inventory_guard_fails_on_an_optional_gpu_inventory_below_the_host(tmp_path: Path, source: str) -> None:
    gpu = "class GpuInventory:\n    def snapshot(self): ...\n\nclass NvmlInventory:\n    def snapshot(self): ...\n"
    gpu += "\nclass NullGpuInventory:\n    def snapshot(self): ...\n"
    context = "class Context:\n    def __init__(self, *, gpus: GpuInventory | None = None) -> None: ...\n"
    fine = "def stop(service, *, gpus: GpuInventory, deadline_s: float | None = None) -> None: ...\n"
    files = {"adapters/gpu.py": gpu, "service/context.py": context, "service/ok.py": fine, "service/bad.py": source}
    root = _package(tmp_path, {**files, "host/base.py": context.replace("Context", "HostBase")})
    assert list(optional_inventory_offenders(root)) == ["service/bad.py"]


@pytest.mark.parametrize(
    "source",
    [
        "def stop(*, host: HostProbe | None = None) -> None: ...\n",
        "import httpx\n\ndef probe(url, http: httpx.Client | None = None) -> None: ...\n",
        "from dataclasses import dataclass\n\n@dataclass\nclass Run:\n    history: 'HistoryLog | None' = None\n",
        "from typing import Optional\n\nclass Gate:\n    def __init__(self, lock: Optional[Lock] = None): ...\n",
        "def compose_of(*, compose: ComposeCli | None = None) -> None: ...\n",  # a protocol of adapters/
        "def stop(*, engine: DockerSdkEngine | None = None) -> None: ...\n",  # a real adapter class
    ],
)
def test_the_adapter_default_guard_fails_on_an_adapter_defaulting_to_none(tmp_path: Path, source: str) -> None:
    context = textwrap.dedent(
        """\
        class Context:
            def __init__(self, *, environ: Mapping | None = None, state_dir: Path | None = None,
                         docker: DockerEngine | None = None, probe: HostProbe | None = None,
                         http: httpx.Client | None = None, history: HistoryLog | None = None,
                         lock: Lock | None = None, lock_timeout_s: float | None = None) -> None: ...
        """
    )
    gpu = "from typing import Protocol\n\nclass GpuInventory(Protocol):\n    def snapshot(self): ...\n"
    fine = "def up(*, docker: DockerEngine, state_dir: Path | None = None, timeout_s: float | None = None): ...\n"
    files = {"service/context.py": context, "adapters/gpu.py": gpu, "service/ok.py": fine, "service/bad.py": source}
    files["adapters/conflicts.py"] = "from typing import Protocol\n\nclass ComposeCli(Protocol): ...\n"
    root = _package(tmp_path, {**files, "host/base.py": "def build(*, docker: DockerEngine | None = None): ...\n"})
    assert list(adapter_default_offenders(root)) == ["service/bad.py"]


def test_the_defaults_guard_fails_on_one_number_under_one_name_in_two_modules(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "service/a.py": "def stop(*, free_deadline_s: float = 45.0, tries: int = 1) -> None: ...\n",
            "service/b.py": "CARDS_FREE_DEADLINE_S = 45.0\nOTHER_S = 45.0\n",
            "service/c.py": (
                "from dataclasses import dataclass\n\n@dataclass\nclass Opts:\n    free_deadline_s: float = 45.0\n"
            ),
            "service/d.py": "def g(wait_s: float = 45.0, n: int = 1) -> None: ...\n",  # another name: its own
            "service/e.py": "def h(count: int = 1) -> None: ...\n",  # 0 and 1 are everyone's
        },
    )
    assert default_offenders(root) == {("free_deadline", 45.0): {"service/a.py", "service/b.py", "service/c.py"}}
