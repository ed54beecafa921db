"""Names a package exports but loads on first use (PEP 562), so that ``import servectl`` stays cheap.

``servectl``, ``servectl.bench`` and ``servectl.bench.qualify`` re-export their public API this way:
``servectl --help`` must not import the Docker SDK, httpx, NVML or matplotlib.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose ``exports`` map each name to its module.

    A name is imported from its module on first use and kept in the package, so later uses cost nothing.
    """

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted(set(exports) | set(getattr(sys.modules[package], "__all__", ())))

    return getattr_, dir_
