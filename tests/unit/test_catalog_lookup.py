"""Looking an option up by a prefix shares no memo with parsing an argv."""

from __future__ import annotations

from pathlib import Path

import pytest

from servectl.profile.catalog import ArgvError, FlagCatalog


def test_a_prefix_lookup_does_not_leak_into_parsing_an_argv_of_the_same_words() -> None:
    catalog = FlagCatalog.load("sglang-0.5.23")
    opt = catalog.option("tp-siz")  # a unique prefix of --tp-size
    assert opt is not None and opt.dest == "tp_size"
    assert catalog.expand("--tp-siz") == "--tp-size"
    with pytest.raises(ArgvError, match="unrecognized arguments: option tp-siz"):
        catalog.parse_argv(["option", "tp-siz"])  # two stray words, never the lookup's answer


def test_an_ambiguous_prefix_is_refused_by_lookup_expand_and_parse_alike() -> None:
    catalog = FlagCatalog.load("sglang-0.5.23")
    for call in (lambda: catalog.option("--enable"), lambda: catalog.expand("--enable")):
        with pytest.raises(ArgvError, match="ambiguous option: --enable could match"):
            call()
    with pytest.raises(ArgvError, match="ambiguous option: --enable could match"):
        catalog.parse_argv(["--enable"])


@pytest.mark.parametrize(
    ("load", "kind", "what"),
    [
        ("servectl.profile.memory_saver:load_memory_saver", "memory_saver", "memory-saver catalog"),
        ("servectl.profile.api_routes:load_routes", "routes", "route catalog"),
    ],
)
def test_the_shipped_json_catalogs_have_one_bounded_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load: str, kind: str, what: str
) -> None:
    """The route and memory-saver catalogs are read by profile.catalog.read_shipped_catalog: a name that is not
    shipped lists the shipped ones, a file over the catalog size limit is refused, whichever kind."""
    import importlib

    from servectl.files import FileRefused
    from servectl.profile import catalog

    module, name = load.split(":")
    reader = getattr(importlib.import_module(module), name)
    (tmp_path / kind).mkdir()
    (tmp_path / kind / "small.json").write_text('{"ok": true}', encoding="utf-8")
    (tmp_path / kind / "big.json").write_text('{"pad": "' + "x" * 200 + '"}', encoding="utf-8")
    monkeypatch.setattr(catalog, "CATALOG_DIR", tmp_path)
    monkeypatch.setattr(catalog, "MAX_CATALOG_BYTES", 100)
    assert reader("small") == {"ok": True}
    with pytest.raises(FileRefused):
        reader("big")
    with pytest.raises(KeyError) as err:
        reader("nope")
    assert str(err.value) == repr(f"unknown {what} 'nope'; shipped: big, small")
