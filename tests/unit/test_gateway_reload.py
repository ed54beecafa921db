"""The gateway file and profile folders watched: good edits served without a restart, bad ones refused."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from servectl.adapters.gateway_admin import gateway_status
from servectl.gateway.config import GatewayConfig, load_gateway_config
from servectl.gateway.keys import create_key
from servectl.gateway.reload import ConfigWatcher
from servectl.gateway.routes import Upstream
from servectl.gateway.serve import alias_table
from servectl.standin.process import HostStandin, free_port
from servectl.testing.gateway import GatewayThread

DEMO_MODEL = str(Path(__file__).resolve().parents[2] / "examples" / "demo-model")


def _until(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.1)


def _watcher(file: Path, folder: Path) -> ConfigWatcher:
    def names() -> list[str]:
        return sorted(p.stem for p in folder.glob("*.yaml"))

    return ConfigWatcher(
        config_file=file,
        running=load_gateway_config(file, environ=os.environ),
        load=lambda: load_gateway_config(file, environ=os.environ),
        table_of=lambda c: alias_table(c, names),
        folders=lambda: [folder],
        clock=time.time,
    )


def test_an_edit_of_the_file_is_picked_up_and_a_bad_one_refused_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    file, folder = tmp_path / "gateway.yaml", tmp_path / "profiles"
    folder.mkdir()
    file.write_text("aliases: {chat: demo}\n")
    watch = _watcher(file, folder)
    assert watch.check() is None  # nothing changed
    file.write_text("aliases: {chat: demo, small: demo}\nswap: {hold_s: 5}\n")
    reloaded = watch.check()
    assert reloaded is not None and reloaded.table.names == ["chat", "small"] and reloaded.config.swap.hold_s == 5
    with caplog.at_level(logging.WARNING, logger="servectl.gateway"):
        file.write_text("aliases: {chat: demo}\nlimts: {}\n")
        assert watch.check() is None
        assert watch.check() is None  # the same bad file: said once
    assert watch.error == (f"{file}:2: an unknown key; did you mean 'limits'?; the running configuration is "
                           "kept (fix the file: servectl validate)")  # fmt: skip
    assert [r.getMessage() for r in caplog.records] == [f"configuration edit refused: {watch.error}"]
    assert watch.running.aliases == {"chat": ["demo"], "small": ["demo"]}  # still the last good one
    file.write_text("listen: 127.0.0.1:9999\naliases: {chat: demo}\n")
    assert watch.check() is None
    assert watch.error is not None and "listen changed, which needs a restart (servectl gateway down" in watch.error
    file.write_text("aliases: {chat: demo}\n")
    assert watch.check() is not None and watch.error is None and watch.reloaded_at is not None


def test_a_file_removed_or_unreadable_keeps_the_running_configuration(tmp_path: Path) -> None:
    file, folder = tmp_path / "gateway.yaml", tmp_path / "profiles"
    folder.mkdir()
    file.write_text("aliases: {chat: demo}\n")
    watch = _watcher(file, folder)
    file.unlink()
    assert watch.check() is None and watch.error is not None and "the gateway file is gone" in watch.error
    file.mkdir()
    assert watch.check() is None and watch.error is not None and "\n" not in watch.error


def test_a_new_profile_becomes_an_alias_when_the_file_names_none(tmp_path: Path) -> None:
    file, folder = tmp_path / "gateway.yaml", tmp_path / "profiles"
    folder.mkdir()
    (folder / "a.yaml").write_text("name: a\n")
    file.write_text("swap: {hold_s: 3}\n")
    watch = _watcher(file, folder)
    (folder / "b.yaml").write_text("name: b\n")
    reloaded = watch.check()
    assert reloaded is not None and reloaded.table.names == ["a", "b", "default"]


@pytest.fixture(scope="module")
def engine() -> Iterator[HostStandin]:
    flags = ["--model-path", DEMO_MODEL, "--served-model-name", "served-demo"]
    with HostStandin(flags, env={"STANDIN_TOKEN_RATE": "2000"}) as eng:
        eng.wait_ready()
        yield eng


def test_a_running_gateway_serves_a_new_alias_without_a_restart_and_reports_a_bad_edit(
    tmp_path: Path, engine: HostStandin
) -> None:
    file, folder = tmp_path / "gateway.yaml", tmp_path / "profiles"
    folder.mkdir()
    file.write_text(f"listen: 127.0.0.1:{free_port()}\naliases: {{chat: demo}}\n")
    config = load_gateway_config(file, environ=os.environ)
    key, _ = create_key(config.keys_path({"SERVECTL_HOME": str(tmp_path)}), name="all", clock=time.time)
    up = Upstream(profile="demo", url=engine.base_url, served_name="served-demo", ready=True)
    headers = {"Authorization": f"Bearer {key}"}
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    with GatewayThread(config, upstreams=lambda: [up], state_dir=tmp_path, watch=_watcher(file, folder)) as gw:

        def models() -> list[str]:
            return [m["id"] for m in httpx.get(gw.base_url + "/v1/models", headers=headers).json()["data"]]

        assert models() == ["chat"]
        new = file.with_name(".gateway.yaml.tmp")  # an editor's save: a new file renamed over the old
        new.write_text(file.read_text().replace("{chat: demo}", "{chat: demo, small: demo}"))
        os.replace(new, file)
        _until(lambda: models() == ["chat", "small"])
        answer = httpx.post(gw.base_url + "/v1/chat/completions", json={**body, "model": "small"}, headers=headers)
        assert answer.status_code == 200 and answer.json()["model"] == "small"
        file.write_text(file.read_text() + "aliases: {}\n")  # a duplicate key: not YAML the loader takes
        _until(lambda: ((gateway_status(tmp_path) or {}).get("config") or {}).get("error") is not None)
        live = gateway_status(tmp_path)
        assert live is not None and str(file) in live["config"]["error"] and "\n" not in live["config"]["error"]
        assert models() == ["chat", "small"]  # the running configuration kept


SECRET_LINES = "root:$6$saltsalt$c2VjcmV0aGFzaA:19000:0:99999:7:::\nOPENAI_API_KEY: sk-leakleakleakleakleak\n"


def _checked_within(watch: ConfigWatcher, timeout_s: float = 5.0) -> object:
    """``watch.check()`` in a thread: a reader blocked on a FIFO must not hold the test (or the gateway)."""
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        return pool.submit(watch.check).result(timeout=timeout_s)
    finally:
        pool.shutdown(wait=False)


def test_a_file_replaced_by_a_link_to_a_secret_is_refused_without_quoting_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    file, folder = tmp_path / "gateway.yaml", tmp_path / "profiles"
    folder.mkdir()
    file.write_text("aliases: {chat: demo}\n")
    watch = _watcher(file, folder)
    (tmp_path / "shadow").write_text(SECRET_LINES)
    file.unlink()
    file.symlink_to(tmp_path / "shadow")
    with caplog.at_level(logging.WARNING, logger="servectl.gateway"):
        assert watch.check() is None
    assert watch.error is not None and watch.error.startswith(f"{file}:1: an unknown key;")
    for shown in (watch.error, caplog.text):
        assert "saltsalt" not in shown and "sk-leak" not in shown and "OPENAI" not in shown and "99999" not in shown
    assert watch.running.aliases == {"chat": ["demo"]}


@pytest.mark.parametrize("damage", ["deleted", "dangling link", "link loop", "fifo", "dev-zero", "folder"])
def test_a_gateway_file_that_is_gone_or_no_regular_file_keeps_the_last_good_configuration(
    tmp_path: Path, damage: str
) -> None:
    file, folder = tmp_path / "gateway.yaml", tmp_path / "profiles"
    folder.mkdir()
    (folder / "demo.yaml").write_text("name: demo\n")
    (folder / "other.yaml").write_text("name: other\n")
    file.write_text("aliases: {chat: demo}\n")
    watch = _watcher(file, folder)
    file.unlink()
    if damage == "dangling link":
        file.symlink_to(tmp_path / "nowhere.yaml")
    elif damage == "link loop":
        file.symlink_to(file)
    elif damage == "fifo":
        os.mkfifo(file)
    elif damage == "dev-zero":
        file.symlink_to("/dev/zero")
    elif damage == "folder":
        file.mkdir()
    assert _checked_within(watch) is None  # nothing to serve: not the defaults (every profile an alias)
    said = {
        "deleted": "the gateway file is gone (deleted or moved); the running configuration is kept",
        "dangling link": "cannot read: No such file or directory",
        "link loop": "is a symbolic link loop",
        "fifo": "is a FIFO (named pipe), not a regular file",
        "dev-zero": "is a character device, not a regular file",
        "folder": "is a folder, not a regular file",
    }[damage]
    assert watch.error is not None and watch.error.startswith(f"{file}") and said in watch.error, watch.error
    assert watch.running.aliases == {"chat": ["demo"]}
    (folder / "third.yaml").write_text("name: third\n")  # a later change of the folders does not undo it
    assert _checked_within(watch) is None and watch.error is not None
    if file.is_dir() and not file.is_symlink():
        file.rmdir()
    elif os.path.lexists(file):
        file.unlink()
    file.write_text("aliases: {chat: demo, small: other}\n")  # a good file again is served
    reloaded = _checked_within(watch)
    assert reloaded is not None and watch.error is None
    assert watch.running.aliases == {"chat": ["demo"], "small": ["other"]}


def test_a_profile_named_default_takes_the_alias_and_says_the_built_in_one_is_not_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 39 (14): a profile default.yaml replaced the built-in ``default`` alias without a word."""
    with caplog.at_level(logging.WARNING, logger="servectl.gateway"):
        table = alias_table(GatewayConfig(), lambda: ["a", "default"])
        assert list(table.profiles("default")) == ["default"]
        assert [r.getMessage() for r in caplog.records] == [
            "profile default takes the alias default: the built-in default alias (any running service) is not "
            "served; rename the profile, or write aliases: in the gateway file"
        ]
        caplog.clear()
        table = alias_table(GatewayConfig(), lambda: ["a", "b"])
        assert list(table.profiles("default")) == ["*"] and caplog.records == []
