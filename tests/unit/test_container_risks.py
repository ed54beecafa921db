"""Issue 39 (2): dangerous container settings, in any profile (validate) and in a recipe (adopt --recipe).

Each one is a validate warning or error with its reason; a recipe's setting is carried into the profile with
its problem line, or - when a profile cannot carry it - the recipe is refused in one line. Never dropped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servectl.errors import ProfileError
from servectl.plan.adopt import AdoptError, adopt_recipe, read_recipe
from servectl.plan.inventory import validations
from servectl.profile.container_risks import UNCARRIED
from servectl.profile.loader import ProfileFolder, ProfileSearch, search_path
from servectl.profile.validate import load_profile
from servectl.service.adopt import AdoptOptions, adopt

SEED = Path(__file__).resolve().parents[2] / "examples" / "registry" / "glm53-flash-exl3-q4-rtxpro6000-sglang-tp4.json"
FILE = "r.json"


def seed() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SEED.read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize(
    ("extra", "field", "reason"),
    [
        ("serve: {port: 8180, role: bench, network: host}", "serve.network", "host network"),
        ("container: {ipc: host}", "container.ipc", "host IPC"),
        ("engine: {env: {LD_PRELOAD: /tmp/x.so}}", "engine.env.LD_PRELOAD", "load that code before the engine"),
        ("engine: {env: {LD_AUDIT: /tmp/a.so}}", "engine.env.LD_AUDIT", "load that code before the engine"),
    ],
)
def test_a_risky_setting_is_a_validate_warning_with_its_reason(
    write_profile: Callable[[str, str], Path], minimal: Callable[[str], str], extra: str, field: str, reason: str
) -> None:
    text = minimal("p").replace("serve: {port: 8180, role: bench}\n", "") + extra + "\n"
    if not extra.startswith("serve"):
        text += "serve: {port: 8180, role: bench}\n"
    write_profile("p", text)
    [result] = validations(["p"], folders=search_path(environ=os.environ))
    assert result.error is None
    assert [(w.rule, w.field) for w in result.warnings] == [("container.risk", field)]
    assert reason in result.warnings[0].message


@pytest.mark.parametrize(
    ("mount", "said"),
    [
        ("{source: /var/run/docker.sock, target: /var/run/docker.sock, read_only: true}", "Docker engine's socket"),
        ("{source: /run/docker.sock, target: /d.sock}", "Docker engine's socket"),
        ("{source: /, target: /host}", "writable mount of / (in /"),
        ("{source: /etc, target: /host-etc}", "writable mount of /etc (in /etc"),
        ("{source: /etc/../usr/lib, target: /x}", "(in /usr"),
        ("{source: /var/lib/docker, target: /x}", "(in /var/lib/docker"),
    ],
)
def test_the_docker_socket_or_a_writable_system_folder_is_a_validate_error(
    write_profile: Callable[[str, str], Path], minimal: Callable[[str], str], mount: str, said: str
) -> None:
    write_profile("p", minimal("p") + f"container: {{mounts: [{mount}]}}\n")
    with pytest.raises(ProfileError) as err:
        load_profile("p", folders=search_path(environ=os.environ))
    [problem] = err.value.problems
    assert (problem.rule, problem.field) == ("container.escape", "container.mounts[0]")
    assert said in problem.message and "\n" not in problem.message


def test_read_only_system_folders_and_ordinary_mounts_are_fine(
    write_profile: Callable[[str, str], Path], minimal: Callable[[str], str]
) -> None:
    mounts = (
        "[{source: /etc/ssl/certs, target: /etc/ssl/certs, read_only: true}, {source: /srv/cache, target: /etc},"
        " {source: /var/lib/docker/volumes/scratch/_data, target: /scratch}]"
    )
    write_profile("p", minimal("p") + f"container: {{mounts: {mounts}}}\n")
    [result] = validations(["p"], folders=search_path(environ=os.environ))
    assert result.error is None and result.warnings == ()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("privileged", True),
        ("cap_add", ["SYS_ADMIN"]),
        ("devices", ["/dev/mem:/dev/mem"]),
        ("security_opt", ["seccomp=unconfined"]),
        ("pid", "host"),
        ("userns", "host"),
        ("user", "0:0"),
    ],
)
def test_a_recipe_setting_a_profile_cannot_carry_is_refused_in_one_line(key: str, value: Any) -> None:
    data = seed()
    data["launch"][key] = value
    with pytest.raises(AdoptError) as err:
        read_recipe(data, file=FILE)
    message = err.value.message
    assert message.startswith(f"{FILE}: /launch/{key} is set, and {UNCARRIED[key]}") and "\n" not in message
    data["launch"][key] = False if key == "privileged" else None  # unset: read as before
    assert read_recipe(data, file=FILE).id == data["id"]


def test_a_recipe_s_risky_settings_are_carried_with_their_problem_lines(tmp_path: Path) -> None:
    data = seed()
    launch = data["launch"]
    launch["network_mode"] = "host"
    launch["environment"]["LD_PRELOAD"] = "/opt/hook.so"
    launch["mounts"] += [
        {"source": "/", "target": "/host", "read_only": False},
        {"source": "/var/run/docker.sock", "target": "/var/run/docker.sock", "read_only": True},
    ]
    adoption = adopt_recipe(read_recipe(data, file=FILE), file=FILE)
    risky = {p.split(": ", 2)[1]: p for p in adoption.problems if "carried" in p or "refused by" in p}
    assert sorted(risky) == [
        "/launch/environment/LD_PRELOAD",
        "/launch/ipc",
        "/launch/mounts/2",
        "/launch/mounts/3",
        "/launch/network_mode",
    ]
    assert "host network" in risky["/launch/network_mode"] and "carried into the profile" in risky["/launch/ipc"]
    assert "refused by servectl validate" in risky["/launch/mounts/3"]
    profile = adoption.data
    assert profile["serve"]["network"] == "host" and profile["container"]["ipc"] == "host"
    assert profile["engine"]["env"]["LD_PRELOAD"] == "/opt/hook.so"
    assert {(m["source"], m.get("read_only", False)) for m in profile["container"]["mounts"]} >= {
        ("/", False),
        ("/var/run/docker.sock", True),
    }
    # written by adopt, the profile's own validation names the two it refuses
    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps(data), encoding="utf-8")
    folder = tmp_path / "profiles"
    folder.mkdir()
    written = adopt(
        docker=_NoDocker(),
        recipe=recipe,
        name="g",
        opts=AdoptOptions(
            folders=ProfileSearch((ProfileFolder(folder, "t"),), catalogs=tmp_path / "catalogs"), environ=os.environ
        ),
    )
    escapes = [p for p in written.problems if "Docker engine's socket" in p or "writable mount of /" in p]
    assert len(escapes) == 2, written.problems


class _NoDocker:
    def container_document(self, id_or_name: str) -> dict[str, Any] | None:
        return None

    def image_document(self, ref: str) -> dict[str, Any] | None:
        return None

    def volume_folder(self, name: str) -> str | None:
        return None


# -- issue 39 (9, 10): hostile recipe files and targets, one line each ---------------------------------------


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[" * 5000 + "]" * 5000, "nested too deep to be a recipe"),
        ('{"schema_version": "local-ai-registry/v1", "n": ' + "7" * 5000 + "}", "holds a number too long to read"),
    ],
)
def test_a_hostile_recipe_file_is_refused_in_one_line(tmp_path: Path, text: str, said: str) -> None:
    recipe = tmp_path / "r.json"
    recipe.write_text(text, encoding="utf-8")
    with pytest.raises(AdoptError) as err:
        adopt(
            docker=_NoDocker(),
            recipe=recipe,
            out=tmp_path / "p.yaml",
            opts=AdoptOptions(dry_run=True, environ=os.environ, folders=search_path(environ=os.environ)),
        )
    assert err.value.message == f"{recipe}: {said}; a recipe is a small JSON record"


@pytest.mark.parametrize(
    ("pointer", "value", "said"),
    [
        ("shm_size", "9" * 5000, "/launch/shm_size: string should match pattern"),
        ("hardware_count", 10**57, "/hardware_count: input should be less than or equal to 1024"),
    ],
)
def test_huge_numbers_in_a_recipe_are_refused_in_one_line(pointer: str, value: Any, said: str) -> None:
    data = seed()
    if pointer == "shm_size":
        data["launch"]["shm_size"] = value
    else:
        data["hardware_count"] = value
    with pytest.raises(AdoptError) as err:
        read_recipe(data, file=FILE)
    assert err.value.message.startswith(f"{FILE}: {said}") and "\n" not in err.value.message


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_adopt_out_onto_a_fifo_or_a_folder_is_refused_and_writes_nothing(tmp_path: Path, kind: str) -> None:
    import os

    recipe = tmp_path / "r.json"
    recipe.write_text(SEED.read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "p.yaml"
    if kind == "fifo":
        os.mkfifo(out)
    else:
        out.mkdir()
    opts = AdoptOptions(
        force=True,
        folders=ProfileSearch((ProfileFolder(tmp_path, "t"),), catalogs=tmp_path / "catalogs"),
        environ=os.environ,
    )
    with pytest.raises(AdoptError) as err:
        adopt(docker=_NoDocker(), recipe=recipe, out=out, opts=opts)
    what = "a FIFO (named pipe)" if kind == "fifo" else "a folder"
    assert err.value.message == (
        f"--out {out}: is {what}, not a regular file; servectl writes only regular files; write the profile to a "
        "regular .yaml file"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml", "r.json"]
