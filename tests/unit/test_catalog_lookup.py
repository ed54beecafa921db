"""Looking an option up by a prefix shares no memo with parsing an argv."""

from __future__ import annotations

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
