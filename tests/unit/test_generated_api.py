"""What a command needs besides its CLI module and its ``Host`` method is generated, and a test fails when stale.

``scripts/gen_api.py`` writes the module functions, the export table's entries, its typing mirror and
docs/api.md from the public methods of ``servectl.host.Host``; this runs it in check mode. A command added as
one ``Host`` method, without running the script, fails here. ``scripts/gen_cli_docs.py`` writes the CLI's lazy
command table (``COMMANDS`` in cli/app.py) from what the command modules register, and docs/cli.md from
their ``--help``: ``test_docs.py`` runs it in check mode; here, that a new command lands in the table.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING

import pytest

from servectl.host import Host

if TYPE_CHECKING:
    from servectl.service.clocks import Clocks
    from servectl.service.runtime import UpResult

ROOT = Path(__file__).resolve().parents[2]


def load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


gen_api = load_script("gen_api")
gen_cli_docs = load_script("gen_cli_docs")


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


def test_the_lazy_command_table_is_what_the_command_modules_register() -> None:
    from servectl.cli.app import COMMANDS

    modules = gen_cli_docs.command_modules()
    assert {"adopt", "service", "swap", "gateway", "campaign"} <= set(modules) and "app" not in modules
    assert gen_cli_docs.command_table(modules) == COMMANDS
    assert list(COMMANDS).index("swap") < list(COMMANDS).index("bench")  # commands first, then groups


def test_a_command_added_to_a_module_lands_in_the_table() -> None:
    import typer

    def register(app: typer.Typer) -> None:
        def frob_it() -> None:
            """Frobnicate."""

        app.command()(frob_it)  # named from its function, as typer does
        app.add_typer(typer.Typer(), name="frobs")

    loaded = {"service": importlib.import_module("servectl.cli.service"), "zz": SimpleNamespace(register=register)}
    table = gen_cli_docs.command_table(["service", "zz"], load=loaded.__getitem__)
    assert list(table.items()) == [
        ("up", "service"),
        ("down", "service"),
        ("status", "service"),
        ("logs", "service"),
        ("frob-it", "zz"),
        ("frobs", "zz"),
    ]
