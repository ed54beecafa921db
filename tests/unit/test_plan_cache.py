"""The plan cache (servectl.adapters.plan_cache): a hit is the plan the compiler gives; any changed input is a miss.

Each test edits one input of a cached plan - the profile, a base it extends, the flag catalog file it reads
by content, an environment variable it references, a file that now shadows it on the search path, a module
of servectl - and expects the plan the compiler gives for the new inputs. A damaged entry is ignored and
rewritten.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from servectl.adapters import plan_cache as cache
from servectl.adapters.plan_cache import PlanCache
from servectl.errors import ProfileError
from servectl.plan.compile import LaunchPlan
from servectl.plan.resolve import resolve
from servectl.profile.catalog import CATALOG_DIR
from servectl.profile.loader import discover, search_path

WriteProfile = Callable[[str, str], Path]


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names compiled (cache misses) while the test runs."""
    seen: list[str] = []
    real = PlanCache.resolve

    def counting(self: PlanCache, name: str, *, keep_unset: bool = False) -> object:
        seen.append(name)
        return real(self, name, keep_unset=keep_unset)

    monkeypatch.setattr(PlanCache, "resolve", counting)
    yield seen


def _profile(name: str, *, port: int = 8180, extra: str = "") -> str:
    return (
        f"name: {name}\n"
        'image: {ref: "example/sglang:1"}\n'
        "model: {path: /models/m, served_name: m}\n"
        f"serve: {{port: {port}, role: bench}}\n" + extra
    )


def _cache() -> PlanCache:
    """The cache of this test's environment (its state folder is the test's own: conftest)."""
    return PlanCache(environ=os.environ)


def _plan(name: str, *, keep_unset: bool = False) -> LaunchPlan:
    return _cache().dry_run(name, keep_unset=keep_unset).plan


def test_a_second_lookup_compiles_nothing_and_gives_the_same_plan(
    write_profile: WriteProfile, compiles: list[str]
) -> None:
    write_profile("p", _profile("p"))
    first = _plan("p")
    second = _plan("p")
    assert compiles == ["p"]
    assert second == first == resolve("p", environ=os.environ).plan
    assert second.to_json() == first.to_json()
    assert _cache().plan_hash("p") == first.plan_hash and compiles == ["p"]


def test_editing_the_profile_gives_the_new_plan(write_profile: WriteProfile, compiles: list[str]) -> None:
    path = write_profile("p", _profile("p", port=8180))
    assert _plan("p").docker.labels["servectl.port"] == "8180"
    path.write_text(_profile("p", port=8181), encoding="utf-8")
    assert _plan("p").docker.labels["servectl.port"] == "8181"
    assert compiles == ["p", "p"]


def test_editing_a_base_the_profile_extends_gives_the_new_plan(write_profile: WriteProfile) -> None:
    base = write_profile("_base", "name: _base\nengine: {context_length: 4096}\n")
    write_profile("p", _profile("p", extra="extends: _base\n"))
    assert "4096" in _plan("p").engine_argv
    base.write_text("name: _base\nengine: {context_length: 8192}\n", encoding="utf-8")
    assert "8192" in _plan("p").engine_argv and "4096" not in _plan("p").engine_argv


def test_editing_the_catalog_file_it_reads_gives_the_new_plan(write_profile: WriteProfile, profile_dir: Path) -> None:
    """``engine.catalog: x.json`` is read by content: an abbreviated flag expands by what the file says."""
    shipped = json.loads((CATALOG_DIR / "sglang-0.5.23.json").read_text(encoding="utf-8"))

    def write_catalog(flag: str) -> None:
        option = {"flags": [flag], "dest": flag[2:].replace("-", "_"), "kind": "value", "type": "str"}
        document = {**shipped, "options": [*shipped["options"], option]}
        (profile_dir / "custom.json").write_text(json.dumps(document), encoding="utf-8")

    write_catalog("--zz-custom-alpha")
    write_profile("p", _profile("p", extra="engine: {catalog: custom.json, args: {zz-custom: x}}\n"))
    assert "--zz-custom-alpha" in _plan("p").engine_argv
    write_catalog("--zz-custom-beta")
    argv = _plan("p").engine_argv
    assert "--zz-custom-beta" in argv and "--zz-custom-alpha" not in argv


def test_another_catalog_folder_gives_the_plan_of_its_extracted_catalog(
    write_profile: WriteProfile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``engine.catalog: image`` is read from the environment's catalog folder: ``SERVECTL_CATALOG_CACHE`` naming
    another folder is a miss, even though the first folder did not change (issue 40)."""
    from servectl.profile.catalog_store import ImageSource, store_catalog

    shipped = json.loads((CATALOG_DIR / "sglang-0.5.23.json").read_text(encoding="utf-8"))
    for folder, flag in (("a", "--zz-custom-alpha"), ("b", "--zz-custom-beta")):
        option = {"flags": [flag], "dest": flag[2:].replace("-", "_"), "kind": "value", "type": "str"}
        image = ImageSource("sha256:" + "ab" * 32, refs=("example/sglang:1",))
        store_catalog({**shipped, "options": [*shipped["options"], option]}, image, directory=tmp_path / folder)
    write_profile("p", _profile("p", extra="engine: {catalog: image, args: {zz-custom: x}}\n"))
    monkeypatch.setenv("SERVECTL_CATALOG_CACHE", str(tmp_path / "a"))
    assert "--zz-custom-alpha" in _plan("p").engine_argv
    monkeypatch.setenv("SERVECTL_CATALOG_CACHE", str(tmp_path / "b"))
    argv = _plan("p").engine_argv
    assert "--zz-custom-beta" in argv and "--zz-custom-alpha" not in argv


def test_a_referenced_environment_variable_set_changed_or_unset_gives_the_new_plan(
    write_profile: WriteProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _profile("p").replace("path: /models/m", 'path: "${ZZ_MODEL_ROOT}/m"')
    write_profile("p", text)
    monkeypatch.setenv("ZZ_MODEL_ROOT", "/srv/a")
    assert _plan("p").docker.mounts[0].source == "/srv/a/m"
    monkeypatch.setenv("ZZ_MODEL_ROOT", "/srv/b")
    assert _plan("p").docker.mounts[0].source == "/srv/b/m"
    monkeypatch.delenv("ZZ_MODEL_ROOT")
    shown = _cache().dry_run("p", keep_unset=True)
    assert shown.plan.docker.mounts[0].source == "${ZZ_MODEL_ROOT}/m" and shown.unset == ("ZZ_MODEL_ROOT",)
    assert _cache().dry_run("p", keep_unset=True).unset == ("ZZ_MODEL_ROOT",)  # a hit says so too
    with pytest.raises(ProfileError, match="ZZ_MODEL_ROOT"):
        _plan("p")  # unset is an error for a plan to run, cached or not
    assert _cache().plan_hash("p") is None


def test_a_profile_of_the_same_name_earlier_on_the_search_path_wins_at_once(
    write_profile: WriteProfile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    later = tmp_path / "later"
    later.mkdir()
    (later / "p.yaml").write_text(_profile("p", port=8180), encoding="utf-8")
    monkeypatch.setenv("SERVECTL_PROFILES", str(later))
    assert _plan("p").url.endswith(":8180")
    write_profile("p", _profile("p", port=8190))  # ./profiles comes first
    assert _plan("p").url.endswith(":8190")


def test_a_changed_servectl_module_gives_a_fresh_compile(
    write_profile: WriteProfile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiles: list[str]
) -> None:
    module = tmp_path / "module.py"
    module.write_text("x = 1\n", encoding="utf-8")
    monkeypatch.setattr(cache, "_own_modules", lambda: iter([str(module)]))
    write_profile("p", _profile("p"))
    _plan("p")
    _plan("p")
    module.write_text("x = 22\n", encoding="utf-8")  # an upgrade or an edit: another size and time
    _plan("p")
    assert compiles == ["p", "p"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text[: len(text) // 2],  # cut short
        lambda text: "not json",
        lambda text: text.replace('"servectl.port":"8180"', '"servectl.port":"9999"'),  # the plan edited
        lambda text: json.dumps({**json.loads(text), "facts": []}),  # the facts dropped
    ],
)
def test_a_damaged_entry_is_ignored_and_rewritten(
    write_profile: WriteProfile, compiles: list[str], damage: Callable[[str], str]
) -> None:
    write_profile("p", _profile("p"))
    good = _plan("p")
    (entry,) = _cache().folder.glob("*.json")
    original = entry.read_text(encoding="utf-8")
    entry.write_text(damage(original), encoding="utf-8")
    assert _plan("p") == good
    assert compiles == ["p", "p"]
    assert json.loads(entry.read_text(encoding="utf-8")) == json.loads(original)  # rewritten
    assert _plan("p") == good and compiles == ["p", "p"]


def test_a_profile_that_does_not_load_is_never_cached(write_profile: WriteProfile) -> None:
    write_profile("p", _profile("p", extra="engine: {tp: 0}\n"))
    for _ in range(2):
        with pytest.raises(ProfileError):
            _plan("p")
    assert not list(_cache().folder.glob("*.json"))


def test_a_state_folder_that_cannot_be_written_only_means_no_cache(
    write_profile: WriteProfile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("", encoding="utf-8")
    monkeypatch.setenv("SERVECTL_HOME", str(blocker))
    write_profile("p", _profile("p"))
    assert _plan("p") == resolve("p", environ=os.environ).plan


def test_the_off_switch_compiles_every_time(
    write_profile: WriteProfile, compiles: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cache.OFF_VARIABLE, "1")
    write_profile("p", _profile("p"))
    _plan("p")
    _plan("p")
    assert compiles == ["p", "p"] and not _cache().folder.exists()


def test_every_shipped_plan_survives_the_round_trip_through_json() -> None:
    checked = 0
    for name, file in discover(folders=search_path(environ=os.environ)).items():
        if file.is_base or "template:" in file.path.read_text(encoding="utf-8"):
            continue
        plan = resolve(name, keep_unset=True, environ=os.environ).plan
        again = LaunchPlan.from_dict(json.loads(plan.to_json()))
        assert again == plan and again.to_json() == plan.to_json(), name
        checked += 1
    assert checked >= 4


def test_entries_live_under_the_state_folder(profile_dir: Path, write_profile: WriteProfile) -> None:
    write_profile("p", _profile("p"))
    _plan("p")
    (entry,) = _cache().folder.glob("*.json")
    assert entry.is_relative_to(Path(os.environ["SERVECTL_HOME"]))


def test_no_profile_of_that_name_is_remembered_until_one_appears(
    write_profile: WriteProfile, compiles: list[str]
) -> None:
    """``status`` lists containers whose profile is on no search path here (started from another folder)."""
    assert _cache().plan_hash("elsewhere") is None
    assert _cache().plan_hash("elsewhere") is None
    assert compiles == []  # no file could be it: nothing to compile
    assert len(list(_cache().folder.glob("*.json"))) == 1  # its absence, remembered
    write_profile("elsewhere", _profile("elsewhere"))
    assert _cache().plan_hash("elsewhere") == resolve("elsewhere", environ=os.environ).plan.plan_hash


def test_status_drift_follows_an_edit_of_the_running_profile(write_profile: WriteProfile) -> None:
    current_plan_hash = PlanCache(environ=os.environ).plan_hash  # what status's drift column asks

    path = write_profile("p", _profile("p", port=8180))
    started = current_plan_hash("p")
    assert started == resolve("p", environ=os.environ).plan.plan_hash == current_plan_hash("p")
    path.write_text(_profile("p", port=8181), encoding="utf-8")
    assert current_plan_hash("p") == resolve("p", environ=os.environ).plan.plan_hash != started


def test_a_hit_prints_what_the_compiler_prints_for_every_shipped_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiles: list[str]
) -> None:
    from servectl.plan.script import dry_run_text

    monkeypatch.setenv("SERVECTL_HOME", str(tmp_path / "home"))
    names = [
        n
        for n, f in discover(folders=search_path(environ=os.environ)).items()
        if not f.is_base and "template:" not in f.path.read_text("utf-8")
    ]
    for name in names:
        plan = resolve(name, keep_unset=True, environ=os.environ).plan
        miss, hit = _cache().dry_run(name, keep_unset=True), _cache().dry_run(name, keep_unset=True)
        assert hit.resolved is None and miss.resolved is not None
        for shown in (miss, hit):
            assert shown.script == dry_run_text(plan) and shown.to_json() == plan.to_json(), name
            assert shown.plan == plan
    assert compiles == names


def test_a_moment_observes_each_shared_input_once_and_answers_as_the_cache_does(
    write_profile: WriteProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``status`` asks one moment for every service's plan hash: the base, catalog and modules they share are
    read once, not once per profile; a later edit is seen by the next moment, never by this one."""
    base = write_profile("_base", "name: _base\nengine: {context_length: 4096}\n")
    for name in ("p1", "p2", "p3"):
        write_profile(name, _profile(name, extra="extends: _base\n"))
    expected = {name: _cache().plan_hash(name) for name in ("p1", "p2", "p3")}  # compiled and cached
    seen: list[tuple[str, str]] = []
    real = cache._observe

    def counting(kind: str, subject: str, environ: cache.Environ) -> object:
        seen.append((kind, subject))
        return real(kind, subject, environ)

    monkeypatch.setattr(cache, "_observe", counting)
    moment = _cache().moment()
    assert {name: moment.plan_hash(name) for name in expected} == expected
    assert len(seen) == len(set(seen)) and ("file", str(base)) in seen  # each fact once, the base among them
    seen.clear()
    assert {name: _cache().plan_hash(name) for name in expected} == expected  # the cache itself: once per entry
    assert seen.count(("file", str(base))) == 3
    base.write_text("name: _base\nengine: {context_length: 8192}\n", encoding="utf-8")
    assert moment.plan_hash("p1") == expected["p1"]  # this moment saw the old base
    assert _cache().moment().plan_hash("p1") not in (None, expected["p1"])  # a new one sees the edit
