"""The fake engine's side of warm standby: SGLang's memory-saver routes and its load, as the stand-in answers them.

:func:`memory_saver_answer` is what :meth:`FakeDockerEngine.http_transport
<servectl.testing.docker.FakeDockerEngine.http_transport>` answers for ``GET /v1/loads``, ``POST
/release_memory_occupation`` and ``POST /resume_memory_occupation``: the paths, the load's keys and the tags come
from SGLang 0.5.23 through :mod:`servectl.profile.memory_saver`'s catalog, the rules are the stand-in's
(``standin/server.py``, ``standin/memory.py``): 400 before the server is ready, a release of a tag released
already or a resume of one not released kills the server (exit 137, the connection closes without an answer),
and while its weights are released its answers are garbage (the chat route reads ``FakeContainer.released``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import httpx


class Releasable(Protocol):
    """What the routes read and change of a fake container (``FakeContainer``): the tags released now."""

    released: frozenset[str]


def memory_saver_answer(
    container: Releasable, ready: bool, request: httpx.Request, *, die: Callable[[], None]
) -> httpx.Response | None:
    """The answer of ``container`` (its server ``ready`` or not) to ``request`` on a memory-saver or load route;
    None: not one of them. ``die`` ends the container (a call SGLang's scheduler does not survive).

    The load shows no request: a fake container serves none long enough to be seen running.

    Raises:
        httpx.RemoteProtocolError: the call killed the server (no answer comes).
    """
    import httpx

    from servectl.profile.memory_saver import load_memory_saver

    saver = load_memory_saver()
    load = saver["load"]
    path = request.url.path
    if path == load["path"]:
        if not ready:
            return httpx.Response(503, json={"detail": "not ready"})
        return httpx.Response(200, json={load["list"]: [{**load["core_defaults"], load["running"]: 0}]})
    which = next((w for w, route in saver["endpoints"].items() if route["path"] == path), None)
    if which is None:
        return None
    if not ready:
        return httpx.Response(400, json={"error": {"message": "The server is not ready yet."}})
    body = json.loads(request.content or b"{}") or {}
    tags = frozenset(body.get("tags") or saver["tags"]["all"])  # none or empty: all (weight_updater.py)
    released = container.released
    if (tags & released) if which == "release" else (tags - released):
        die()
        raise httpx.RemoteProtocolError("Server disconnected without sending a response (fake)", request=request)
    container.released = released | tags if which == "release" else released - tags
    return httpx.Response(200, json=None)
