"""Fixtures for tests against the real Docker engine.

* ``docker_client`` (session): a ``docker.DockerClient``; tests skip with the reason when no engine answers
  (they fail instead when ``CI`` or ``SERVECTL_REQUIRE_DOCKER`` is set, so CI cannot silently skip them).
* ``test_session_id`` (session): a value for the ``servectl.test-session`` label; every container made through
  these fixtures carries it, and whatever is left with it is removed when the session ends.
* ``standin_image`` (session): the stand-in SGLang image, built once per session; its reference.
* ``make_world``: builds a test module's world class from the fixtures above and calls its ``cleanup()`` when
  the test ends, passed or failed.
* ``run_container``: start a container (default image: the stand-in) with a unique name and the session
  label; it is removed when the test ends, passed or failed.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest

SESSION_LABEL = "servectl.test-session"


@pytest.fixture(scope="session")
def test_session_id() -> str:
    return uuid.uuid4().hex


@pytest.fixture(scope="session")
def docker_client(test_session_id: str) -> Iterator[Any]:
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception as err:  # the SDK raises several unrelated types when no engine answers
        reason = f"no Docker engine answers ({err}); start one with scripts/ensure-docker.sh"
        if os.environ.get("CI") or os.environ.get("SERVECTL_REQUIRE_DOCKER"):
            pytest.fail(reason)
        pytest.skip(reason)
    yield client
    leftovers = client.containers.list(all=True, filters={"label": f"{SESSION_LABEL}={test_session_id}"})
    for container in leftovers:
        container.remove(force=True)
    client.close()


@pytest.fixture(scope="session")
def standin_image(docker_client: Any) -> str:
    from servectl.adapters.docker import DockerSdkEngine
    from servectl.standin.image import build_standin_image

    return build_standin_image(docker=DockerSdkEngine(environ=os.environ, client=docker_client))


@pytest.fixture
def run_container(docker_client: Any, standin_image: str, test_session_id: str) -> Iterator[Callable[..., Any]]:
    import docker.errors

    created: list[Any] = []

    def run(command: list[str] | None = None, *, image: str | None = None, **kwargs: Any) -> Any:
        labels = {SESSION_LABEL: test_session_id, **kwargs.pop("labels", {})}
        name = kwargs.pop("name", None) or f"servectl-test-{uuid.uuid4().hex[:12]}"
        container = docker_client.containers.run(
            image or standin_image, command, name=name, labels=labels, detach=True, **kwargs
        )
        created.append(container)
        return container

    yield run
    for container in created:
        with contextlib.suppress(docker.errors.NotFound):  # a test may have removed it already
            container.remove(force=True)


class _World(Protocol):
    def cleanup(self) -> None: ...


W = TypeVar("W", bound=_World)


@pytest.fixture
def make_world(
    tmp_path: Path, docker_client: Any, standin_image: str, test_session_id: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[Callable[..., W]], W]]:
    """``make_world(World)``: ``World(tmp_path, docker_client, standin_image, test_session_id, monkeypatch)``,
    cleaned up (``cleanup()``) when the test ends, passed or failed."""
    made: list[_World] = []

    def make(cls: Callable[..., W]) -> W:
        world = cls(tmp_path, docker_client, standin_image, test_session_id, monkeypatch)
        made.append(world)
        return world

    try:
        yield make
    finally:
        for world in made:
            world.cleanup()
