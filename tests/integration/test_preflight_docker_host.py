"""DockerSdkEngine and PsutilHostProbe against the real Docker engine and this host, and a full preflight
with both (GPUs faked).

The container image is made here from host files (``/bin/sleep`` and its libraries, ``docker import``): no
registry pull. Everything created carries this session's label and is removed at the end, even on failure.
"""

from __future__ import annotations

import gc
import io
import os
import socket
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from servectl.adapters.docker import DockerSdkEngine
from servectl.adapters.gpu import NvmlInventory
from servectl.adapters.host import PsutilHostProbe
from servectl.errors import EngineUnavailable
from servectl.preflight.model import ConflictRef, PreflightRequest, Replacing
from servectl.preflight.run import run_preflight
from servectl.standin.process import free_port
from servectl.testing.fakes import FakeGpuInventory

pytestmark = pytest.mark.integration
docker_sdk = pytest.importorskip("docker")

SESSION = uuid.uuid4().hex[:12]
LABEL = "servectl.test-session"
IMAGE = f"servectl-test-sleep:{SESSION}"


def _rootfs_tar() -> bytes:
    """A root file system holding /bin/sleep and the shared libraries it needs."""
    files = ["/bin/sleep"]
    out = subprocess.run(["ldd", "/bin/sleep"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
        if path.startswith("/"):
            files.append(path)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in files:
            tar.add(os.path.realpath(path), arcname=path.lstrip("/"))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    try:
        api_client = docker_sdk.from_env()
        api_client.ping()
    except docker_sdk.errors.DockerException as err:
        pytest.skip(f"no Docker engine: {err}")
    api_client.api.import_image_from_data(_rootfs_tar(), repository=IMAGE.split(":")[0], tag=SESSION)
    try:
        yield api_client
    finally:
        for container in api_client.containers.list(all=True, filters={"label": f"{LABEL}={SESSION}"}):
            container.remove(force=True)
        api_client.images.remove(IMAGE, force=True)
        api_client.close()


def run_container(client: Any, name: str, **kwargs: Any) -> Any:
    labels = {LABEL: SESSION, **kwargs.pop("labels", {})}
    container = client.containers.run(
        IMAGE, ["/bin/sleep", "300"], name=f"{name}-{SESSION}", labels=labels, detach=True, **kwargs
    )
    container.reload()
    return container


def test_ping_reports_the_engine_version_and_runtimes(client: Any) -> None:
    info = DockerSdkEngine(environ=os.environ, client=client).ping()
    assert info.server_version == client.version()["Version"]
    assert "runc" in info.runtimes or "io.containerd.runc.v2" in info.runtimes


def test_image_lookup_by_tag_and_id_and_a_missing_one(client: Any) -> None:
    facts = DockerSdkEngine(environ=os.environ, client=client)
    by_tag = facts.image(IMAGE)
    assert by_tag is not None and by_tag.id.startswith("sha256:") and IMAGE in by_tag.tags
    by_id = facts.image(by_tag.id)
    assert by_id is not None and by_id.id == by_tag.id
    assert by_tag.id in by_tag.digests()
    assert facts.image(f"servectl-test-none:{SESSION}") is None
    assert facts.image("Not A Valid Reference") is None


def test_containers_report_names_labels_published_ports_and_pids(client: Any) -> None:
    port = free_port()
    container = run_container(
        client, "ports", labels={"servectl.profile": "demo"}, ports={"8000/tcp": ("127.0.0.1", port)}
    )
    facts = DockerSdkEngine(environ=os.environ, client=client)
    facts.ping()
    found = {c.id: c for c in facts.running_containers()}
    info = found[container.id]
    assert info.name == f"ports-{SESSION}" and info.status == "running"
    assert info.labels[LABEL] == SESSION and info.servectl_profile == "demo"
    assert [(p.host_ip, p.host_port, p.container_port) for p in info.ports] == [("127.0.0.1", port, 8000)]
    assert info.pid == container.attrs["State"]["Pid"] and info.gpu_request is None


def test_a_container_pid_maps_to_its_container_id_through_cgroups(client: Any) -> None:
    container = run_container(client, "cgroup")
    pid = container.attrs["State"]["Pid"]
    probe = PsutilHostProbe()
    assert probe.container_id_of(pid) == container.id
    assert probe.process_name(pid) == "sleep"
    assert probe.container_id_of(os.getpid()) != container.id


def test_a_listener_on_a_free_port_names_this_process(client: Any) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        listeners = PsutilHostProbe().listeners(port)
    assert [(item.address, item.port, item.pid) for item in listeners] == [("127.0.0.1", port, os.getpid())]
    assert listeners[0].process_name and "py" in listeners[0].process_name


def test_a_wildcard_listener_in_another_process_blocks_a_loopback_profile(client: Any) -> None:
    code = (
        "import socket,sys,time;s=socket.socket();s.bind(('0.0.0.0',0));s.listen();"
        "print(s.getsockname()[1],flush=True);time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        request = PreflightRequest(
            profile_name="demo",
            gpus_requested=False,
            tp=1,
            port=port,
            host_address="127.0.0.1",
            image_ref=IMAGE,
            model_path="/nonexistent",
        )
        report = run_preflight(
            request=request,
            gpus=FakeGpuInventory.scenario("no_driver"),
            host=PsutilHostProbe(),
            docker=DockerSdkEngine(environ=os.environ, client=client),
        )
        check = report.check("port.free")
        assert check.result == "fail"
        assert check.message.startswith(f"pid {child.pid} python")
        assert check.message.endswith(f" listens on 0.0.0.0:{port}")
        owner = check.facts["owners"][0]
        assert (owner["kind"], owner["pid"], owner["address"], owner["disposition"]) == (
            "process",
            child.pid,
            "0.0.0.0",
            "foreign",
        )
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


def test_full_preflight_names_the_container_on_the_port_and_accepts_it_when_replaced(client: Any) -> None:
    port = free_port()
    container = run_container(client, "bench-old", ports={"30000/tcp": ("127.0.0.1", port)})
    request = PreflightRequest(
        profile_name="demo",
        gpu_indices=(0, 1),
        arch="sm120",
        tp=2,
        port=port,
        host_address="127.0.0.1",
        ipc_host=True,
        image_ref=IMAGE,
        model_path="/nonexistent",
        conflicts=(ConflictRef("container", container.name),),
    )
    facts = DockerSdkEngine(environ=os.environ, client=client)
    report = run_preflight(
        request=request,
        gpus=FakeGpuInventory.scenario("two_free_sm120"),
        host=PsutilHostProbe(),
        docker=facts,
    )
    port_check = report.check("port.free")
    assert port_check.result == "fail"
    assert port_check.message == f"container {container.name} ({container.id[:12]}) publishes 127.0.0.1:{port}"
    assert report.check("conflicts").message == f"conflicting service(s) running: {container.name}"
    # services speaks for servectl's own services only: a container servectl did not start is port.free's
    assert report.check("services").result == "pass"
    assert report.check("image.pinned").result == "warn"  # a candidate with no digest pinned
    assert report.check("docker.engine").result == "pass"

    replaced = PreflightRequest(
        **{**request.__dict__, "conflicts": (), "replacing": Replacing(container_id=container.id, port=port)}
    )
    again = run_preflight(
        request=replaced,
        gpus=FakeGpuInventory.scenario("two_free_sm120"),
        host=PsutilHostProbe(),
        docker=facts,
    )
    assert again.check("port.free").result == "pass"
    assert again.check("services").result == "pass"


# docker-py leaves the socket of a failed connection attempt unclosed; collect it here, inside this test.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_engine_that_does_not_answer_is_engine_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(EngineUnavailable, match=r"Docker engine unreachable at .*start it") as caught:
        DockerSdkEngine(environ=os.environ, timeout_s=2).ping()
    message = caught.value.message
    del caught  # the traceback keeps the SDK's half-made connection alive
    gc.collect()
    assert "\n" not in message


def test_preflight_with_the_real_adapters_never_touches_nvml_without_gpus(client: Any) -> None:
    request = PreflightRequest(
        profile_name="demo",
        gpus_requested=False,
        tp=1,
        port=free_port(),
        image_ref=IMAGE,
        model_path="/nonexistent",
    )
    report = run_preflight(
        request=request,
        gpus=NvmlInventory(),
        host=PsutilHostProbe(),
        docker=DockerSdkEngine(environ=os.environ, client=client),
    )
    assert report.check("docker.engine").result == "pass"
    assert report.check("image.pinned").result == "warn"  # present, not pinned (candidate)
    assert report.check("gpu.present").result == "skipped"
    assert report.gpu_query_seconds is None
