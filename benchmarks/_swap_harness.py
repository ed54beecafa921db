"""What the swap and start-up benchmarks share: stand-in profiles, the hand-written ``docker run`` baseline, an
outside prober of downtime, waiting for a service, weight files on disk.

``write_standin_profile`` writes a stand-in engine's profile, ``up_standins`` starts a few through ``servectl
up``, and ``baseline_argv`` is the plan's own ``docker run`` under another name, the baseline a launcher is
compared with. ``Prober`` and ``wait_serving``
look at a stand-in from outside (``/health``, then ``/v1/models`` for which service answers);
``make_weights`` writes real weight files once and ``evict`` puts them out of the page cache
(``posix_fadvise(DONTNEED)``, checked with ``fincore``), the state of a host whose page cache does not keep them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
PROBE_EVERY_S = 0.01
SHARD_BYTES = 512 * 2**20
WEIGHTS_DIR = Path(tempfile.gettempdir()) / "servectl-bench-weights"


def write_standin_profile(
    folder: Path,
    name: str,
    *,
    session: str,
    image: str,
    port: int,
    delay_s: float,
    swap: bool = False,
    env: dict[str, str] | None = None,
    model_path: str | None = None,
    **sections: Any,
) -> None:
    """A stand-in engine's profile: container ``servectl-<name>``, ``delay_s`` of startup, labelled ``session``.

    ``swap``: one of the services a swap benchmark replaces on one port, so it answers ``/v1/models`` with
    its own name (the prober tells old from new by it) and is stopped within 10 s.
    """
    from servectl.testing.docker import write_test_profile

    model = {"served_name": name} if swap else {}
    if model_path is not None:
        model["path"] = model_path
    write_test_profile(
        folder,
        name,
        port=port,
        session=session,
        image={"ref": image},
        container={"name": f"servectl-{name}", **({"stop_grace_s": 10} if swap else {})},
        engine={"env": {"STANDIN_STARTUP_DELAY_S": f"{delay_s:g}", **(env or {})}},
        **({"model": model} if model else {}),
        **sections,
    )


def up_standins(folder: Path, *, session: str, env: dict[str, str], prefix: str, count: int = 3) -> list[str]:
    """``count`` stand-in services (no startup delay) written into ``folder`` and started by ``servectl up``.

    ``env`` is the environment ``servectl up`` runs in (its ``SERVECTL_PROFILES`` must find ``folder``); the
    containers carry the ``session`` label. Returns the services' names.
    """
    from servectl.standin.process import free_port

    image = standin_image()
    names = [f"{prefix}-{session[-6:]}-{i}" for i in range(count)]
    for name in names:
        write_standin_profile(folder, name, session=session, image=image, port=free_port(), delay_s=0)
        subprocess.run([sys.executable, "-m", "servectl", "up", name], env=env, check=True, capture_output=True)
    return names


def standin_image() -> str:
    """The stand-in image built (or found) on this host's Docker engine: its reference."""
    from servectl.host import Host

    with Host() as host:
        return host.build_standin_image()


def baseline_argv(profile: str, session: str, port: int) -> list[str]:
    """The plan's exact ``docker run`` under another name, servectl's labels swapped for the session's, on ``port``."""
    from servectl.plan.compile import PortBinding, docker_run_argv
    from servectl.plan.resolve import resolve
    from servectl.testing.docker import TEST_SESSION_LABEL

    spec = resolve(profile, environ=os.environ).plan.docker
    spec = replace(
        spec,
        name=f"bench-baseline-{profile}-{uuid.uuid4().hex[:6]}",
        labels={k: v for k, v in spec.labels.items() if not k.startswith("servectl.")} | {TEST_SESSION_LABEL: session},
        ports=(PortBinding("127.0.0.1", port, spec.ports[0].container_port),),
    )
    return docker_run_argv(spec)


class Prober:
    """Asks ``/v1/models`` on ``port`` every 10 ms from a thread; records (time, model or None)."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/v1/models"
        self.health_url = f"http://127.0.0.1:{port}/health"
        self.samples: list[tuple[float, str | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with httpx.Client(timeout=0.5) as client:
            while not self._stop.is_set():
                t = time.perf_counter()
                model: str | None = None
                try:  # serving = /health 200 (503 while starting); /v1/models says which service it is
                    if client.get(self.health_url).status_code == 200:
                        data = client.get(self.url).json().get("data") or [{}]
                        model = data[0].get("id")
                except (httpx.HTTPError, ValueError):
                    model = None
                self.samples.append((t, model))
                self._stop.wait(PROBE_EVERY_S)

    def gap(self, old: str, new: str) -> float:
        """First answer of ``new`` minus the last answer of ``old`` before it."""
        first_new = next(t for t, m in self.samples if m == new)
        last_old = max(t for t, m in self.samples if m == old and t < first_new)
        return first_new - last_old


def wait_serving(port: int, model: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=0.5).status_code != 200:
                raise ValueError("not ready")
            data = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=0.5).json().get("data") or [{}]
            if data[0].get("id") == model:
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.05)
    raise SystemExit(f"{model} did not serve on port {port} within {timeout_s} s")


def make_weights(folder: Path, total_bytes: int) -> list[Path]:
    """Real bytes (random, so that no layer can compress or skip them), in 512 MiB shards; kept between runs."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_bytes((ROOT / "src/servectl/data/examples/demo-model/config.json").read_bytes())
    count = max(1, total_bytes // SHARD_BYTES)
    block = os.urandom(64 * 2**20)
    files = []
    for i in range(1, count + 1):
        path = folder / f"model-{i:05d}-of-{count:05d}.safetensors"
        if not path.exists() or path.stat().st_size != SHARD_BYTES:
            with open(path, "wb") as handle:
                for _ in range(SHARD_BYTES // len(block)):
                    handle.write(block[: len(block) - i] + bytes([i]) * i)  # each shard different
                handle.flush()
                os.fsync(handle.fileno())
        files.append(path)
    for stale in folder.glob("*.safetensors"):
        if stale not in files:
            stale.unlink()
    return files


def evict(files: list[Path]) -> int:
    """Put the files' pages out of the page cache; the bytes still resident afterwards (``fincore``)."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return resident_bytes(files)


def resident_bytes(files: list[Path]) -> int:
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", *map(str, files)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return sum(int(line.strip()) for line in out.splitlines() if line.strip())


def bench_folders(prefix: str) -> tuple[str, Path, Path]:
    """A session id (the test label every container carries) and fresh profiles and state folders, set in the env."""
    session = f"bench-{uuid.uuid4().hex[:12]}"
    work = Path(tempfile.mkdtemp(prefix=f"servectl-bench-{prefix}-"))
    folder, home = work / "profiles", work / "home"
    os.environ.update(SERVECTL_PROFILES=str(folder), SERVECTL_HOME=str(home))
    return session, folder, home
