"""Issue 39 (1): text from a recipe never becomes YAML of the profile ``adopt --recipe`` writes.

Every string field of the shipped recipe is fed line breaks, ``#``, ``---``, ``: `` and quotes; the written file
must parse to exactly the profile the adoption described, with every header line a comment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from servectl.plan.adopt import adopt_recipe, adoption_yaml, read_recipe
from servectl.profile.loader import ProfileFolder, ProfileSearch
from servectl.profile.validate import load_profile
from servectl.service.adopt import AdoptOptions, adopt
from servectl.yaml_text import comment

SEED = Path(__file__).resolve().parents[2] / "examples" / "registry" / "glm53-flash-exl3-q4-rtxpro6000-sglang-tp4.json"
#: What an attacker writes into a field: a key of its own, a document end, a comment, quotes, YAML's other breaks.
HOSTILE = "x\nconflicts: [{container: victim}]\r\nrollback: y\x85health: {startup_timeout_s: 1}\u2028--- # ' \" : z"


def hostile_recipe() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SEED.read_text(encoding="utf-8"))
    data["id"] = "glm" + HOSTILE
    data["status"] = HOSTILE
    data["description"] = HOSTILE
    data["model_instance_id"] = HOSTILE
    data["hardware_id"] = HOSTILE
    data["engine"]["version"] = HOSTILE
    data["serving"]["kv_cache_dtype"] = HOSTILE
    data["launch"]["image"] = "img:tag" + HOSTILE
    container = data["launch"]["container"]
    container.update(image="img:tag" + HOSTILE, state=HOSTILE, reason=HOSTILE)
    data["launch"]["environment"] = {"SGLANG_NOTE": HOSTILE}
    data["launch"]["mounts"][1]["source"] = "/assets/" + HOSTILE
    args = data["launch"]["arguments"]
    args[args.index("--served-model-name") + 1] = "served" + HOSTILE
    args[args.index("--reasoning-parser") + 1] = HOSTILE
    data["provenance"]["sources"][0]["url"] = "https://huggingface.co/a/b" + HOSTILE
    return data


def test_comment_keeps_any_text_on_one_comment_line() -> None:
    line = comment(HOSTILE)
    assert "\n" not in line and line.startswith("# ")
    assert yaml.safe_load(f"{line}\nkey: 1\n") == {"key": 1}
    assert "\\n" in line and "conflicts: [{container: victim}]" in line  # still readable


def test_every_recipe_string_field_stays_a_value_of_the_written_profile(tmp_path: Path) -> None:
    recipe = read_recipe(hostile_recipe(), file="r\n#x.json")
    adoption = adopt_recipe(recipe, file="r\n#x.json", name="glm")
    assert any(HOSTILE in problem for problem in adoption.problems)  # the reason is quoted in a problem line
    text = adoption_yaml(adoption, schema_line="../schema/profile.schema.json")
    assert yaml.safe_load(text) == adoption.data
    header = text.split("\nname: ", 1)[0].splitlines()
    assert header and all(line.startswith("# ") for line in header)
    data = adoption.data
    assert data["description"] == f"from registry recipe glm{HOSTILE} (r\n#x.json), registry status {HOSTILE}"
    assert data["engine"]["env"] == {"SGLANG_NOTE": HOSTILE}
    assert data["model"]["served_name"] == "served" + HOSTILE
    assert data["image"]["ref"] == "img:tag" + HOSTILE
    assert [m["source"] for m in data["container"]["mounts"]] == ["/assets/" + HOSTILE]
    assert "conflicts" not in data and "rollback" not in data and "startup_timeout_s" not in str(data.get("health"))
    # the whole way through adopt: the file on disk is that document; values the engine would get are refused
    # by the loader (a control character), those that only describe the recipe load as they were written
    file = tmp_path / "r.json"
    file.write_text(json.dumps(hostile_recipe()), encoding="utf-8")
    folder = tmp_path / "profiles"
    folder.mkdir()
    opts = AdoptOptions(
        folders=ProfileSearch((ProfileFolder(folder, "t"),), catalogs=tmp_path / "catalogs"),
        force=True,
        environ=os.environ,
    )
    written = adopt(docker=_NoDocker(), recipe=file, name="glm", opts=opts)
    assert yaml.safe_load(written.path.read_text(encoding="utf-8")) == written.adoption.data
    assert written.problems and all("control character" in p for p in written.problems)
    described = json.loads(SEED.read_text(encoding="utf-8"))
    described.update(id="glm" + HOSTILE, status=HOSTILE, description=HOSTILE)
    described["launch"]["container"].update(state=HOSTILE, reason=HOSTILE)
    file.write_text(json.dumps(described), encoding="utf-8")
    written = adopt(docker=_NoDocker(), recipe=file, name="glm", opts=opts)
    assert written.problems == ()
    profile = load_profile(
        "glm", folders=ProfileSearch((ProfileFolder(folder, "t"),), catalogs=tmp_path / "catalogs")
    ).profile
    assert profile.conflicts == [] and profile.rollback is None and profile.health.startup_timeout_s != 1
    assert profile.description == written.adoption.data["description"] and HOSTILE in profile.description


class _NoDocker:
    def container_document(self, id_or_name: str) -> dict[str, Any] | None:
        return None

    def image_document(self, ref: str) -> dict[str, Any] | None:
        return None

    def volume_folder(self, name: str) -> str | None:
        return None
