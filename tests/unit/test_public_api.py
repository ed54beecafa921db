"""The public API: ``servectl.__all__`` is what docs/api.md documents, every error class is exported, each
module function is a thin wrapper over the ``Host`` method of the same parameters (built, called, closed), the
host closes only what it opened, and every ``Host`` method runs on a ``FakeHost``."""

from __future__ import annotations

import ast
import builtins
import collections.abc
import inspect
import json
import os
import pathlib
import re
import subprocess
import sys
import typing
from collections.abc import Callable, Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any, ClassVar

import pytest

import servectl
import servectl.api
import servectl.errors
import servectl.testing
from servectl.host import Host
from servectl.testing import FakeHost, FakeHttp
from servectl.testing.docker import FakeDockerEngine, dump_answer, sglang_like_script
from servectl.testing.inspect import container_inspect, image_inspect

ROOT = Path(__file__).resolve().parents[2]
API_DOC = ROOT / "docs" / "api.md"
#: Host methods without a module function of the same name, and the function that wraps each instead; and the
#: methods with no function (``close`` aside): api.py's tables, which scripts/gen_api.py writes the functions from.
RENAMED = servectl.api._RENAMED
GENERATORS = {"logs", "gateway_logs"}  # their module function keeps the host open while the lines are read
NO_FUNCTION = set(servectl.api._HOST_ONLY) - {"close"}
MODULE_ONLY = {"run_bench", "run_qualify", "from_env"}  # measure a server at a URL; build a host
#: The commands (``close`` is the host's own lifecycle).
HOST_METHODS = sorted(
    n for n, v in inspect.getmembers(Host, inspect.isfunction) if not n.startswith("_") and n != "close"
)


def public_functions() -> list[str]:
    return sorted(n for n in servectl.__all__ if n != "__version__" and inspect.isfunction(getattr(servectl, n)))


# -- what is exported ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(servectl.__all__))
def test_each_public_name_imports(name: str) -> None:
    value = getattr(servectl, name)
    assert value is not None
    if callable(value):
        assert value.__doc__, f"servectl.{name} has no docstring"


def test_the_exports_are_exactly_what_docs_api_documents() -> None:
    text = API_DOC.read_text(encoding="utf-8")
    spans = re.findall(r"`([^`\n]+)`", text)
    documented = {word for span in spans for word in re.findall(r"[A-Za-z_]\w*", span)}
    exported = set(servectl.__all__) - {"__version__"}
    assert sorted(exported - documented) == [], "exported but not in docs/api.md"
    # every type or function the page names as servectl's (`servectl.X`, or a capitalised `X`) is exported
    named = {n for n in re.findall(r"`servectl\.([A-Za-z]\w*)`", text) if not find_spec(f"servectl.{n}")}  # modules
    types = set(re.findall(r"`([A-Z][A-Za-z]*[a-z][A-Za-z]*)\b", text))  # `Host`, `SwapResult(...)`
    testing = set(__import__("servectl.testing", fromlist=["__all__"]).__all__)
    python = {n for module in (builtins, typing, collections.abc, pathlib) for n in dir(module)}  # `Iterator[str]`
    assert sorted((named | types) - exported - testing - python) == [], (
        "docs/api.md names what servectl does not export"
    )


def test_every_error_class_of_servectl_errors_is_exported_from_servectl() -> None:
    classes = {
        name
        for name, value in vars(servectl.errors).items()
        if inspect.isclass(value) and value.__module__ == "servectl.errors" and not name.startswith("_")
    }
    assert len(classes) > 15
    assert sorted(classes - set(servectl.__all__)) == []
    for name in classes:
        assert getattr(servectl, name) is getattr(servectl.errors, name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'api_v2'"):
        _ = servectl.api_v2  # type: ignore[attr-defined]


def test_import_servectl_loads_no_heavy_module() -> None:
    code = "import json, sys, servectl; print(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    loaded = set(json.loads(out))
    heavy = {"docker", "pynvml", "httpx", "matplotlib", "pydantic", "yaml", "typer", "rich"}
    assert sorted(loaded & heavy) == []
    # only the lazy-export mechanism itself and the version leaf (standard library only) load with the package
    assert sorted(m for m in loaded if m.startswith("servectl.")) == ["servectl.lazy", "servectl.version"]


# -- one shape for every command ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", [*public_functions(), *(f"Host.{m}" for m in HOST_METHODS)])
def test_public_functions_and_methods_take_keyword_arguments_only(name: str) -> None:
    target = getattr(Host, name[5:]) if name.startswith("Host.") else getattr(servectl, name)
    parameters = [p for p in inspect.signature(target).parameters.values() if p.name != "self"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters), name


def test_one_type_per_parameter_name_across_the_host() -> None:
    """``force`` is always check ids, ``name`` always a profile name, ``lock_timeout_s`` always seconds."""
    seen: dict[str, set[str]] = {}
    for method in HOST_METHODS:
        for p in inspect.signature(getattr(Host, method)).parameters.values():
            if p.name != "self":
                seen.setdefault(p.name, set()).add(str(p.annotation))
    assert seen["force"] == {"Iterable[str]"}
    assert seen["name"] <= {"str", "str | None"}
    assert seen["lock_timeout_s"] == {"float | None"}
    for leaked in ("resolved", "loaded", "target", "profile", "wait_s"):
        assert leaked not in seen, f"a Host method still takes {leaked}="


def test_every_host_method_has_its_module_function_with_the_same_parameters() -> None:
    functions = set(public_functions())
    for method in HOST_METHODS:
        if method in NO_FUNCTION:
            continue
        function = RENAMED.get(method, method)
        assert function in functions, f"Host.{method} has no servectl.{function}"
        host_params = [p for p in inspect.signature(getattr(Host, method)).parameters if p != "self"]
        # (compile_plan and the measuring functions also take the environment, which a host holds)
        params = [p for p in inspect.signature(getattr(servectl, function)).parameters if p != "environ"]
        assert host_params == params, method
    wrapped = {RENAMED.get(m, m) for m in HOST_METHODS}
    assert sorted(functions - wrapped - MODULE_ONLY) == []


class RecordingHost:
    """Stands in for ``Host`` inside ``servectl.api``: records the call, answers a marker, counts closes."""

    made: ClassVar[list[RecordingHost]] = []

    def __init__(self, **options: Any) -> None:
        self.options, self.calls, self.closed = options, [], 0
        RecordingHost.made.append(self)

    def __enter__(self) -> RecordingHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed += 1

    def __getattr__(self, method: str) -> Any:
        def call(**kwargs: Any) -> Any:
            self.calls.append((method, kwargs))
            return iter(["a line"]) if method in GENERATORS else ("answer of", method)

        return call


@pytest.mark.parametrize("method", [m for m in HOST_METHODS if m not in NO_FUNCTION])
def test_each_module_function_builds_a_host_calls_its_method_once_and_closes_the_host(
    method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import servectl.api

    monkeypatch.setattr(servectl.api, "Host", RecordingHost)
    RecordingHost.made = []
    function = getattr(servectl.api, RENAMED.get(method, method))
    kwargs = {
        p.name: f"value of {p.name}" for p in inspect.signature(function).parameters.values() if p.name != "environ"
    }
    answer = function(**kwargs)
    if method in GENERATORS:
        answer = list(answer)
        assert answer == ["a line"]
    else:
        assert answer == ("answer of", method)
    [host] = RecordingHost.made
    assert host.calls == [(method, kwargs)] and host.closed == 1
    if "environ" in inspect.signature(function).parameters:  # the environment goes to the host, not the method
        RecordingHost.made = []
        function(**kwargs, environ={"SERVECTL_HOME": "/nowhere"})
        [host] = RecordingHost.made
        assert host.options == {"environ": {"SERVECTL_HOME": "/nowhere"}} and host.calls == [(method, kwargs)]


def test_the_host_measures_through_its_own_engine_and_inventory(
    host: FakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    import servectl.bench.qualify.target
    import servectl.bench.target

    seen: list[tuple[str, object]] = []

    def refuse(ctx: object, *, name: str, **kwargs: object) -> None:
        seen.append((name, ctx))
        raise servectl.UsageError(f"{name} does not run (test)")

    monkeypatch.setattr(servectl.bench.target, "bench_target", refuse)
    monkeypatch.setattr(servectl.bench.qualify.target, "qualify_target", refuse)
    for measure in (host.bench, host.qualify):
        with pytest.raises(servectl.UsageError, match="does not run"):
            measure(name="demo")
    assert seen == [("demo", host.ctx)] * 2


# -- the host owns what it opens ----------------------------------------------------------------------------
def test_a_host_opens_nothing_until_a_command_needs_it_and_closes_only_what_it_opened(
    profile_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import servectl.adapters.docker as docker_adapter
    import servectl.adapters.gpu as gpu_adapter

    opened: list[str] = []
    closed: list[str] = []

    class Engine(FakeDockerEngine):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__()
            opened.append("docker")

        def close(self) -> None:
            closed.append("docker")

    class Nvml:
        def __init__(self) -> None:
            opened.append("nvml")

        def snapshot(self) -> Any:
            raise servectl.GpuUnavailable("no driver (test)")

        def close(self) -> None:
            closed.append("nvml")

    monkeypatch.setattr(docker_adapter, "DockerSdkEngine", Engine)
    monkeypatch.setattr(gpu_adapter, "NvmlInventory", Nvml)
    with servectl.from_env() as host:
        assert host.compile_plan(name="demo").profile == "demo"
        assert opened == []  # compiling needs no adapter
        assert host.services() == []
        assert opened == ["docker"]
        host.down()  # nothing runs: no card to wait on, no driver opened
        assert opened == ["docker"]
        with pytest.raises(servectl.GpuUnavailable, match="no driver"):
            host.gpus.snapshot()  # the first read opens NVML
    assert sorted(opened) == sorted(closed) == ["docker", "nvml"]
    with pytest.raises(servectl.UsageError, match="closed"):
        host.services()
    given = Engine()
    with Host(docker=given, state_dir=profile_dir.parent / "home") as mine:
        assert mine.services() == []
    assert closed.count("docker") == 1  # the caller's engine is the caller's to close


def test_the_module_functions_open_and_close_the_real_adapters(
    profile_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import servectl.adapters.docker as docker_adapter
    import servectl.adapters.gpu as gpu_adapter

    events: list[str] = []

    class NoDriver:
        def snapshot(self) -> Any:
            raise servectl.GpuUnavailable("no driver (test)")

        def close(self) -> None:
            events.append("close nvml")

    monkeypatch.setattr(gpu_adapter, "NvmlInventory", NoDriver)

    class Engine(FakeDockerEngine):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__()
            events.append("open")

        def close(self) -> None:
            events.append("close")

    monkeypatch.setattr(docker_adapter, "DockerSdkEngine", Engine)
    assert servectl.services() == [] and servectl.status().services == []
    assert servectl.down(name="demo").stopped == ()
    with pytest.raises(servectl.UsageError, match="no servectl service named demo"):
        list(servectl.logs(name="demo"))
    assert events == ["open", "close"] * 4  # down of a profile that does not run reads no card: NVML unopened


def test_a_host_opens_no_driver_for_profiles_without_gpus(profile_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 40: the GPU inventory has one door, opened at its first read; preflight, up, swap and down of the
    demo profiles (no GPUs) read no card, so NVML is never opened (preflight, swap and down opened it)."""

    import servectl.adapters.gpu as gpu_adapter
    from servectl.testing import FakeConflicts, FakeHostProbe
    from servectl.testing.host import STANDIN_IMAGE

    opened: list[str] = []

    class Nvml:
        def __init__(self) -> None:
            opened.append("nvml")

        def snapshot(self) -> Any:
            raise AssertionError("no card is read")

    monkeypatch.setattr(gpu_adapter, "NvmlInventory", Nvml)
    engine = FakeDockerEngine(
        images={STANDIN_IMAGE}, script_for=lambda _: sglang_like_script(0.1), sleep=lambda _: None
    )
    with (
        FakeHttp(engine.http_transport()) as http,
        Host(
            docker=engine,
            host_probe=FakeHostProbe(model_folders_from_disk=True),
            state_dir=profile_dir.parent / "home",
            http=http,
            conflicts=FakeConflicts(),
            environ=os.environ,
        ) as host,
    ):
        report = host.preflight(name="demo")
        gpu_present = next(c for c in report.checks if c.id == "gpu.present")
        assert (report.exit_code, gpu_present.result) == (0, "skipped")
        assert host.up(name="demo").action == "started"
        assert host.swap(name="demo-rollback").outcome == "swapped"
        assert [s.profile for s in host.down(name="demo-rollback").stopped] == ["demo-rollback"]
    assert opened == []


# -- every method on fakes ----------------------------------------------------------------------------------
@pytest.fixture
def host(profile_dir: Path) -> Iterator[FakeHost]:
    with FakeHost(state_dir=profile_dir.parent / "home") as fake:
        yield fake


def test_profile_methods_on_a_host(host: FakeHost) -> None:
    assert host.load_profile(name="demo").profile.name == "demo"
    plan = host.compile_plan(name="demo")
    assert plan.profile == "demo" and plan.docker.image == "servectl-standin:latest"
    shown = host.dry_run(name="demo")  # compiled now, then from the host's plan cache: the same plan
    assert shown.plan.plan_hash == host.dry_run(name="demo").plan.plan_hash == plan.plan_hash
    assert "docker run" in shown.script and list(host.plan_cache.folder.glob("*.json"))
    names = [row.name for row in host.profiles()]
    assert names.index("demo") < names.index("demo-rollback")
    [validation] = host.validate(names=["demo"])
    assert validation.name == "demo" and validation.error is None


def test_up_services_status_logs_watch_and_down_on_a_fake_host(host: FakeHost) -> None:
    phases: list[str] = []
    reports: list[servectl.PreflightReport] = []
    started = host.up(name="demo", on_phase=lambda p: phases.append(p.phase), on_report=reports.append)
    assert started.action == "started" and "ready" in phases and reports[0].exit_code == 0
    [service] = host.services()
    assert (service.profile, service.state, service.port) == ("demo", "ready", 8190)
    assert [s.container_id for s in host.status().services] == [service.container_id]
    assert any("The server is fired up and ready to roll!" in line for line in host.logs(name="demo"))
    view = next(host.watch(interval_s=1.0))
    assert [s.profile for s in view.services] == ["demo"] and len(view.cards) == 2
    assert host.up(name="demo").action == "already-running"
    assert [s.profile for s in host.down(name="demo").stopped] == ["demo"]
    assert host.engine.containers == {}


def test_swap_rollback_rollback_check_and_recover_on_a_fake_host(host: FakeHost) -> None:
    host.up(name="demo")
    [check] = host.rollback_check(names=["demo"])
    assert (check.profile, check.target, check.ok) == ("demo", "demo-rollback", True)
    events: list[servectl.PhaseEvent] = []
    swapped = host.swap(name="demo-rollback", on_phase=events.append)
    assert (swapped.outcome, swapped.to_profile) == ("swapped", "demo-rollback")
    assert {e.phase for e in events} >= {"preflight", "stop-old", "start-target"}
    back = host.rollback()
    assert (back.outcome, back.from_profile, back.to_profile) == ("swapped", "demo-rollback", "demo")
    assert host.recover().outcome == "nothing"
    with pytest.raises(servectl.UsageError, match="no-such-check"):
        host.swap(name="demo-rollback", force=["no-such-check"])
    assert [s.profile for s in host.services()] == ["demo"]


def test_a_failing_swap_target_raises_swap_rolled_back_with_the_previous_service_back(profile_dir: Path) -> None:
    crash = sglang_like_script(0.1, crash_at="weights", exit_code=3)
    engine = FakeDockerEngine(
        images={"servectl-standin:latest"},
        script_for=lambda spec: crash if "rollback" in spec.name else sglang_like_script(0.1),
        sleep=lambda s: None,
    )
    with FakeHost(state_dir=profile_dir.parent / "home", engine=engine) as host:
        host.up(name="demo")
        with pytest.raises(servectl.SwapRolledBack) as caught:
            host.swap(name="demo-rollback")
        assert isinstance(caught.value, servectl.SwapError) and caught.value.exit_code == 4
        assert [s.profile for s in host.services()] == ["demo"]


def test_preflight_and_doctor_on_a_fake_host(host: FakeHost) -> None:
    report = host.preflight(name="demo", force=["port.free"])
    assert report.exit_code == 0 and [c.id for c in report.checks if c.forced] == ["port.free"]
    doctor = host.doctor()
    assert doctor.line("docker.engine").outcome == "ok"


def test_render_and_promote_on_a_fake_host(host: FakeHost, profile_dir: Path) -> None:
    rendered = host.render(name="demo", to="compose", out="-")
    assert rendered.path is None and "servectl-standin:latest" in rendered.text
    assert host.render(name="demo", to="k8s").path == profile_dir.parent / "k8s" / "demo.yaml"
    with pytest.raises(servectl.UsageError, match="unknown render target"):
        host.render(name="demo", to="nomad")
    with pytest.raises(servectl.ServectlError, match="bench"):
        host.promote(name="demo", evidence_dir=profile_dir.parent / "no-evidence")


def test_a_host_reads_the_extracted_catalogs_of_its_own_catalog_folder(profile_dir: Path, tmp_path: Path) -> None:
    """Issue 40: flag_catalog and diff_catalogs of an image look its extracted catalog up in the folder the
    host's environ names (SERVECTL_CATALOG_CACHE), not the process's (they said 'run servectl catalog extract')."""
    import json

    from servectl.profile.catalog import CATALOG_DIR, FlagCatalog
    from servectl.profile.catalog_store import ImageSource, store_catalog

    shipped = FlagCatalog.available()[-1]
    document = json.loads((CATALOG_DIR / f"{shipped}.json").read_text(encoding="utf-8"))
    cache = tmp_path / "host-catalogs"
    store_catalog(document, ImageSource(id="sha256:" + "ab" * 32, refs=("example/sglang:1",)), directory=cache)
    assert "SERVECTL_CATALOG_CACHE" not in os.environ
    environ = {**os.environ, "SERVECTL_CATALOG_CACHE": str(cache)}
    with FakeHost(state_dir=tmp_path / "state", environ=environ) as host:
        assert host.flag_catalog(name="example/sglang:1").option("--tp") is not None
        label_a, label_b, changes = host.diff_catalogs(a=shipped, b="example/sglang:1")
        assert (label_a, label_b.split(" ")[0], changes) == (shipped, "example/sglang:1", [])


def test_catalog_methods_on_a_fake_host(host: FakeHost) -> None:
    shipped = host.load_profile(name="demo").profile.engine.catalog
    assert host.flag_catalog(name=shipped).option("--tp") is not None
    verdict = host.validate_in_image(name="demo").verdict
    assert verdict.parsed and verdict.image == "servectl-standin:latest"
    label_a, label_b, changes = host.diff_catalogs(a=shipped, b=shipped, name="demo")
    assert label_a == label_b and changes == []
    with pytest.raises(servectl.ServectlError):
        host.extract_catalog(image="example/absent:1")  # not on the fake engine


def test_extract_catalog_on_a_fake_host_reads_the_images_parser(profile_dir: Path) -> None:
    from servectl.adapters.docker import ImageInfo

    image = ImageInfo(id="sha256:" + "ab" * 32, tags=("example/sglang:1",), repo_digests=())
    document = {"sglang_version": "0.5.23", "options": []}
    engine = FakeDockerEngine(images=[image], oneshot=lambda image, command: dump_answer(document))
    with FakeHost(state_dir=profile_dir.parent / "home", engine=engine) as host:
        try:
            result = host.extract_catalog(image="example/sglang:1", python="python3")
        except servectl.ServectlError as err:  # the dump format is engine_image's; the host only routes it
            assert "example/sglang:1" in str(err)
        else:
            assert result.image.id == image.id


def test_report_verify_and_registry_export_on_a_fake_host(
    host: FakeHost, tmp_path: Path, write_profile: Callable[[str, str], Path]
) -> None:
    from finding_fixtures import evidence

    bench, qualify = evidence(tmp_path, write_profile)
    with pytest.raises(servectl.UsageError, match="status: candidate, not promoted"):
        host.export_registry(name="f", evidence_dir=bench)
    finding = host.write_report(name="f", evidence_dir=bench, qualification_dir=qualify, out_dir=tmp_path / "fd")
    assert isinstance(finding, servectl.ReportResult) and finding.edition == 1
    verified = host.verify_finding(folder=finding.folder)
    assert isinstance(verified, servectl.VerifyResult) and verified.ok and verified.recounted > 0
    host.promote(name="f", evidence_dir=finding.folder)  # promoted on the finding's copies
    exported = host.export_registry(name="f", out=tmp_path / "f-sweep.json")
    assert isinstance(exported, servectl.RegistryExport) and exported.path == tmp_path / "f-sweep.json"
    assert [r["prompt_tokens_target"] for r in exported.document["rows"]] == [4096, 8192]


def test_adopt_and_diff_container_on_a_fake_host(host: FakeHost, profile_dir: Path) -> None:
    data = container_inspect(
        ["python3", "-m", "sglang.launch_server", "--model-path", "/model", "--host", "0.0.0.0", "--port", "30000"],
        binds=[("/srv/m", "/model", True)],
        ports={30000: ("127.0.0.1", 30000)},
    )
    host.engine.documents["sglang-hand"] = host.engine.documents[data["Id"]] = data
    host.engine.image_documents[data["Image"]] = image_inspect()
    dry = host.adopt(container="sglang-hand", name="hand", dry_run=True)
    assert not dry.written and not (profile_dir / "hand.yaml").exists()
    written = host.adopt(container="sglang-hand", name="hand")
    assert written.path == profile_dir / "hand.yaml"
    with pytest.raises(servectl.UsageError, match="already exists"):
        host.adopt(container="sglang-hand", name="hand")
    assert host.adopt(container="sglang-hand", name="hand", overwrite=True).backup is not None
    assert host.diff_container(name="hand", container="sglang-hand") == []


def test_gateway_methods_on_a_fake_host(host: FakeHost, profile_dir: Path) -> None:
    config = profile_dir.parent / "gateway.yaml"
    config.write_text(f"aliases: {{chat: [demo]}}\nkeys_file: {profile_dir.parent / 'keys.json'}\n")
    created = host.create_gateway_key(key_name="ci", aliases=["chat"], budget="5/day", config_file=config)
    assert created.key.startswith("sk-") and created.keys_file == profile_dir.parent / "keys.json"
    assert created.key not in created.keys_file.read_text() and str(created.entry.budget) == "5/day"
    with pytest.raises(servectl.UsageError, match="not in the gateway file's aliases"):
        host.create_gateway_key(key_name="other", aliases=["nope"], config_file=config)
    [row] = host.gateway_keys(config_file=config)
    assert (row["name"], row["aliases"], row["budget"], row["requests_total"]) == ("ci", ["chat"], "5/day", 0)
    assert host.revoke_gateway_key(key_name="ci", config_file=config).name == "ci"
    assert host.gateway_keys(config_file=config) == []
    # no gateway container on the fake engine, none answering in the state folder
    default_file = servectl.paths.user_profiles_dir(host.environ).parent / "gateway.yaml"
    # with no gateway file each profile is an alias of itself: a key for another alias is refused, naming them
    with pytest.raises(servectl.UsageError, match=r"--aliases: chat not in the gateway's aliases \(default, demo"):
        host.create_gateway_key(key_name="laptop", aliases=["chat"])
    assert host.init_gateway_file() == default_file and "chat: [demo, demo-rollback]" in default_file.read_text()
    with pytest.raises(servectl.UsageError, match="exists"):
        host.init_gateway_file()
    assert host.create_gateway_key(key_name="laptop", aliases=["chat"]).entry.aliases == ("chat",)
    default_file.unlink()
    assert host.gateway_status() == servectl.GatewayStatus(container=None, live=None, config_file=default_file)
    assert host.gateway_status().to_dict() == {
        "container": None,
        "live": None,
        "config_file": str(default_file),
        "config_file_present": False,
    }
    assert host.gateway_down() is None
    with pytest.raises(servectl.ServectlError, match="no gateway container"):
        host.gateway_logs()
    missing = profile_dir.parent / "absent.yaml"
    for start in (host.gateway_run, host.gateway_up):  # the file is read before anything listens or builds
        with pytest.raises(servectl.ProfileError, match="no such gateway file"):
            start(config_file=missing)


def test_show_diff_schema_catalogs_and_the_gateway_file_on_a_fake_host(host: FakeHost, profile_dir: Path) -> None:
    shown = host.show(name="demo")
    assert shown.name == "demo" and shown.data["name"] == "demo" and shown.chain[0].name == "demo.yaml"
    assert shown.evidence() == []  # no evidence recorded
    diff = host.diff_profiles(a="demo", b="demo-rollback")
    assert diff.lines and len(diff.lines) == len(diff.changes)
    assert diff.to_dict()["changes"][0] == dict(zip(("field", "a", "b"), diff.changes[0], strict=True))
    assert host.diff_profiles(a="demo", b="demo").changes == []
    assert host.profile_schema()["additionalProperties"] is False
    listed = host.catalogs()
    assert shown.loaded.profile.engine.catalog in [c.name for c in listed if c.source == "shipped"]
    assert host.check_gateway_file() is None  # none beside the profiles
    bad = profile_dir.parent / "gateway.yaml"
    bad.write_text("listen: nowhere\n")
    checked = host.check_gateway_file(config_file=bad)
    assert checked is not None and checked.path == bad and "listen" in " ".join(checked.problems)


def test_completions_read_the_host_search_path_and_open_no_adapter(
    profile_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import servectl.adapters.docker as docker_adapter
    import servectl.adapters.gpu as gpu_adapter

    def never(**kwargs: Any) -> Any:
        raise AssertionError("completion opened an adapter")

    monkeypatch.setattr(docker_adapter, "DockerSdkEngine", never)
    monkeypatch.setattr(gpu_adapter, "NvmlInventory", never)
    (profile_dir / "mine-a.yaml").write_text("name: [unclosed\n")  # completes by file name, never parsed
    (profile_dir / "_mine-base.yaml").write_text("name: base\n")  # a base is no runnable profile
    extra = profile_dir.parent / "extra"
    extra.mkdir()
    (extra / "mine-b.yaml").write_text("")
    environ = {"SERVECTL_PROFILES": str(extra), "SERVECTL_HOME": str(profile_dir.parent / "home")}
    with Host(environ=environ) as host:
        assert host.completions(of="profile", incomplete="mine") == ["mine-a", "mine-b"]  # the host's environ
        assert host.completions(of="check", incomplete="gpu.v") == ["gpu.vram_reserve"]
        assert host.completions(of="flag", incomplete="--speculative-num-s") == ["speculative-num-steps"]
        assert host.completions(of="flag", incomplete="speculative-num-s") == ["speculative-num-steps"]
        catalogs = host.completions(of="catalog", incomplete="")
        assert catalogs[0].startswith("sglang-") and "mine-b" in catalogs and "demo" in catalogs
        assert host.completions(of="catalog", incomplete="sglang") == [c for c in catalogs if c.startswith("sglang")]
    assert servectl.completions(of="profile", incomplete="mine") == ["mine-a"]  # os.environ: no SERVECTL_PROFILES


def test_render_all_build_standin_and_compare_bench_on_a_fake_host(
    host: FakeHost, profile_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import servectl.render.files
    import servectl.standin.image

    project = profile_dir.parent / "project"  # a source checkout holding the shipped demo profiles
    (project / "profiles").mkdir(parents=True)
    for name in ("demo", "demo-rollback"):
        (project / "profiles" / f"{name}.yaml").write_bytes((ROOT / "profiles" / f"{name}.yaml").read_bytes())
    (project / "compose").mkdir()
    from servectl.render.yaml_out import GENERATED_MARK

    (project / "compose" / "gone.yaml").write_text(f"# {GENERATED_MARK}\n")  # its profile is gone
    monkeypatch.setattr(servectl.render.files, "shipped_project_dir", lambda: project)
    rendered = host.render_all(to="compose")
    assert sorted(f.path.name for f in rendered.files if f.path is not None) == ["demo-rollback.yaml", "demo.yaml"]
    assert all(f.target == "compose" and f.path is not None and f.path.exists() for f in rendered.files)
    assert rendered.removed == (project / "compose" / "gone.yaml",) and not (project / "k8s").exists()

    built = host.build_standin_image()  # through the fake engine: recorded, no root filesystem written
    assert built == servectl.standin.image.standin_image_ref() and host.engine.imported == [built]
    assert host.engine.image_present("servectl-standin:latest")
    assert host.build_standin_image() == built and host.engine.imported == [built]  # found, not built again
    host.build_standin_image(rebuild=True)
    assert host.engine.imported == [built, built]
    with pytest.raises(servectl.UsageError, match="no-run"):
        host.compare_bench(runs=[profile_dir.parent / "no-run"])


def test_bench_and_qualify_on_a_fake_host_refuse_a_profile_that_does_not_run(host: FakeHost) -> None:
    for measure in (host.bench, host.qualify):
        with pytest.raises(servectl.ServectlError, match="demo"):
            measure(name="demo")


def test_the_url_measurements_need_no_host() -> None:
    from bench_fakes import FakeOpenAIServer, ScriptedClock

    from servectl.bench.qualify.suite import load_suite, suite_path

    server = FakeOpenAIServer(clock=ScriptedClock())
    settings = servectl.BenchSettings(url="http://fake:8180", prompt_tokens=(1024,), repeats=1, max_tokens=8)
    assert server.clock is not None
    report = servectl.run_bench(settings=settings, transport=server.transport(), clock=server.clock)
    assert isinstance(report, servectl.BenchReport) and report.measured_requests == 1
    # run_qualify against a server is covered by test_qualify_gates (on the stand-in); here: it is that function
    from servectl.bench.qualify.runner import run_qualify

    assert servectl.run_qualify is run_qualify
    assert servectl.QualifySettings(url="http://h:1/v1", suite=load_suite(suite_path(None))).url == "http://h:1"


def test_every_host_method_is_called_by_a_test_of_this_file() -> None:
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    called = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "host"
    }
    called |= {"bench", "qualify", "gateway_run", "gateway_up"}  # through `measure` and `start` above
    assert sorted(set(HOST_METHODS) - called) == []


def test_readme_python_example_runs(profile_dir: Path) -> None:
    """The README's example, up to (not including) the lines that open the real adapters."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(import servectl\n.*?)```", readme, re.S)
    assert block is not None, "README.md lost its Python API example"
    lines = block.group(1).splitlines()
    pure = "\n".join(lines[: next(i for i, line in enumerate(lines) if "from_env(" in line)])
    namespace: dict[str, object] = {}
    exec(compile(pure, "README.md", "exec"), namespace)  # our own README, on purpose
    plan = namespace["plan"]
    assert isinstance(plan, servectl.LaunchPlan) and plan.profile == "demo"
    assert plan.engine_argv and plan.plan_hash


#: The module functions written out in api.py: they also take ``environ``, which a host holds, not its methods.
WRITTEN_OUT = {"compile_plan", "dry_run", "run_profile_bench", "run_profile_qualify", "write_report"}


def test_the_other_module_functions_are_derived_from_their_method_signature_and_docstring_written_once() -> None:
    import servectl.api

    tree = ast.parse(Path(servectl.api.__file__).read_text(encoding="utf-8"))
    written = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}
    assert written == WRITTEN_OUT, "a module function that only calls its Host method is _function(Host.x)"
    for method in HOST_METHODS:
        function_name = RENAMED.get(method, method)
        if method in NO_FUNCTION or function_name in WRITTEN_OUT:
            continue
        function, host_method = getattr(servectl, function_name), getattr(Host, method)
        expected = list(inspect.signature(host_method).parameters.values())[1:]  # without self
        assert list(inspect.signature(function).parameters.values()) == expected, function_name
        assert inspect.signature(function).return_annotation == inspect.signature(host_method).return_annotation
        assert function.__name__ == function_name and function.__module__ == "servectl.api"
        assert inspect.getdoc(host_method) in (function.__doc__ or ""), function_name  # help(servectl.up) shows it
    for method in GENERATORS:  # the host stays open while the lines are read
        assert inspect.isgeneratorfunction(getattr(servectl, method)), method


def only_here(tmp_path: Path, extra_lines: str = "") -> Path:
    """A folder with profile ``onlyhere`` (the demo, on its base ``_onlybase`` there too), for a host's environ."""
    extra = tmp_path / "extra"
    extra.mkdir()
    shipped = (Path(servectl.__file__).parent / "data" / "profiles" / "demo.yaml").read_text()
    model = Path(servectl.__file__).parent / "data" / "examples" / "demo-model"  # so that it can start, too
    base = shipped.replace("name: demo\n", "name: _onlybase\n", 1).replace("../examples/demo-model", str(model))
    (extra / "_onlybase.yaml").write_text(base)
    (extra / "onlyhere.yaml").write_text("extends: _onlybase\nname: onlyhere\n" + extra_lines)
    return extra


class _Recording:
    """A host whose method names are recorded as they are looked up (which methods a test called)."""

    def __init__(self, host: Host) -> None:
        self._host = host
        self.called: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        self.called.add(name)
        return getattr(self._host, name)


#: Host methods that look no profile up by name, each with why the search-path test leaves it out.
TAKE_NO_PROFILE = {
    "build_standin_image": "builds the stand-in image from servectl's own files",
    "catalogs": "lists the shipped and stored flag catalogs",
    "campaign_status": "reads a campaign folder's database",
    "export_campaign": "reads a campaign folder's record and bench artifacts",
    "run_campaign": "its profile lookups are check_campaign's and the swaps' (both tested on the host's path)",
    "resume_campaign": "run_campaign on the file a campaign folder names",
    "check_campaign": "its base and variants are looked up on the host's path: test_check_campaign_reads_the_host_...",
    "check_gateway_file": "checks a gateway file against its schema",
    "close": "closes the adapters",
    "compare_bench": "reads bench --out folders and reference CSVs",
    "create_gateway_key": "writes the gateway's key file",
    "doctor": "checks the machine",
    "extract_catalog": "reads an image's SGLang",
    "gateway_down": "stops the gateway container",
    "gateway_keys": "reads the gateway's key file",
    "gateway_logs": "reads the gateway container's logs",
    "gateway_run": "serves until stopped; its profile lookups go through service_upstreams (tested beside)",
    "gateway_status": "reads the gateway container",
    "gateway_up": "starts the gateway container (its image is built; profiles are looked up inside it)",
    "init_gateway_file": "writes the shipped example gateway file",
    "profile_schema": "the JSON schema of every profile",
    "recover": "settles a killed transaction from its journal",
    "render_all": "renders the shipped project's profiles",
    "revoke_gateway_key": "writes the gateway's key file",
    "services": "lists containers (status, tested here, is the one that resolves their profiles)",
    "verify_finding": "reads a finding folder",
    "watch": "follows the services (status's rows, once a second)",
}


def test_gateway_up_polls_on_the_hosts_clock(tmp_path: Path) -> None:
    """gateway up waited for the container with time.sleep/time.monotonic: now on the host's clock (issue 40)."""
    from servectl.service.clocks import Clocks
    from servectl.testing.swap import FakeClock

    clock = FakeClock()
    tmp_path.chmod(0o755)  # the gateway container's uid reads the folders (root owns them here)
    (tmp_path / "gateway.yaml").write_text("listen: 127.0.0.1:18089\naliases:\n  chat: [demo]\nauth: none\n")
    clocks = Clocks(monotonic=clock, wall=clock, sleep=clock.advance)
    with (
        FakeHost(state_dir=tmp_path / "home", clocks=clocks) as h,
        pytest.raises(servectl.ServectlError, match="did not start"),
    ):
        h.gateway_up(config_file=tmp_path / "gateway.yaml", timeout_s=3.0)
    assert clock.now > 1003.0  # it polled past its deadline on the fake clock, with no real wait


def test_watch_pauses_between_refreshes_on_the_hosts_clock(tmp_path: Path) -> None:
    """status --watch slept with time.sleep in the CLI: the pause is the host's clock's now (issue 40)."""
    from servectl.service.clocks import Clocks
    from servectl.testing.swap import FakeClock

    clock = FakeClock()
    with FakeHost(state_dir=tmp_path, clocks=Clocks(monotonic=clock, wall=clock, sleep=clock.advance)) as host:
        views = host.watch(interval_s=5.0)
        first, second, third = next(views), next(views), next(views)
    assert (first.taken_at, second.taken_at, third.taken_at) == (1000.0, 1005.0, 1010.0)  # no real second passed


def test_every_profile_lookup_of_a_host_reads_the_hosts_search_path(profile_dir: Path, tmp_path: Path) -> None:
    # a profile (and its base) in a folder only the host's environ names: os.environ has no SERVECTL_PROFILES
    # (the fixture removes it), so a method that looked profiles up on os.environ's search path would not find it
    extra = only_here(tmp_path)
    environ = {**os.environ, "SERVECTL_PROFILES": str(extra)}
    assert "SERVECTL_PROFILES" not in os.environ
    with FakeHost(state_dir=tmp_path / "state", environ=environ) as fake:
        host: Any = _Recording(fake)
        assert [row.name for row in host.profiles() if row.name == "onlyhere"] == ["onlyhere"]
        assert host.load_profile(name="onlyhere").chain[1].name == "_onlybase.yaml"  # its base, from there too
        assert host.show(name="onlyhere").data["name"] == "onlyhere"
        [checked] = host.validate(names=["onlyhere"])
        assert checked.error is None
        assert "onlyhere" in [v.name for v in host.validate()]
        assert host.compile_plan(name="onlyhere").profile == "onlyhere"
        assert "onlyhere" in host.dry_run(name="onlyhere").script
        assert "onlyhere" in host.render(name="onlyhere", to="compose", out="-").text
        assert host.flag_catalog(name="onlyhere").options
        assert host.diff_profiles(a="onlyhere", b="demo").changes
        assert host.completions(of="profile", incomplete="only") == ["onlyhere"]
        assert host.down(name="onlyhere").stopped == ()  # a known profile that runs nothing: no UsageError
        assert "onlyhere" in [c.profile for c in host.rollback_check()]  # its `rollback:`, found on that path
        empty = tmp_path / "no-evidence"
        empty.mkdir()
        refusals = []  # each finds the profile, then refuses for what it lacks (not "profile not found")
        for call in (
            lambda: host.promote(name="onlyhere", evidence_dir=empty),
            lambda: host.write_report(name="onlyhere", evidence_dir=empty),
            lambda: host.export_registry(name="onlyhere"),
        ):
            with pytest.raises(servectl.errors.ServectlError) as refused:
                call()
            refusals.append(str(refused.value))
        assert refusals and not [r for r in refusals if "not found in" in r], refusals
        assert "not promoted" in refusals[2]
        # measured and compared services: found, then refused for what is missing (they said "not found")
        from servectl.bench.qualify import QualifySettings

        through_gateway = QualifySettings(via_gateway=True, api_key="sk-test")  # the alias's profile, resolved
        for measure in (host.bench, host.qualify, lambda name: host.qualify(name=name, settings=through_gateway)):
            with pytest.raises(servectl.UsageError, match=r"^(bench|qualify) onlyhere: the profile does not run"):
                measure(name="onlyhere")
        with pytest.raises(servectl.UsageError, match="no container 'nothere' on this Docker engine"):
            host.diff_container(name="onlyhere", container="nothere")
        assert host.diff_catalogs(a="onlyhere", b="onlyhere", name="onlyhere")[2] == []  # its catalog, twice
        gateway_file = tmp_path / "clients-gateway.yaml"
        gateway_file.write_text("aliases: {x: [onlyhere]}\n")
        [alias] = host.gateway_clients(config_file=gateway_file).aliases  # its window: read from that path
        assert (alias.alias, alias.context_window) == ("x", 32768)
        assert host.validate_in_image(name="onlyhere").profile == "onlyhere"
        assert host.preflight(name="onlyhere").profile_name == "onlyhere"
        assert host.up(name="onlyhere").action == "started"
        [row] = host.status().services
        assert row.profile == "onlyhere" and row.drift is False  # its plan now, compiled from that path
        assert any(host.logs(name="onlyhere", tail=5))
        assert host.swap(name="onlyhere").outcome == "noop"
        assert host.swap(name="demo-rollback").outcome == "swapped"
        assert host.rollback().to_profile == "onlyhere"  # back to it, resolved on that path
        data = container_inspect(
            ["python3", "-m", "sglang.launch_server", "--model-path", "/model"], binds=[("/srv/m", "/model", True)]
        )
        fake.engine.documents["sglang-hand"] = fake.engine.documents[data["Id"]] = data
        fake.engine.image_documents[data["Image"]] = image_inspect()
        with pytest.raises(servectl.UsageError, match="onlyhere"):  # found on that path, so the name is taken
            host.adopt(container="sglang-hand", name="onlyhere")
    unexercised = {
        name
        for name, member in inspect.getmembers(Host)
        if callable(member) and not name.startswith("_") and name not in host.called and name not in TAKE_NO_PROFILE
    }
    assert unexercised == set(), f"call these here, or list them in TAKE_NO_PROFILE with a reason: {unexercised}"


def test_the_gateway_sends_the_engine_key_of_a_profile_only_the_hosts_environ_finds(
    profile_dir: Path, tmp_path: Path
) -> None:
    """gateway run lists the services through the host's context: the engine key of a profile on the host's
    search path is read (it resolved the profile in os.environ, failed, and forwarded requests with no key)."""
    from servectl.gateway.serve import service_upstreams

    extra = only_here(tmp_path, "serve:\n  api_key_env: ONLY_KEY\n")
    environ = {**os.environ, "SERVECTL_PROFILES": str(extra), "ONLY_KEY": "sk-only"}
    assert "ONLY_KEY" not in os.environ
    with FakeHost(state_dir=tmp_path / "state", environ=environ) as host:
        host.up(name="onlyhere")
        [upstream] = service_upstreams(host.ctx)()
    assert (upstream.profile, upstream.ready, upstream.api_key) == ("onlyhere", True, "sk-only")


def test_check_campaign_reads_the_host_search_path_and_opens_no_adapter(
    profile_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import servectl.adapters.docker as docker_adapter
    import servectl.adapters.gpu as gpu_adapter

    def never(**kwargs: Any) -> Any:
        raise AssertionError("checking a campaign opened an adapter")

    monkeypatch.setattr(docker_adapter, "DockerSdkEngine", never)
    monkeypatch.setattr(gpu_adapter, "NvmlInventory", never)
    extra = profile_dir.parent / "extra"
    extra.mkdir()
    (extra / "mine.yaml").write_text("name: mine\nextends: demo\n")  # only on the host's search path
    campaign = profile_dir.parent / "campaign.yaml"
    campaign.write_text(
        "name: c\nbase: mine\nvariants: [{name: fast, overrides: {engine: {env: {STANDIN_TOKEN_RATE: '400'}}}}]\n"
        "workload: {points: [{name: c1, prompt_tokens: 512}]}\ndecision: {primary_point: c1}\n"
    )
    environ = {"SERVECTL_PROFILES": str(extra), "SERVECTL_HOME": str(profile_dir.parent / "home")}
    with Host(environ=environ) as host:
        check = host.check_campaign(file=campaign)
    assert check.base.profile.name == "mine" and check.incumbent.profile_name == "mine"
    (fast,) = check.variants
    assert fast.profile_name == "c.fast" and fast.plan_hash and fast.plan_hash != check.incumbent.plan_hash
    with pytest.raises(servectl.ProfileError, match="base: profile 'mine' not found"):
        servectl.check_campaign(file=campaign)  # os.environ names no such folder


def test_run_resume_and_status_of_a_campaign_on_a_fake_host(host: FakeHost, profile_dir: Path) -> None:
    from servectl.bench.model import PointResult, Stat

    def bench_point(ctx: Any, profile: str, settings: Any, out: Path) -> PointResult:
        rate = float(ctx.resolve(profile).loaded.profile.engine.env["STANDIN_TOKEN_RATE"])
        value = rate * (1 + 0.001 * int(out.name[1]))  # r<round>-c1
        return PointResult(
            prompt_tokens_target=512,
            concurrency=1,
            repeats=1,
            prompt_words=1,
            decode_tok_s=Stat(value, value, value, 1),
        )

    campaign = profile_dir.parent / "campaign.yaml"
    campaign.write_text(
        "name: c\nbase: demo\nvariants: [{name: fast, overrides: {engine: {env: {STANDIN_TOKEN_RATE: '400'}}}}]\n"
        "workload: {points: [{name: c1, prompt_tokens: 512}]}\ndecision: {primary_point: c1, max_repeats: 3}\n"
    )
    folder = profile_dir.parent / "run"
    outcome = host.run_campaign(file=campaign, out_dir=folder, bench_point=bench_point)
    assert isinstance(outcome, servectl.CampaignOutcome) and outcome.winner == "fast"
    assert isinstance(outcome.rows[0], servectl.CampaignRow) and outcome.rows[0].status == "accepted-fast"
    assert host.resume_campaign(folder=folder, bench_point=bench_point).rows == outcome.rows
    progress = host.campaign_status(folder=folder)
    assert isinstance(progress, servectl.CampaignProgress) and progress.finished and progress.settled == 1
    assert servectl.campaign_status(folder=folder).to_dict() == progress.to_dict()
    exported = host.export_campaign(folder=folder)  # this bench left no artifacts: rows without numbers
    assert isinstance(exported, servectl.CampaignExport) and exported.path is None
    assert [r["status"] for r in exported.document["rows"]] == ["measured", "accepted-fast"]
