"""Profiles are untrusted input: bounded parsing, every decoding error one line, sane numeric bounds."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servectl.errors import ProfileError
from servectl.plan.inventory import list_profiles, validate_profiles
from servectl.profile import loader, yaml_locations
from servectl.profile.loader import search_path
from servectl.profile.validate import load_profile

Write = Callable[[str, str], Path]
Minimal = Callable[[str], str]

ALIAS_BOMB = "name: bomb\na: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)


def only_problem(name: str) -> str:
    with pytest.raises(ProfileError) as info:
        load_profile(name, folders=search_path(environ=os.environ))
    lines = info.value.lines()
    assert len(lines) == 1, lines
    return lines[0]


def test_alias_bomb_is_refused_before_it_is_expanded(write_profile: Write) -> None:
    write_profile("bomb", ALIAS_BOMB)  # 542 bytes, 9**9 values once expanded
    started = time.process_time()
    line = only_problem("bomb")
    assert time.process_time() - started < 0.5  # expanding it would take minutes
    assert line.startswith("profiles/bomb.yaml: more than 1,000,000 values after expanding aliases")


def test_merge_key_bomb_is_refused(write_profile: Write) -> None:
    doubling = "".join(f"a{i}: &a{i} {{<<: [*a{i - 1}, *a{i - 1}]}}\n" for i in range(1, 40))
    write_profile("merge", "name: merge\na0: &a0 {k: 1, j: 2}\n" + doubling)
    assert "values after expanding aliases" in only_problem("merge")


def test_recursive_alias_is_refused(write_profile: Write) -> None:
    write_profile("cyc", "name: cyc\na: &a [1, *a]\n")
    assert only_problem("cyc") == "profiles/cyc.yaml:2: an alias refers to a value that contains it"


@pytest.mark.parametrize("opener", ["[", "- ", "{a: "])
def test_deep_nesting_is_refused_without_crashing_the_parser(write_profile: Write, opener: str) -> None:
    closer = {"[": "]", "- ": "", "{a: ": "}"}[opener]
    write_profile("deep", "name: deep\nx:\n  " + opener * 50_000 + "1" + closer * 50_000 + "\n")
    line = only_problem("deep")
    assert line.startswith("profiles/deep.yaml:") and "nested deeper than 64 levels" in line


def test_binary_file_is_one_line_naming_the_file(write_profile: Write, profile_dir: Path) -> None:
    (profile_dir / "bin.yaml").write_bytes(b"name: bin\n\xff\xfe\x00garbage")
    assert only_problem("bin") == "profiles/bin.yaml:2: not UTF-8 text (byte 10); a profile is a YAML text file"


def test_control_characters_in_the_text_are_one_line(write_profile: Write, profile_dir: Path) -> None:
    (profile_dir / "ctl.yaml").write_bytes(b"name: ctl\nx: \x07\n")
    assert only_problem("ctl").startswith("profiles/ctl.yaml: YAML: ")


def test_oversized_file_is_refused_with_the_limit(
    write_profile: Write, profile_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(yaml_locations, "MAX_PROFILE_BYTES", 1024)
    (profile_dir / "huge.yaml").write_text("name: huge\n" + "# padding\n" * 200)
    line = only_problem("huge")
    assert line.startswith("profiles/huge.yaml: is larger than ") and "check the path" in line


def test_a_file_that_takes_longer_than_the_read_budget_is_one_line(
    write_profile: Write, minimal: Minimal, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every file is over it: the check runs, the message is one line
    monkeypatch.setattr(yaml_locations, "READ_BUDGET_S", -1.0)
    write_profile("p", minimal("p"))
    line = only_problem("p")
    assert line.startswith("profiles/p.yaml: took more than -1 s to read (") and "split it" in line


def test_a_slow_file_on_the_search_path_affects_only_its_own_row(
    write_profile: Write, minimal: Minimal, profile_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loader, "SHIPPED_PROFILES_DIR", profile_dir / "none")
    # a small file reads in milliseconds; this one in seconds
    monkeypatch.setattr(yaml_locations, "READ_BUDGET_S", 0.25)
    write_profile("good", minimal("good"))
    write_profile("slow", minimal("slow") + "engine:\n  env:\n" + "".join(f"    K{i}: v{i}\n" for i in range(150_000)))
    results = validate_profiles(None, folders=search_path(environ=os.environ))
    assert results["good"] is None
    assert "took more than 0.25 s to read" in str(results["slow"])


def test_merge_is_linear_in_the_number_of_keys(write_profile: Write, minimal: Minimal) -> None:
    """Quadratic merge took 11 s for 8,000 keys; the benchmark times 80,000 (bench_hostile_profiles.py)."""

    def env(n: int, value: str) -> str:
        return "engine:\n  env:\n" + "".join(f"    K{i}: {value}{i}\n" for i in range(n))

    write_profile("_base", "name: _base\n" + env(20_000, "b"))
    write_profile("p", minimal("p") + "extends: _base\n" + env(20_000, "v"))
    loaded = load_profile("p", folders=search_path(environ=os.environ))
    assert len(loaded.profile.engine.env) == 20_000
    assert loaded.profile.engine.env["K7"] == "v7"
    assert loaded.location(("engine", "env", "K7")) == (Path.cwd() / "profiles/p.yaml", 15)


def test_merge_keeps_locations_of_the_winning_value(write_profile: Write, minimal: Minimal) -> None:
    flag = "disable-shared-experts-fusion"
    write_profile("_base", f"name: _base\nengine:\n  args: {{{flag}: [1, 2, 3]}}\n  tp: 1\n")
    write_profile("p", minimal("p") + f"extends: _base\nengine:\n  args:\n    {flag}: true\n")
    loaded = load_profile("p", folders=search_path(environ=os.environ))
    assert loaded.profile.engine.args == {flag: True}
    assert ("engine", "args", flag, 0) not in loaded.locations  # the base's list items are gone
    assert loaded.location(("engine", "args", flag))[1] == 8
    assert loaded.location(("engine", "tp"))[0].name == "_base.yaml"


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ("container: {stop_grace_s: 1.0e+20}\n", "container.stop_grace_s", ""),
        ("container: {stop_grace_s: 7200}\n", "container.stop_grace_s", "less than or equal to 3600"),
        ("health: {startup_timeout_s: .inf}\n", "health.startup_timeout_s", "finite number"),
        ("health: {stall_timeout_s: .nan}\n", "health.stall_timeout_s", "finite number"),
        ("engine: {max_running_requests: 1.2e+29}\n", "engine.max_running_requests", ""),
        ("engine: {max_running_requests: 3000000000}\n", "engine.max_running_requests", "2147483647"),
        ("engine: {context_length: 99999999999}\n", "engine.context_length", "2147483647"),
        ("engine: {tp: 5000}\n", "engine.tp", "1024"),
        ("gpus: {devices: [4096]}\n", "gpus.devices[0]", "1023"),
        ("engine: {args: {max-prefill-tokens: 99999999999999999999999}}\n", "engine.args", "64-bit"),
        ("engine: {args: {x: .inf}}\n", "engine.args.x", "finite"),
    ],
)
def test_numbers_docker_or_sglang_cannot_take_are_refused(
    write_profile: Write, minimal: Minimal, extra: str, field: str, message: str
) -> None:
    write_profile("p", minimal("p") + extra)
    with pytest.raises(ProfileError) as info:
        load_profile("p", folders=search_path(environ=os.environ))
    assert any(f": {field}: " in line and message in line for line in info.value.lines()), info.value.lines()


@pytest.mark.parametrize(
    "extra",
    [
        'model: {path: /models/m, served_name: "a\\0b"}\n',
        'model: {path: /models/m, served_name: "a\\nb"}\n',
        'image: {ref: "example/sglang:1\\r"}\n',
        'engine: {args: {tool-call-parser: "glm\\x1b[2J"}}\n',
        'engine: {env: {A: "x\\0y"}}\n',
        'container: {mounts: [{source: "/a\\tb", target: /x}]}\n',
    ],
)
def test_control_characters_in_argv_strings_are_refused(write_profile: Write, minimal: Minimal, extra: str) -> None:
    text = minimal("p")
    key = extra.split(":")[0]
    text = "\n".join(line for line in text.splitlines() if not line.startswith(f"{key}:")) + "\n" + extra
    write_profile("p", text)
    with pytest.raises(ProfileError) as info:
        load_profile("p", folders=search_path(environ=os.environ))
    assert any("control character" in line for line in info.value.lines()), info.value.lines()
    assert all("\n" not in line and "\0" not in line for line in info.value.lines())


def test_description_may_span_lines(write_profile: Write, minimal: Minimal) -> None:
    write_profile("p", minimal("p") + "description: |\n  first line\n  second line\n")
    assert load_profile("p", folders=search_path(environ=os.environ)).profile.description == "first line\nsecond line\n"


def test_broken_files_affect_only_their_own_rows(
    write_profile: Write, minimal: Minimal, profile_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loader, "SHIPPED_PROFILES_DIR", profile_dir / "none")
    write_profile("good", minimal("good"))
    write_profile("bomb", ALIAS_BOMB)
    (profile_dir / "bin.yaml").write_bytes(b"\xff\xfe" * 100)
    write_profile("deep", "name: deep\nx: " + "[" * 100_000 + "]" * 100_000 + "\n")
    results = validate_profiles(None, folders=search_path(environ=os.environ))
    assert results["good"] is None
    assert {n for n, e in results.items() if e is not None} == {"bomb", "bin", "deep"}
    rows = {r.name: r for r in list_profiles(environ=os.environ)}
    assert rows["good"].error is None and rows["good"].port == 8180
    assert all(rows[n].error for n in ("bomb", "bin", "deep"))


@pytest.mark.parametrize(
    ("text", "deepest"),
    [
        ("a: 1\n", 1),
        ("a:\n  b:\n    c: 1\n", 3),
        ("a:\n- b:\n  - c: 1\n", 4),
        ("a: [[[1]]]\n", 4),
        ("- - - - 1\n", 4),
        ("a: {b: {c: [1, {d: 2}]}}\n", 5),
    ],
)
def test_the_text_bound_on_nesting_is_never_below_the_real_depth(text: str, deepest: int) -> None:
    """The loader skips its event pass when this bound is at most 64; it must never undercount."""
    assert yaml_locations._nesting_bound(text) >= deepest


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


_NESTED = st.recursive(
    st.integers(0, 9) | st.text("ab", max_size=2),
    lambda inner: (
        st.lists(inner, min_size=1, max_size=3)
        | st.dictionaries(st.text("kxyz", min_size=1, max_size=3), inner, min_size=1, max_size=3)
    ),
    max_leaves=30,
)


@given(
    value=st.dictionaries(st.sampled_from(["a", "b"]), _NESTED, min_size=1), flow=st.sampled_from([None, True, False])
)
@settings(max_examples=300, deadline=None)
def test_the_bound_holds_for_any_document_pyyaml_writes(value: dict[str, object], flow: bool | None) -> None:
    import yaml

    text = yaml.safe_dump(value, default_flow_style=flow, indent=2)
    assert yaml_locations._nesting_bound(text) >= _depth(value), text


def test_special_files_named_yaml_are_refused_at_once_and_fail_only_their_own_rows(
    write_profile: Write, minimal: Minimal, profile_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FIFO, socket, device, folder or link loop named *.yaml never blocks a command (issue 25)."""
    import os
    import socket
    import threading

    from servectl.service.adopted import adopted_profiles

    monkeypatch.setattr(loader, "SHIPPED_PROFILES_DIR", profile_dir / "none")
    write_profile("good", minimal("good"))
    os.mkfifo(profile_dir / "fifo.yaml")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(profile_dir / "sock.yaml"))
    (profile_dir / "zero.yaml").symlink_to("/dev/zero")
    (profile_dir / "dir.yaml").mkdir()
    (profile_dir / "loop.yaml").symlink_to(profile_dir / "loop.yaml")
    # not UTF-8 and mentions "adopted": the adopted-profile scan used to die on it with a traceback
    (profile_dir / "cafe.yaml").write_bytes(minimal("cafe").encode() + b"description: caf\xe9 (adopted)\n")
    done: dict[str, object] = {}

    def run() -> None:
        done["validate"] = validate_profiles(None, folders=search_path(environ=os.environ))
        done["rows"] = {r.name: r for r in list_profiles(environ=os.environ)}
        done["adopted"] = adopted_profiles(environ=os.environ)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=20)
    server.close()
    assert not worker.is_alive(), "a special file on the search path blocked validate/profiles/status"
    results = done["validate"]
    assert isinstance(results, dict) and results["good"] is None
    reasons = {n: str(e) for n, e in results.items() if e is not None}
    assert reasons.keys() == {"fifo", "sock", "zero", "dir", "loop", "cafe"}
    assert "fifo.yaml: is a FIFO (named pipe), not a regular file" in reasons["fifo"]
    assert "sock.yaml: is a socket" in reasons["sock"] and "zero.yaml: is a character device" in reasons["zero"]
    assert "dir.yaml: is a folder" in reasons["dir"] and "loop.yaml: is a symbolic link loop" in reasons["loop"]
    assert "cafe.yaml" in reasons["cafe"] and "not UTF-8" in reasons["cafe"]
    assert done["adopted"] == []
