"""A host's profiles find ``engine.catalog: image`` in the host's catalog folder, never in the process's (issue 40).

The validator's ``catalog_for`` looked the extracted catalog up in ``catalog_cache_dir()`` of ``os.environ``: a
``Host`` (or ``FakeHost``) whose environ names another folder (``SERVECTL_CATALOG_CACHE`` or ``SERVECTL_HOME``)
validated, compiled and diffed such a profile against the wrong folder - "no catalog has been extracted" when the
process's folder had none, a stale catalog when it had an older one. The folder now travels with the profile
search (``ProfileSearch.catalogs``) into the loaded profile (``LoadedProfile.catalogs``), the rules and the
compiler.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from servectl.paths import catalog_cache_dir
from servectl.profile.catalog import CATALOG_DIR
from servectl.profile.catalog_store import ImageSource, store_catalog
from servectl.testing import FakeHost
from servectl.testing.inspect import container_inspect, image_inspect

#: The demo's image (the stand-in): the profile's catalog is the one extracted from it.
IMAGE = "servectl-standin:latest"
IMAGE_ID = "sha256:" + "c4" * 32
#: A hand-started engine's image (``servectl adopt``).
HAND_IMAGE = "lmsysorg/sglang:v0.5.23"
#: A flag only the host's extracted catalog has (an image's own build adds flags upstream's parser lacks).
OWN_FLAG = "--standin-cache-mode"


def _document(*, with_own_flag: bool) -> dict[str, object]:
    document = json.loads((CATALOG_DIR / "sglang-0.5.23.json").read_text(encoding="utf-8"))
    if with_own_flag:
        own = {"flags": [OWN_FLAG], "dest": "standin_cache_mode", "kind": "value", "type": "str"}
        document["options"] = [*document["options"], own]
    return dict(document)


@pytest.fixture(params=["SERVECTL_CATALOG_CACHE", "SERVECTL_HOME"])
def host(request: pytest.FixtureRequest, profile_dir: Path, tmp_path: Path) -> Iterator[FakeHost]:
    """A host whose environ names its own catalog folder (by either variable), holding the catalog extracted from
    the profile's image; the process's own catalog folder holds none (an older one for the ``stale`` profile)."""
    variable = str(request.param)
    folder = tmp_path / "host-folder"
    environ = {**os.environ, variable: str(folder)}
    host_catalogs = catalog_cache_dir(environ)
    process_catalogs = catalog_cache_dir(os.environ)
    assert host_catalogs != process_catalogs and "SERVECTL_CATALOG_CACHE" not in os.environ
    store_catalog(_document(with_own_flag=True), ImageSource(IMAGE_ID, refs=(IMAGE,), extracted_at=2.0),
                  directory=host_catalogs)  # fmt: skip
    (profile_dir / "imgcat.yaml").write_text(
        f"name: imgcat\nextends: demo\nengine:\n  catalog: image\n  args:\n    {OWN_FLAG[2:]}: q8\n", encoding="utf-8"
    )
    with FakeHost(state_dir=tmp_path / "state", environ=environ) as fake:
        yield fake


def test_validate_and_compile_read_the_catalog_of_the_hosts_folder(host: FakeHost) -> None:
    [checked] = host.validate(names=["imgcat"])
    assert checked.error is None, checked.error
    assert host.load_profile(name="imgcat").profile.engine.catalog == "image"
    plan = host.compile_plan(name="imgcat")
    assert plan.engine_argv[-2:] == (OWN_FLAG, "q8")
    assert f"{OWN_FLAG} q8" in host.dry_run(name="imgcat").script
    assert f"- {OWN_FLAG}\n" in host.render(name="imgcat", to="compose", out="-").text
    assert host.flag_catalog(name="imgcat").option(OWN_FLAG) is not None
    assert host.diff_catalogs(a="imgcat", b="imgcat", name="imgcat")[2] == []


def test_a_stale_catalog_in_the_processs_folder_is_not_the_hosts(host: FakeHost, tmp_path: Path) -> None:
    # the process's folder holds an older extract of the same image, without the flag: it must not be the judge
    stale = ImageSource("sha256:" + "0d" * 32, refs=(IMAGE,), extracted_at=9.0)  # newer by time, other folder
    store_catalog(_document(with_own_flag=False), stale, directory=catalog_cache_dir(os.environ))
    [checked] = host.validate(names=["imgcat"])
    assert checked.error is None, checked.error
    assert checked.note is None  # its catalog is its image's newest extract in the host's folder: not stale
    assert OWN_FLAG in host.compile_plan(name="imgcat").engine_argv


def test_adopt_diff_container_and_status_compare_against_the_hosts_catalog(host: FakeHost, profile_dir: Path) -> None:
    # a hand-started engine of an image whose extracted catalog only the host's folder holds
    command = ["python3", "-m", "sglang.launch_server", "--model-path", "/model", "--host", "0.0.0.0", "--port",
               "30000", OWN_FLAG, "q8"]  # fmt: skip
    ports = {30000: ("127.0.0.1", 30000)}
    data = container_inspect(command, image=HAND_IMAGE, binds=[("/srv/m", "/model", True)], ports=ports)
    host.engine.documents["sglang-hand"] = host.engine.documents[data["Id"]] = data
    host.engine.image_documents[data["Image"]] = image_inspect()
    extracted = ImageSource("sha256:" + "5b" * 32, refs=(HAND_IMAGE,), digests=("sha256:" + "d1" * 32,))
    store_catalog(_document(with_own_flag=True), extracted, directory=catalog_cache_dir(host.environ))
    written = host.adopt(container="sglang-hand", name="hand")
    assert written.path == profile_dir / "hand.yaml" and written.problems == ()
    document = yaml.safe_load(written.path.read_text(encoding="utf-8"))
    engine = document["engine"]
    assert engine["catalog"] == "sglang-0.5.23" and "catalog_extend" in engine  # upstream's parser lacks the flag
    engine["catalog"] = "image"  # the image's own catalog instead: the host's extract knows the flag
    del engine["catalog_extend"]
    written.path.write_text(yaml.safe_dump(document), encoding="utf-8")
    assert host.load_profile(name="hand").profile.engine.catalog_extend is None
    assert host.diff_container(name="hand", container="sglang-hand") == []
    [service] = host.status().services  # found as the adopted profile's service: its diff is empty
    assert (service.profile, service.adopted, service.drift) == ("hand", True, False)
