"""The bounded reader refuses every file that is not a regular file, without blocking, and bounds the size."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from servectl.files import FileRefused, read_bounded, read_text_bounded


def refusal(path: Path, limit: int = 1024) -> str:
    """The reason ``read_bounded`` gives, failing the test if it blocks for a second."""
    out: list[BaseException | bytes] = []
    worker = threading.Thread(target=lambda: out.append(_catch(path, limit)), daemon=True)
    began = time.monotonic()
    worker.start()
    worker.join(timeout=2.0)
    assert not worker.is_alive(), f"read_bounded({path}) blocked"
    assert time.monotonic() - began < 1.0
    (result,) = out
    assert isinstance(result, FileRefused), result
    assert result.path == path and str(result).startswith(f"{path}: ")
    return result.reason


def _catch(path: Path, limit: int) -> BaseException | bytes:
    try:
        return read_bounded(path, limit_bytes=limit)
    except BaseException as e:  # handed to the test thread
        return e


def test_a_regular_file_is_read_whole_within_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_bytes(b"name: a\n" * 10)
    assert read_bounded(path, limit_bytes=80) == b"name: a\n" * 10
    link = tmp_path / "link.yaml"
    link.symlink_to(path)  # a link to a regular file is followed
    assert read_text_bounded(link, limit_bytes=80).startswith("name: a")


def test_a_fifo_is_refused_at_once_instead_of_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "hang.yaml"
    os.mkfifo(fifo)
    assert refusal(fifo) == "is a FIFO (named pipe), not a regular file"


def test_a_socket_a_device_and_a_folder_are_refused(tmp_path: Path) -> None:
    sock_path = tmp_path / "s.yaml"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(sock_path))
        assert refusal(sock_path) == "is a socket, not a regular file"
    finally:
        server.close()
    device = tmp_path / "zero.yaml"
    device.symlink_to("/dev/zero")  # never ends if read
    assert refusal(device) == "is a character device, not a regular file"
    folder = tmp_path / "dir.yaml"
    folder.mkdir()
    assert refusal(folder) == "is a folder, not a regular file"


def test_a_symlink_loop_and_a_file_used_as_a_folder_are_refused(tmp_path: Path) -> None:
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(tmp_path / "loop.yaml")
    assert refusal(loop).startswith("is a symbolic link loop")
    (tmp_path / "file").write_text("x")
    assert refusal(tmp_path / "file" / "under.yaml").startswith("cannot read:")


def test_a_missing_file_is_file_not_found_for_the_caller_to_decide(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "absent.yaml", limit_bytes=10)


def test_a_file_over_the_limit_and_bytes_that_are_not_utf8_are_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"x" * (4 * 2**20 + 1))
    assert refusal(big, 4 * 2**20) == "is larger than 4 MiB; a file is small: check the path"
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"name: a\ndescription: caf\xe9\n")
    with pytest.raises(FileRefused, match=r"is not UTF-8 text \(line 2, byte 24\)"):
        read_text_bounded(binary, limit_bytes=100)
