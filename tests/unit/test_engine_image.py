"""Asking an engine image (catalog extract, parse in the image) through a fake Docker engine, and what the
catalog store and diff make of the answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servectl.adapters.docker import ImageInfo, OneShotResult
from servectl.adapters.engine_image import (
    ImageProbeError,
    ProbeOutputError,
    parse_dump_output,
    parse_in_image,
    parse_probe_output,
    python_candidates,
)
from servectl.errors import PreflightFailed
from servectl.profile.catalog import CATALOG_DIR, FlagCatalog
from servectl.profile.catalog_diff import diff_catalogs
from servectl.profile.catalog_store import ImageSource, find_extracted, load_catalog, store_catalog
from servectl.service.catalog import catalog_staleness, extract_catalog
from servectl.testing.docker import FakeDockerEngine, dump_answer, probe_answer

IMAGE = "vendor/sglang-custom:rc14"
IMAGE_ID = "sha256:" + "ab" * 32
REPO_DIGEST = "sha256:" + "cd" * 32


def shipped_document() -> dict[str, Any]:
    return json.loads((CATALOG_DIR / "sglang-0.5.23.json").read_text())


def local_image() -> ImageInfo:
    return ImageInfo(id=IMAGE_ID, repo_digests=(f"vendor/sglang-custom@{REPO_DIGEST}",), tags=(IMAGE,))


class Recorder:
    """A ``oneshot`` that answers per Python and remembers the commands."""

    def __init__(self, answers: dict[str, OneShotResult]) -> None:
        self.answers = answers
        self.commands: list[list[str]] = []

    def __call__(self, image: str, command: list[str]) -> OneShotResult:
        self.commands.append(command)
        return self.answers.get(
            command[0], OneShotResult(None, "", "", 0.0, not_found=f"exec: {command[0]}: not found")
        )


# -- output parsing -----------------------------------------------------------------------------------------


def test_the_dump_is_found_after_whatever_sglang_printed_first() -> None:
    doc = {"engine": "sglang", "version": "9.9", "options": [{"flags": ["--tp-size"], "kind": "value"}]}
    text = "WARNING: no CUDA {not json}\n" + json.dumps(doc, indent=1) + "\n"
    assert parse_dump_output(text) == doc


@pytest.mark.parametrize("text", ["", "Traceback...\n", '{\n "engine": "sglang"\n}\n', "{\n [1, 2]\n"])
def test_a_dump_without_options_is_an_error(text: str) -> None:
    with pytest.raises(ProbeOutputError):
        parse_dump_output(text)


def test_the_probe_document_is_read_between_its_frames() -> None:
    answer = probe_answer({"parsed": False, "parse_error": "sglang serve: error: x"})
    assert parse_probe_output(answer.stdout)["parse_error"] == "sglang serve: error: x"
    with pytest.raises(ProbeOutputError, match="no result"):
        parse_probe_output("Segmentation fault\n")


def test_the_python_comes_from_the_entrypoint_when_it_is_one() -> None:
    assert python_candidates(["/opt/venv/bin/python", "-m", "sglang.launch_server"]) == ["/opt/venv/bin/python"]
    assert python_candidates(["sglang", "serve"])[:2] == ["python3", "/opt/venv/bin/python"]
    assert python_candidates(None)[0] == "python3"


# -- extract ------------------------------------------------------------------------------------------------


def test_extract_probes_pythons_until_one_has_sglang_and_stores_by_image_id(tmp_path: Path) -> None:
    doc = shipped_document()
    no_module = OneShotResult(1, "", "ModuleNotFoundError: No module named 'sglang'\n", 0.2)
    oneshot = Recorder({"python3": no_module, "/opt/venv/bin/python": dump_answer(doc, seconds=2.5)})
    engine = FakeDockerEngine(images=[local_image()], oneshot=oneshot)
    out = tmp_path / "project" / "custom.json"
    result = extract_catalog(image=IMAGE, engine=engine, out=out, store_dir=tmp_path / "cache")
    assert [c[0] for c in oneshot.commands] == ["python3", "/opt/venv/bin/python", "/opt/venv/bin/python"]
    assert oneshot.commands[1][-1] == "flags" and "def dump_flags" in oneshot.commands[1][2]
    assert oneshot.commands[2][-1] == "routes"  # then the route table, with the Python that has SGLang
    assert result.python == "/opt/venv/bin/python" and result.seconds == 2.5
    assert result.stored_at == tmp_path / "cache" / f"{'ab' * 32}.json"
    stored = json.loads(result.stored_at.read_text())
    assert stored["image"]["id"] == IMAGE_ID and stored["image"]["digests"] == [REPO_DIGEST]
    assert stored["entrypoint"] == "/opt/venv/bin/python -m sglang.launch_server"
    assert stored["options"] == doc["options"] and json.loads(out.read_text())["options"] == doc["options"]
    assert find_extracted(ref=IMAGE, directory=tmp_path / "cache") is not None
    assert find_extracted(digest=REPO_DIGEST, directory=tmp_path / "cache") is not None
    assert find_extracted(ref="vendor/other:1", directory=tmp_path / "cache") is None


def test_an_image_without_sglang_is_one_clear_line(tmp_path: Path) -> None:
    no_module = OneShotResult(1, "", "ModuleNotFoundError: No module named 'sglang'\n", 0.2)
    engine = FakeDockerEngine(images=[local_image()], oneshot=Recorder({"python3": no_module}))
    with pytest.raises(ImageProbeError) as err:
        extract_catalog(image=IMAGE, engine=engine, store_dir=tmp_path)
    message = err.value.message
    assert "\n" not in message
    assert f"image {IMAGE} has no SGLang" in message and "python3 (no sglang)" in message
    assert "/opt/venv/bin/python (not in the image)" in message and "image.entrypoint" in message


def test_an_image_without_python_says_which_were_tried(tmp_path: Path) -> None:
    engine = FakeDockerEngine(images=[local_image()], oneshot=Recorder({}))
    with pytest.raises(ImageProbeError, match=r"has no Python at /usr/bin/python3\.9; set image.entrypoint"):
        extract_catalog(image=IMAGE, engine=engine, entrypoint=["/usr/bin/python3.9", "-m", "x"], store_dir=tmp_path)


def test_a_timed_out_or_broken_dump_is_an_error_not_a_catalog(tmp_path: Path) -> None:
    slow = OneShotResult(None, "", "", 120.0, timed_out=True)
    engine = FakeDockerEngine(images=[local_image()], oneshot=Recorder({"python3": slow}))
    with pytest.raises(ImageProbeError, match="did not answer within 120 s"):
        extract_catalog(image=IMAGE, engine=engine, store_dir=tmp_path)
    crash = OneShotResult(1, "", "Traceback ...\nAttributeError: 'NoneType' object has no attribute 'x'\n", 1.0)
    engine = FakeDockerEngine(images=[local_image()], oneshot=Recorder({"python3": crash}))
    with pytest.raises(ImageProbeError, match=r"dumper failed .*AttributeError"):
        extract_catalog(image=IMAGE, engine=engine, store_dir=tmp_path)
    assert not list(tmp_path.glob("*.json"))


def test_extract_needs_the_image_on_this_host(tmp_path: Path) -> None:
    engine = FakeDockerEngine(images=[])
    with pytest.raises(PreflightFailed, match="is not on this host: docker pull vendor/other:1"):
        extract_catalog(image="vendor/other:1", engine=engine, store_dir=tmp_path)


# -- parse in the image ----------------------------------------------------------------------------------------


def test_parse_reports_sglangs_own_error_and_the_resolution_apart() -> None:
    error = "sglang serve: error: argument --quantization: invalid choice: 'exl3' (choose from 'awq', 'fp8')"
    answers = iter(
        [
            probe_answer({"sglang_version": "0.5.23", "parsed": False, "parse_error": error}),
            probe_answer({"sglang_version": "0.5.23", "parsed": True, "resolved": False, "resolve_error": "E: no GPU"}),
        ]
    )
    engine = FakeDockerEngine(images=[local_image()], oneshot=lambda image, command: next(answers))
    rejected = parse_in_image(image=IMAGE, argv=["--quantization", "exl3"], engine=engine)
    assert (rejected.parsed, rejected.error, rejected.sglang_version) == (False, error, "0.5.23")
    accepted = parse_in_image(image=IMAGE, argv=["--tp-size", "2"], engine=engine)
    assert accepted.parsed and accepted.error is None
    assert (accepted.resolved, accepted.resolve_error) == (False, "E: no GPU")


# -- the store and diff -------------------------------------------------------------------------------------


def _doc(options: list[dict[str, Any]], version: str = "0.5.23") -> dict[str, Any]:
    return {"engine": "sglang", "version": version, "options": options}


def test_engine_catalog_image_finds_the_catalog_by_pin_or_by_reference(tmp_path: Path) -> None:
    doc = _doc([{"flags": ["--quantization"], "kind": "value", "type": "str", "choices": ["fp8", "exl3"]}])
    store_catalog(doc, ImageSource(IMAGE_ID, (IMAGE,), (REPO_DIGEST,), 1.0), directory=tmp_path)
    by_ref = load_catalog("image", image_ref=IMAGE, directory=tmp_path).catalog
    assert by_ref.option("quantization") is not None and "exl3" in (by_ref.option("quantization").choices or ())
    assert load_catalog("image", image_ref="x:1", image_digest=REPO_DIGEST, directory=tmp_path).image is not None
    assert load_catalog(IMAGE_ID, directory=tmp_path).catalog.version == "0.5.23"
    with pytest.raises(
        KeyError,
        match=r"no catalog has been extracted from image vendor/x:2 yet; run `servectl catalog extract vendor/x:2`",
    ):
        load_catalog("image", image_ref="vendor/x:2", directory=tmp_path)


def test_a_committed_catalog_file_is_loaded_and_a_missing_one_says_how_to_make_it(tmp_path: Path) -> None:
    path = tmp_path / "custom.json"
    path.write_text(json.dumps(_doc([{"flags": ["--exl3-cache-mode"], "kind": "value", "type": "str"}])))
    assert load_catalog(str(path), directory=tmp_path).catalog.option("--exl3-cache-mode") is not None
    with pytest.raises(KeyError, match=r"--out .*missing\.json"):
        load_catalog(str(tmp_path / "missing.json"), directory=tmp_path)


def test_diff_finds_added_removed_and_changed_flags() -> None:
    old = FlagCatalog.from_dict(
        _doc(
            [
                {"flags": ["--quantization"], "kind": "value", "type": "str", "choices": ["fp8", "awq"]},
                {"flags": ["--old-flag"], "kind": "switch"},
                {"flags": ["--tp-size"], "kind": "value", "type": "int", "default": 1},
            ]
        ),
        name="a",
    )
    new = FlagCatalog.from_dict(
        _doc(
            [
                {"flags": ["--quantization"], "kind": "value", "type": "str", "choices": ["awq", "fp8", "exl3"]},
                {"flags": ["--tp-size"], "kind": "value", "type": "human_readable_int", "default": 2},
                {"flags": ["--new-flag"], "kind": "value", "type": "str"},
            ]
        ),
        name="b",
    )
    lines = [c.line() for c in diff_catalogs(old, new)]
    assert lines == [
        "~ --quantization  choices: +exl3",
        "~ --tp-size  type: int -> human_readable_int",
        "~ --tp-size  default: 1 -> 2",
        "+ --new-flag  [str]",
        "- --old-flag  [switch]",
    ]
    assert diff_catalogs(new, new) == []


def test_validate_notes_a_catalog_older_than_the_images(tmp_path: Path) -> None:
    store_catalog(
        _doc([{"flags": ["--tp-size"], "kind": "value"}], "0.5.24"), ImageSource(IMAGE_ID, (IMAGE,)), directory=tmp_path
    )
    note = catalog_staleness(
        catalog_spec="sglang-0.5.23", catalog_version="0.5.23", catalog_image_id=None, image_ref=IMAGE,
        image_digest=None, store_dir=tmp_path,
    )  # fmt: skip
    assert note is not None and "older than image vendor/sglang-custom:rc14's SGLang 0.5.24" in note
    same = catalog_staleness(
        catalog_spec="image", catalog_version="0.5.24", catalog_image_id=IMAGE_ID, image_ref=IMAGE,
        image_digest=None, store_dir=tmp_path,
    )  # fmt: skip
    assert same is None
    moved = catalog_staleness(
        catalog_spec="old.json", catalog_version="0.5.24", catalog_image_id="sha256:" + "ee" * 32, image_ref=IMAGE,
        image_digest=None, store_dir=tmp_path,
    )  # fmt: skip
    assert moved is not None and "run `servectl catalog extract vendor/sglang-custom:rc14`" in moved


# -- an image whose sglang has no distribution metadata -----------------------------------------------------
_FAKE_SERVER_ARGS = """
class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", type=str, required=True)
        parser.add_argument("--tp-size", type=int, default=1)
"""


@pytest.mark.parametrize("metadata", [False, True], ids=["package-only", "installed"])
def test_extract_reads_the_version_from_the_package_when_the_image_has_no_metadata(
    tmp_path: Path, metadata: bool
) -> None:
    """The real dumper on an sglang copied without its ``dist-info`` (as some images do): the version comes from
    ``sglang/version.py`` and the result says so, instead of a PackageNotFoundError traceback line."""
    import subprocess
    import sys

    from servectl.profile import engine_dump

    site = tmp_path / "site"
    (site / "sglang" / "srt").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "version.py").write_text('__version__ = "0.5.99rc1"\n')
    (site / "sglang" / "srt" / "__init__.py").write_text("")
    (site / "sglang" / "srt" / "server_args.py").write_text(_FAKE_SERVER_ARGS)
    if metadata:
        (site / "sglang-0.5.98.dist-info").mkdir()
        (site / "sglang-0.5.98.dist-info" / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.98\n"
        )
    dumped = subprocess.run(  # -S: no site-packages, so only the folder above holds an sglang
        [sys.executable, "-S", engine_dump.__file__, "flags"],
        capture_output=True, text=True, check=False, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert dumped.returncode == 0 and "Traceback" not in dumped.stderr, dumped.stderr
    engine = FakeDockerEngine(
        images=[local_image()], oneshot=Recorder({"python3": OneShotResult(0, dumped.stdout, "", 0.1)})
    )
    result = extract_catalog(image=IMAGE, engine=engine, store_dir=tmp_path / "cache")
    assert [o["flags"] for o in result.document["options"]][-2:] == [["--model-path"], ["--tp-size"]]
    if metadata:
        assert result.version == "0.5.98" and "version_source" not in result.document
        assert result.version_source == "its distribution metadata"
    else:
        assert result.version == "0.5.99rc1"
        assert result.version_source == engine_dump.VERSION_FROM_MODULE


# -- the image's route table --------------------------------------------------------------------------------
_FAKE_HTTP_SERVER = """
import os
from fastapi import FastAPI

app = FastAPI()


@app.get("/health")
async def health() -> None: ...


@app.post("/v1/chat/completions", dependencies=[Depends(validate_json_request)])
async def openai_v1_chat_completions(request: ChatCompletionRequest, raw_request: Request): ...


@app.api_route("/generate", methods=["POST", "PUT"])
async def generate_request(obj: GenerateReqInput, request: Request): ...
"""


class BySubcommand:
    """A ``oneshot`` answering ``engine_dump.py``'s subcommand (its last argument)."""

    def __init__(self, answers: dict[str, OneShotResult]) -> None:
        self.answers = answers

    def __call__(self, image: str, command: list[str]) -> OneShotResult:
        return self.answers[command[-1]]


def test_extract_keeps_the_images_route_table_and_the_gateway_refuses_a_path_it_lacks(tmp_path: Path) -> None:
    """An image whose SGLang serves no Anthropic or Ollama paths (the real dumper on its http_server.py): the
    table is stored beside its catalog, a profile on that catalog finds it, and the gateway answers a path it
    lacks with 404 unknown_path naming it."""
    import subprocess
    import sys

    import httpx

    from servectl.gateway.cards import ProfileCard
    from servectl.gateway.config import GatewayConfig
    from servectl.gateway.routes import Upstream
    from servectl.gateway.serve import route_paths_of
    from servectl.profile import engine_dump
    from servectl.profile.catalog_store import extracted_routes, stored_catalogs
    from servectl.standin.process import free_port
    from servectl.testing.gateway import GatewayThread

    site = tmp_path / "site"
    (site / "sglang" / "srt" / "entrypoints").mkdir(parents=True)
    (site / "sglang" / "srt" / "entrypoints" / "http_server.py").write_text(_FAKE_HTTP_SERVER)
    dumped = subprocess.run([sys.executable, "-S", engine_dump.__file__, "routes", "--root", str(site)],
                            capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    answers = {"flags": dump_answer(shipped_document()), "routes": OneShotResult(0, dumped.stdout, "", 0.1)}
    engine = FakeDockerEngine(images=[local_image()], oneshot=BySubcommand(answers))
    cache, out = tmp_path / "cache", tmp_path / "project" / "custom.json"
    result = extract_catalog(image=IMAGE, engine=engine, out=out, store_dir=cache)
    assert result.routes_error is None
    assert result.routes_written == (cache / f"{'ab' * 32}.routes.json", tmp_path / "project" / "custom.routes.json")
    assert [s.path for s in stored_catalogs(cache)] == [result.stored_at]  # the table is no catalog of the store
    routes = extracted_routes("image", image_ref=IMAGE, directory=cache)
    assert (
        routes == result.routes_written[0] and extracted_routes(str(out), directory=cache) == result.routes_written[1]
    )
    assert extracted_routes("sglang-0.5.23", directory=cache) is None  # a shipped catalog's table is shipped
    card = ProfileCard("old", None, False, False, False, False, catalog="image", routes_file=routes)
    paths = route_paths_of(lambda _profile: card)
    assert paths("old") == {"/v1/chat/completions", "/generate"}
    config = GatewayConfig.model_validate({"listen": f"127.0.0.1:{free_port()}", "aliases": {"chat": ["old"]},
                                           "auth": "none"})  # fmt: skip
    up = Upstream(profile="old", url="http://127.0.0.1:9", served_name="m", ready=True)  # never reached
    with GatewayThread(config, upstreams=lambda: [up], state_dir=tmp_path / "gw", engine_paths=paths) as gw:
        refused = httpx.post(f"{gw.base_url}/v1/messages", json={"model": "chat", "max_tokens": 4, "messages": []})
    assert (refused.status_code, refused.headers["X-Servectl-Reason"]) == (404, "unknown_path")
    assert refused.json()["type"] == "error"  # Anthropic's shape, naming the path
    assert "does not serve POST /v1/messages" in refused.json()["error"]["message"]
    broken = {**answers, "routes": OneShotResult(1, "", "SyntaxError\n", 0.1)}  # the catalog still comes
    engine = FakeDockerEngine(images=[local_image()], oneshot=BySubcommand(broken))
    again = extract_catalog(image=IMAGE, engine=engine, store_dir=tmp_path / "cache2")
    assert again.routes_written == () and "the route dumper failed" in str(again.routes_error)
