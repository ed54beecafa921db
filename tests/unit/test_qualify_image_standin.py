"""The image/OCR gate passes and fails on the stand-in; the stand-in's answers for images, code and shell tools.

The stand-in runs as a host process; it "reads" the corpus images from the text ``make_ocr_corpus.py`` puts
in their metadata (:mod:`servectl.standin.answers`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from servectl.bench.qualify import QualifyReport, QualifySettings, ServiceFacts, run_qualify
from servectl.bench.qualify.gates.image import SHIPPED_CORPUS, load_corpus
from servectl.bench.qualify.suite import LoadedSuite, Suite
from servectl.standin.answers import code_answer, image_text, shell_call
from servectl.standin.process import HostStandin

DEMO_MODEL = str(Path(__file__).parents[2] / "examples" / "demo-model")
FAST = {"STANDIN_TOKEN_RATE": "20000", "STANDIN_CHUNK_TOKENS": "8", "STANDIN_STARTUP_DELAY_S": "0"}


def qualify_images(*, multimodal: bool, facts: ServiceFacts | None = None, **env: str) -> QualifyReport:
    suite = Suite.model_validate({"name": "t", "gates": {"image": {"max_tokens": 256}}})
    loaded = LoadedSuite(suite, source="test", sha256="0" * 64)
    argv = ["--model-path", DEMO_MODEL, *(["--enable-multimodal"] if multimodal else [])]
    with HostStandin(argv, env={**FAST, **env}) as engine:
        engine.wait_ready()
        return run_qualify(settings=QualifySettings(url=engine.base_url, suite=loaded), facts=facts, environ=os.environ)


def test_the_image_gate_passes_every_image_on_a_multimodal_stand_in() -> None:
    report = qualify_images(multimodal=True, facts=ServiceFacts(known=True, multimodal=True))
    (gate,) = report.gates
    assert gate.verdict == "pass", [c.message for c in gate.failures]
    assert gate.count == f"{len(load_corpus(SHIPPED_CORPUS).images)}/13"
    assert report.counts == "image/OCR 13/13"
    assert gate.detail["sha256"] and gate.detail["corpus"] == "servectl-ocr"


@pytest.mark.parametrize(
    ("env", "multimodal", "message"),
    [
        ({"STANDIN_IMAGE_FAULT": "wrong"}, True, "image text-pangram.png: the answer lacks 'quick brown fox'"),
        ({"STANDIN_IMAGE_FAULT": "length"}, True, "image text-pangram.png: the answer was cut at max_tokens 256"),
        ({}, False, "image text-pangram.png: HTTP 400: This model is text-only and does not take image input"),
    ],
)
def test_the_image_gate_fails_naming_the_image(env: dict[str, str], multimodal: bool, message: str) -> None:
    (gate,) = qualify_images(multimodal=multimodal, **env).gates
    assert gate.verdict == "fail" and gate.passed == 0
    assert gate.failures[0].message.startswith(message)


def test_the_stand_in_reads_the_text_of_png_and_jpeg_corpus_images() -> None:
    corpus = load_corpus(SHIPPED_CORPUS)
    for item in corpus.images:
        text = image_text(item.data)
        assert text is not None, item.file
    receipt = next(i for i in corpus.images if i.file == "receipt-hardware.jpg")
    assert "TOTAL        34.55" in (image_text(receipt.data) or "")
    assert image_text(b"\x89PNG\r\n\x1a\n") is None and image_text(b"GIF89a") is None


def test_the_stand_in_answers_code_per_mode(tmp_path: Path) -> None:
    solutions = tmp_path / "solutions.json"
    solutions.write_text(json.dumps({"double": "def double(x):\n    return 2 * x\n"}))
    assert "return 2 * x" in code_answer("double", mode="right", solutions_file=str(solutions))
    assert "return None" in code_answer("double", mode="right", solutions_file=None)
    assert "while True" in code_answer("double", mode="loop", solutions_file=None)
    assert "time.sleep(3600)" in code_answer("double", mode="slow", solutions_file=None)
    assert "```" not in code_answer("double", mode="none", solutions_file=None)


def test_the_stand_in_reads_a_named_file_through_a_shell_tool_only() -> None:
    def tool(name: str, *props: str) -> dict[str, object]:
        schema = {"type": "object", "properties": {p: {"type": "string"} for p in props}}
        return {"type": "function", "function": {"name": name, "parameters": schema}}

    tools = [tool("read", "path"), tool("bash", "command", "timeout")]
    assert shell_call(tools, "Run `cat /tmp/x/nonce.txt` and report it.") == (
        "bash",
        json.dumps({"command": "cat /tmp/x/nonce.txt"}),
    )
    assert shell_call([tool("terminal", "command")], "What is in /work/n-1/nonce.txt?") == (
        "terminal",
        json.dumps({"command": "cat /work/n-1/nonce.txt"}),
    )
    assert shell_call([tool("read", "path")], "cat /tmp/nonce.txt") is None  # no shell tool
    assert shell_call(tools, "What is the weather?") is None  # no file named


def test_the_stand_in_reads_the_file_once_when_a_client_adds_its_own_context_turn() -> None:
    from servectl.standin.answers import named_file_text, shell_result

    ask = {"role": "user", "content": "Run `cat /tmp/n/nonce.txt` and report it."}
    context = {"role": "user", "content": [{"type": "text", "text": "Active exec sessions: none"}]}
    assert named_file_text([ask, context]) == ask["content"] and shell_result([ask, context]) is None
    ran = [ask, context, {"role": "assistant", "content": ""}, {"role": "tool", "content": "nonce-1"}, context]
    assert shell_result(ran) == "nonce-1"  # answered from the result, not called again
