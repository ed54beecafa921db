"""The module functions, the export table, its typing mirror and docs/api.md follow from the ``Host``'s methods.

``scripts/gen_api.py`` writes them from the public methods of ``servectl.host.Host``; this runs it in check mode
(docs/cli.md, written from the commands' ``--help`` by ``scripts/gen_cli_docs.py``, is checked by
``test_docs.py``). A command added as one ``Host`` method, without running the script, fails here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

from servectl.host import Host

if TYPE_CHECKING:
    from servectl.service.clocks import Clocks
    from servectl.service.runtime import UpResult

ROOT = Path(__file__).resolve().parents[2]


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_api", ROOT / "scripts" / "gen_api.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_api"] = module
    spec.loader.exec_module(module)
    return module


gen_api = load_generator()


def test_api_py_init_py_and_docs_api_md_are_what_the_host_says() -> None:
    assert gen_api.stale() == [], "run python scripts/gen_api.py"
    assert gen_api.main(["--check"]) == 0


class Grown(Host):
    """A host with one command more, whose files were not regenerated."""

    def frobnicate(self, *, name: str, lock_timeout_s: float | None = None) -> UpResult:
        """Frobnicate profile ``name``."""
        raise NotImplementedError


def test_a_host_method_added_without_regenerating_makes_every_generated_file_stale() -> None:
    assert gen_api.stale(Grown) == ["src/servectl/api.py", "src/servectl/__init__.py", "docs/api.md"]
    texts = {str(path.relative_to(ROOT)): text for path, text in gen_api.rendered(Grown).items()}
    assert "frobnicate = _function(Host.frobnicate)\n" in texts["src/servectl/api.py"]
    assert '    "frobnicate",\n' in texts["src/servectl/api.py"]  # in __all__
    assert '    "frobnicate": "servectl.api",\n' in texts["src/servectl/__init__.py"]
    assert "    from servectl.api import frobnicate as frobnicate\n" in texts["src/servectl/__init__.py"]
    row = "| `frobnicate(name=, lock_timeout_s=)` | `servectl.frobnicate` | `UpResult` | Frobnicate profile `name`. |"
    assert row in texts["docs/api.md"].splitlines()


class Shadowing(Host):
    def gateway(self) -> None:
        """servectl.gateway is a package: a function of that name would hide it."""


class Unexported(Host):
    def clocks(self) -> Clocks:
        """A result type a user cannot import from servectl."""
        raise NotImplementedError


@pytest.mark.parametrize(
    ("host", "message"),
    [
        (Shadowing, r"Host.gateway: servectl.gateway is a module of the package.*name the function in _RENAMED"),
        (Unexported, r"Host.clocks returns Clocks, which servectl does not export: add it to _EXPORTS"),
    ],
)
def test_a_method_the_generator_cannot_write_is_refused_with_the_fix(host: type[Host], message: str) -> None:
    with pytest.raises(gen_api.GenerationError, match=message):
        gen_api.rendered(host)


def test_a_stale_entry_of_apis_tables_is_refused() -> None:
    source = gen_api.API.read_text(encoding="utf-8").replace('"watch": ', '"watch_gone": ')
    with pytest.raises(gen_api.GenerationError, match="names watch_gone, which Host no longer has"):
        gen_api.commands(Host, source)
