"""Scripted answers for the qualify gates that need more than a shape: images, code and an agent's shell tool.

Test fixtures, kept small; the real measure is a real model on the cards.

* **Images.** ``image_url`` content parts with ``data:`` URLs are decoded. The engine takes them only when
  started with ``--enable-multimodal`` (a text-only model refuses them with HTTP 400, as SGLang refuses image
  input for a text-only architecture). The stand-in "reads" an image from its metadata: the ``servectl-ocr``
  PNG ``tEXt`` chunk or JPEG comment that ``scripts/make_ocr_corpus.py`` writes, and answers with that text.
  ``STANDIN_IMAGE_FAULT=wrong`` answers with every digit changed; ``=length`` repeats the text until
  ``max_tokens`` cuts it (finish ``length``).
* **Code.** A prompt that says ``Define `NAME` at the top level`` (the coding gate's) is answered with a
  fenced Python block, per ``STANDIN_CODE_ANSWER``: ``right`` (default; the source for ``NAME`` in the JSON
  file ``STANDIN_CODE_SOLUTIONS`` names, ``{"NAME": "def NAME(...): ..."}``; without one, the reference
  solutions of servectl's shipped coding cases, :data:`SHIPPED_SOLUTIONS`, so that the demo profile passes
  ``qualify --suite full``; a function in neither is answered as ``wrong``),
  ``wrong`` (returns None), ``slow`` (sleeps an hour), ``loop`` (never terminates), ``none`` (no code).
* **An agent's shell tool.** When tools are offered, one of them is a shell (a name such as ``bash``,
  ``shell``, ``exec``, ``terminal`` or ``run_command``, with a string parameter such as ``command``) and the
  last user message names a file (a ``cat PATH`` or an absolute path), the reply calls that tool with
  ``cat PATH``; the tool's result then comes back and is quoted (:mod:`servectl.standin.behaviour`), which is
  how a real client reads a nonce through its own shell tool against the stand-in.

Standard library only: this module runs inside the stand-in image.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from servectl.standin.state import RequestError

METADATA_KEY = "servectl-ocr"
MAX_IMAGE_BYTES = 16 * 2**20
CODE_ASK = re.compile(r"Define `([A-Za-z_]\w*)` at the top level")
#: The shipped coding cases' reference solutions (``scripts/gen_standin_solutions.py`` writes it from
#: ``bench/qualify/cases/coding.yaml``; the stand-in image carries it beside this module).
SHIPPED_SOLUTIONS = Path(__file__).with_name("code_solutions.json")
SHELL_TOOLS = re.compile(r"^(bash|shell|sh|exec|execute|terminal|run_command|run_shell_command|command|cmd)$", re.I)
SHELL_ARGS = ("command", "cmd", "script", "input")
_FILE = re.compile(r"`?cat\s+([^\s`'\"]+)`?|(?<![\w.])(/(?:[\w.-]+/)*[\w.-]+\.(?:txt|md|json|log))")
_DIGIT_SHIFT = str.maketrans("0123456789", "1234567890")


# -- images ------------------------------------------------------------------------------------------------------


def image_parts(messages: Sequence[Mapping[str, Any]]) -> list[bytes]:
    """The decoded images of every ``image_url`` content part of the messages.

    Raises:
        RequestError: an image part that is not a base64 ``data:`` URL (the stand-in fetches nothing).
    """
    images = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "image_url":
                continue
            spec = part.get("image_url")
            url = str(spec.get("url", "") if isinstance(spec, Mapping) else spec or "")
            head, _, data = url.partition(",")
            if not head.startswith("data:image/") or not head.endswith(";base64"):
                raise RequestError(400, "image_url must be a data:image/...;base64 URL (the stand-in fetches nothing)")
            try:
                decoded = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                raise RequestError(400, "image_url holds invalid base64") from None
            if len(decoded) > MAX_IMAGE_BYTES:
                raise RequestError(400, f"image larger than {MAX_IMAGE_BYTES} bytes")
            images.append(decoded)
    return images


def image_text(data: bytes) -> str | None:
    """The ``servectl-ocr`` text an image carries (PNG ``tEXt``/``zTXt``/``iTXt``, JPEG comment), or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return _png_text(data)
    if data.startswith(b"\xff\xd8"):
        return _jpeg_comment(data)
    return None


def _png_text(data: bytes) -> str | None:
    offset = 8
    while offset + 8 <= len(data):
        length = int.from_bytes(data[offset : offset + 4], "big")
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        offset += 12 + length
        key, _, value = body.partition(b"\0")
        if key.decode("latin-1") != METADATA_KEY:
            continue
        if kind == b"tEXt":
            return value.decode("latin-1")
        if kind == b"zTXt":
            return zlib.decompress(value[1:]).decode("latin-1")
        if kind == b"iTXt":  # compression flag, method, language\0, translated keyword\0, text
            compressed, rest = value[0], value[2:]
            text = rest.split(b"\0", 2)[-1]
            return (zlib.decompress(text) if compressed else text).decode("utf-8")
    return None


def _jpeg_comment(data: bytes) -> str | None:
    offset = 2
    while offset + 4 <= len(data) and data[offset] == 0xFF:
        marker = data[offset + 1]
        length = int.from_bytes(data[offset + 2 : offset + 4], "big")
        if marker == 0xFE:  # COM
            text = data[offset + 4 : offset + 2 + length].decode("utf-8", "replace")
            key, _, value = text.partition(":")
            if key == METADATA_KEY:
                return value
        if marker == 0xDA:  # start of scan: no more metadata segments
            return None
        offset += 2 + length
    return None


def image_answer(images: Sequence[bytes], *, fault: str | None, max_tokens: int | None) -> str:
    """What the stand-in "sees" in the images, per ``STANDIN_IMAGE_FAULT``."""
    texts = [image_text(image) for image in images]
    seen = "\n".join(t for t in texts if t)
    if not seen:
        return "I cannot read any text in this image."
    if fault == "wrong":
        seen = seen.translate(_DIGIT_SHIFT)[::-1]
    answer = f"The image shows:\n{seen}"
    if fault == "length":
        answer = " ".join([answer] * (2 + (max_tokens or 256) // max(1, len(answer.split()))))
    return answer


# -- code --------------------------------------------------------------------------------------------------------


def code_function(text: str) -> str | None:
    """The function a coding prompt asks for (``Define `NAME` at the top level``), or None."""
    match = CODE_ASK.search(text)
    return match.group(1) if match else None


def code_answer(function: str, *, mode: str, solutions_file: str | None) -> str:
    """A fenced answer defining ``function``, per ``STANDIN_CODE_ANSWER`` (``mode``)."""
    if mode == "none":
        return "I would rather not write code today."
    source = None
    if mode == "right":
        try:
            path = Path(solutions_file) if solutions_file else SHIPPED_SOLUTIONS
            source = json.loads(path.read_text(encoding="utf-8")).get(function)
        except (OSError, ValueError, AttributeError):
            source = None
    if not isinstance(source, str):
        body = {
            "slow": "    import time\n\n    time.sleep(3600)\n",
            "loop": "    while True:\n        pass\n",
        }.get(mode, "    return None\n")
        source = f"def {function}(*args, **kwargs):\n{body}"
    return f"Here is the code:\n\n```python\n{source.rstrip()}\n```\n"


# -- an agent's shell tool ---------------------------------------------------------------------------------------


def shell_call(tools: Sequence[Mapping[str, Any]], user_text: str) -> tuple[str, str] | None:
    """``(tool name, arguments JSON)`` that reads the file the user names through a shell tool, or None."""
    match = _FILE.search(user_text)
    if match is None:
        return None
    path = match.group(1) or match.group(2)
    for tool in tools:
        function = tool.get("function")
        if not isinstance(function, Mapping) or not SHELL_TOOLS.match(str(function.get("name", ""))):
            continue
        parameters = function.get("parameters")
        props = parameters.get("properties", {}) if isinstance(parameters, Mapping) else {}
        key = next((k for k in SHELL_ARGS if k in props), None)
        if key is not None:
            return str(function["name"]), json.dumps({key: f"cat {path}"})
    return None


def _named_file_index(messages: Sequence[Mapping[str, Any]]) -> int | None:
    """The newest user turn that names a file (a client may send its own context as a later user turn)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "user" and _FILE.search(_text(message.get("content"))):
            return index
    return None


def named_file_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of the newest user turn that names a file ("" when none does)."""
    index = _named_file_index(messages)
    return _text(messages[index].get("content")) if index is not None else ""


def shell_result(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The result of a tool that ran after the user named the file (the shell tool's output), if any."""
    index = _named_file_index(messages)
    if index is None:
        return None
    results = [_text(m.get("content")) for m in messages[index + 1 :] if m.get("role") == "tool"]
    return results[-1] if results else None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""
