"""Property: any YAML document either loads as a profile or fails with a ProfileError - never anything else."""

from __future__ import annotations

from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servectl.errors import ProfileError
from servectl.profile.loader import ProfileFolder, ProfileSearch
from servectl.profile.validate import load_profile

KEYS = [
    "name",
    "image",
    "model",
    "serve",
    "engine",
    "gpus",
    "container",
    "health",
    "extends",
    "status",
    "tp",
    "ref",
    "digest",
    "path",
    "served_name",
    "port",
    "role",
    "args",
    "speculative",
    "devices",
    "conflicts",
    "adaptive_steps",
    "num_steps",
    "algorithm",
    "context_length",
    "env",
    "mounts",
    "catalog_extend",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 70000),
    st.floats(allow_nan=False),
    st.sampled_from(["p", "EAGLE", "bench", "sm120", "x/y:1", "/m", "sha256:00", "${X}"]),
    st.text(max_size=8),
)
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=6)),
    max_leaves=25,
)
VALID = {
    "name": "p",
    "image": {"ref": "x/y:1"},
    "model": {"path": "/m", "served_name": "m"},
    "serve": {"port": 8180, "role": "bench"},
}


def _check(tmp: Path, text: str) -> None:
    folder = tmp / "profiles"
    folder.mkdir(exist_ok=True)
    (folder / "p.yaml").write_text(text)
    try:
        load_profile("p", folders=ProfileSearch((ProfileFolder(folder, "test"),), catalogs=tmp / "catalogs"))
    except ProfileError as err:
        assert err.lines() and all(line.startswith(str(folder)) or line.startswith("profiles") for line in err.lines())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=documents)
def test_random_documents_load_or_fail_with_a_profile_error(tmp_path: Path, doc: object) -> None:
    _check(tmp_path, yaml.safe_dump(doc))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(patch=st.dictionaries(st.sampled_from(KEYS), documents, max_size=4))
def test_mutations_of_a_valid_profile_load_or_fail_with_a_profile_error(tmp_path: Path, patch: dict) -> None:
    _check(tmp_path, yaml.safe_dump({**VALID, **patch}))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=80))
def test_arbitrary_text_loads_or_fails_with_a_profile_error(tmp_path: Path, text: str) -> None:
    _check(tmp_path, text)
