"""The gateway file, its schema, the key file and `gateway keys`, and the pure routing and rate rules."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servectl.errors import ProfileError, UsageError
from servectl.gateway.config import (
    GATEWAY_SCHEMA_FILE,
    GatewayConfig,
    default_aliases,
    gateway_json_schema,
    load_gateway_config,
)
from servectl.gateway.keys import KEY_PREFIX, KeyRing, create_key, digest, parse_duration, read_keys, revoke_key
from servectl.gateway.ratelimit import RateLimiter
from servectl.gateway.routes import AliasTable, Upstream
from servectl.profile.loader import search_path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "gateway.yaml"


def servectl(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "SERVECTL_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "servectl", *args], capture_output=True, text=True, env=env,
                          check=False, cwd=home)  # fmt: skip


def load_error(path: Path, text: str) -> str:
    """The ProfileError that loading a gateway file of ``text`` at ``path`` raises, its folder left out."""
    path.write_text(text)
    with pytest.raises(ProfileError) as err:
        load_gateway_config(path, environ=os.environ)
    return str(err.value).replace(str(path.parent) + "/", "")


def test_the_shipped_schema_is_current_and_the_example_validates_against_it() -> None:
    import jsonschema
    import yaml

    assert json.loads(GATEWAY_SCHEMA_FILE.read_text()) == gateway_json_schema(), "regenerate gateway.schema.json"
    assert EXAMPLE.read_text().splitlines()[0] == "# yaml-language-server: $schema=../schema/gateway.schema.json"
    jsonschema.validate(yaml.safe_load(EXAMPLE.read_text()), gateway_json_schema())
    config = load_gateway_config(EXAMPLE, environ=os.environ)
    assert config.aliases == {"chat": ["demo", "demo-rollback"], "default": ["*"]}
    assert (config.host, config.port) == ("127.0.0.1", 8080)


def test_no_file_means_the_defaults_and_every_profile_is_an_alias_of_itself(tmp_path: Path) -> None:
    config = load_gateway_config(environ={"SERVECTL_HOME": str(tmp_path)})
    assert config == GatewayConfig()
    assert config.listen == "127.0.0.1:8080" and config.auth == "keys" and config.response_model == "alias"
    assert default_aliases(["b", "a"]) == {"a": ["a"], "b": ["b"], "default": ["*"]}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("listen: localhost\n", "gw.yaml:1: listen: the value: not HOST:PORT (e.g. 127.0.0.1:8080)"),
        ("swap:\n  drain: 3\n", "gw.yaml:2: swap: an unknown key; did you mean 'drain_s'?"),
        ("limits:\n  max_body_bytes: 10\n", "gw.yaml:2: limits.max_body_bytes: Input should be greater than"),
        ("aliases:\n  chat: []\n", "gw.yaml:1: aliases: alias 'chat': name at least one profile"),
        ("response_model: engine\n", "gw.yaml:1: response_model: Input should be 'alias' or 'served'"),
    ],
)
def test_a_bad_gateway_file_names_file_line_and_field(tmp_path: Path, text: str, expected: str) -> None:
    assert load_error(tmp_path / "gw.yaml", text).startswith(expected)


def test_servectl_validate_covers_the_gateway_file(tmp_path: Path) -> None:
    config_dir = tmp_path / "profiles"
    config_dir.mkdir()
    (tmp_path / "gateway.yaml").write_text("listen: 127.0.0.1:8080\nlimts: {}\n")
    result = servectl("validate", home=tmp_path)
    assert result.returncode == 2
    assert "invalid gateway" in result.stdout
    assert "gateway.yaml:2: an unknown key; did you mean 'limits'?" in result.stderr
    (tmp_path / "gateway.yaml").write_text("listen: 127.0.0.1:8080\n")
    result = servectl("validate", home=tmp_path)
    assert f"ok      gateway {tmp_path / 'gateway.yaml'}" in result.stdout


def test_keys_create_prints_the_key_alone_and_stores_only_its_digest(tmp_path: Path) -> None:
    # no gateway file: each profile is an alias of itself, so `chat` is none of the gateway's (issue 44)
    refused = servectl("gateway", "keys", "create", "laptop", "--alias", "chat", home=tmp_path)
    assert refused.returncode == 2 and refused.stdout == "" and refused.stderr.count("\n") == 1, refused.stderr
    assert "--aliases: chat not in the gateway's aliases (default, demo, demo-rollback, " in refused.stderr
    assert f"the gateway file {tmp_path / 'gateway.yaml'} does not exist" in refused.stderr
    assert not (tmp_path / "gateway" / "keys.json").exists()
    written = servectl("gateway", "init", home=tmp_path)
    assert written.returncode == 0 and f"wrote {tmp_path / 'gateway.yaml'}" in written.stdout, written.stderr
    result = servectl("gateway", "keys", "create", "laptop", "--alias", "chat", "--expires", "30d", home=tmp_path)
    assert result.returncode == 0, result.stderr
    key = result.stdout.strip()
    assert result.stdout == key + "\n" and key.startswith(KEY_PREFIX)
    assert "key 'laptop' for chat; expires" in result.stderr and key not in result.stderr
    path = tmp_path / "gateway" / "keys.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert key not in path.read_text()
    (entry,) = read_keys(path)
    assert entry.sha256 == digest(key) and entry.aliases == ("chat",)
    assert entry.expires_at is not None and abs(entry.expires_at - entry.created_at - 30 * 86400) < 1
    listed = servectl("gateway", "keys", "list", home=tmp_path)
    assert listed.stdout.startswith("laptop") and key not in listed.stdout
    again = servectl("gateway", "keys", "create", "laptop", home=tmp_path)
    assert again.returncode == 2 and "a key named 'laptop' exists" in again.stderr and again.stdout == ""


def test_a_revoked_key_stops_counting_at_the_next_reread(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    ring = KeyRing(path, recheck_s=0, clock=time.time)
    key, _ = create_key(path, name="a", clock=time.time)
    other, _ = create_key(path, name="b", clock=time.time)
    assert ring.check(key) is not None and ring.check(other) is not None
    assert ring.check(key[:-1]) is None
    revoke_key(path, name="a")
    assert ring.check(key) is None and ring.check(other) is not None
    with pytest.raises(UsageError, match="no key named 'a'"):
        revoke_key(path, name="a")


def test_a_key_made_a_moment_ago_is_honoured_on_its_first_request(tmp_path: Path) -> None:
    """The ring re-reads at most every ``recheck_s`` on hits; an unknown key makes it look at the file at once."""
    path = tmp_path / "keys.json"
    first, _ = create_key(path, name="a", clock=time.time)
    ring = KeyRing(path, recheck_s=3600, clock=time.time)
    assert ring.check(first) is not None  # read now; the next scheduled re-read is an hour away
    fresh, _ = create_key(path, name="b", clock=time.time)
    assert ring.check(fresh) is not None
    assert ring.check(fresh[:-1]) is None and ring.check(first) is not None


def test_a_damaged_key_file_keeps_the_last_good_keys_and_says_why(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    ring = KeyRing(path, recheck_s=0, clock=time.time)
    key, _ = create_key(path, name="a", clock=time.time)
    assert ring.check(key) is not None
    path.write_text("{not json")
    assert ring.check(key) is not None
    assert ring.error is not None and "not valid JSON" in ring.error


@pytest.mark.parametrize(("text", "seconds"), [("30d", 30 * 86400), ("12h", 43200), ("8w", 8 * 7 * 86400)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["30", "0d", "1y", "-1d", ""])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(UsageError, match="--expires"):
        parse_duration(text)


def test_an_alias_goes_to_the_first_of_its_profiles_that_is_ready() -> None:
    table = AliasTable({"chat": ["a", "b"], "default": ["*"]})
    a = Upstream(profile="a", url="http://127.0.0.1:1", served_name="A", ready=False)
    b = Upstream(profile="b", url="http://127.0.0.1:2", served_name="B", ready=True)
    route = table.route("chat", [a, b])
    assert route is not None and (route.profile, route.url, route.served_name) == ("b", "http://127.0.0.1:2", "B")
    assert table.route("chat", [a]) is None
    default = table.route("default", [a, b])
    assert default is not None and default.profile == "b"
    assert table.affected("chat", ["b"]) and not table.affected("chat", ["c"]) and table.affected("default", ["c"])


def test_the_rate_limit_allows_a_minute_of_burst_then_one_per_interval() -> None:
    now = [0.0]
    limiter = RateLimiter(clock=lambda: now[0])
    assert [limiter.take("k", 3) for _ in range(4)] == [0, 0, 0, 20]
    now[0] = 19.0
    assert limiter.take("k", 3) == 1
    now[0] = 20.0
    assert limiter.take("k", 3) == 0
    assert limiter.take("other", 3) == 0


def test_the_gateway_container_sees_the_state_profiles_and_file_at_the_hosts_paths(tmp_path: Path) -> None:
    from servectl.gateway.container import CONFIG_DIR_IN_CONTAINER, gateway_spec

    home, profiles = tmp_path / "home", tmp_path / "profiles"
    profiles.mkdir()
    (tmp_path / "gw.yaml").write_text("listen: 127.0.0.1:9000\nswap: {drain_s: 10}\n")
    tmp_path.chmod(0o755)  # a root-owned state runs the gateway as 65532, which reads the file's folder
    env = {"SERVECTL_HOME": str(home), "SERVECTL_PROFILES": str(profiles)}
    spec = gateway_spec(image="img:1", config_file=tmp_path / "gw.yaml", environ=env, scope={"t": "1"})
    mounts = {(m.source, m.target, m.read_only) for m in spec.mounts}
    assert (str(home), str(home), False) in mounts  # keys, admin socket, history: the host's own files
    assert (str(tmp_path), CONFIG_DIR_IN_CONTAINER, True) in mounts  # the folder: a save by rename is seen
    assert ("/var/run/docker.sock", "/var/run/docker.sock", False) in mounts
    assert spec.command == ("gateway", "run", "--config", f"{CONFIG_DIR_IN_CONTAINER}/gw.yaml")
    assert (str(profiles), str(profiles), True) in mounts
    assert dict(spec.environment)["SERVECTL_HOME"] == str(home)
    assert dict(spec.environment)["SERVECTL_PROFILES"] == str(profiles)
    assert (spec.network_mode, spec.restart_policy, spec.device_ids) == ("host", "unless-stopped", ())
    assert spec.labels["servectl.gateway"] == "1" and spec.labels["t"] == "1"
    assert "servectl.managed" not in spec.labels  # not a service: status lists it apart
    assert spec.stop_timeout_s == 15


def test_keys_created_at_once_all_land(tmp_path: Path) -> None:
    import threading

    path = tmp_path / "keys.json"
    workers = [
        threading.Thread(target=create_key, args=(path,), kwargs={"name": f"k{i}", "clock": time.time})
        for i in range(8)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(e.name for e in read_keys(path)) == [f"k{i}" for i in range(8)]


def test_templates_and_bases_are_no_default_aliases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from servectl.gateway.serve import profile_names

    (tmp_path / "mine.yaml").write_text("name: mine\nextends: demo\n")
    (tmp_path / "_base.yaml").write_text("name: _base\n")
    (tmp_path / "todo.yaml").write_text("template: fill me in with servectl adopt\n")
    monkeypatch.setenv("SERVECTL_PROFILES", str(tmp_path))
    monkeypatch.setenv("SERVECTL_HOME", str(tmp_path / "home"))
    names = profile_names(search_path(environ=os.environ))
    assert "mine" in names and "demo" in names
    assert "_base" not in names and "todo" not in names


def test_endpoints_route_to_fixed_addresses_and_read_the_engine_key_per_listing(tmp_path: Path) -> None:
    from servectl.gateway.serve import alias_table, fixed_upstreams

    key = tmp_path / "api-key"
    key.write_text("sk-engine-1\n")
    config = GatewayConfig.model_validate(
        {"endpoints": {"demo": {"url": "http://demo:8190/", "served_model_name": "m", "api_key_file": str(key)}}}
    )
    assert config.endpoints is not None
    listing = fixed_upstreams(config.endpoints)
    (up,) = listing()
    assert (up.profile, up.url, up.served_name, up.ready, up.api_key) == (
        "demo",
        "http://demo:8190",
        "m",
        True,
        "sk-engine-1",
    )
    key.write_text("sk-engine-2")  # rotated: the next listing sends the new key
    assert listing()[0].api_key == "sk-engine-2"
    table = alias_table(config, lambda: ["other-profile-on-this-host"])  # no aliases: the endpoints' profiles
    assert table.names == ["default", "demo"]
    route = table.route("demo", listing())
    assert route is not None and route.url == "http://demo:8190"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("endpoints: {demo: {url: demo:8190}}\n", "endpoints.demo.url"),
        ("endpoints: {demo: {url: 'http://'}}\n", "write a base URL"),
        ("endpoints: {demo: {url: 'http://d:1'}}\naliases: {a: demo}\nswap: {on_request: [a]}\n", "drop endpoints"),
    ],
)
def test_bad_endpoints_are_refused_with_the_field(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in load_error(tmp_path / "gateway.yaml", text)
