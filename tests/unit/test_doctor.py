"""servectl doctor on fakes: each part a line with its fix; exit 3 only when a required part fails."""

from __future__ import annotations

from pathlib import Path

from servectl.adapters.docker import EngineInfo
from servectl.cli.views.doctor import doctor_text
from servectl.preflight.doctor import DoctorReport, folder_write_problem, run_doctor
from servectl.testing.docker import FakeDockerEngine
from servectl.testing.fakes import FakeGpuInventory, FakeHostProbe

NO_NVIDIA_ENGINE = EngineInfo(server_version="27.5.1", runtimes=frozenset({"runc"}), default_runtime="runc")


def _doctor(tmp_path: Path, **overrides: object) -> DoctorReport:
    args: dict[str, object] = {
        "docker": FakeDockerEngine(),
        "gpus": FakeGpuInventory.scenario("two_free_sm120"),
        "host": FakeHostProbe(executables={"docker-compose": "/usr/bin/docker-compose"}),
        "state_dir": tmp_path / "state",
        "module_present": lambda name: True,
    }
    args.update(overrides)
    return run_doctor(**args)  # type: ignore[arg-type]


def test_a_complete_gpu_host_passes_every_line(tmp_path: Path) -> None:
    report = _doctor(tmp_path)
    assert [(line.id, line.outcome) for line in report.lines] == [
        ("docker.engine", "ok"),
        ("gpu.driver", "ok"),
        ("docker.gpu_runtime", "ok"),
        ("compose.cli", "ok"),
        ("state.folder", "ok"),
        ("extra.bench", "ok"),
    ]
    assert report.exit_code == 0
    assert report.line("docker.engine").found == "Docker 27.5.1 (runtimes: nvidia, runc)"
    assert report.line("gpu.driver").found == "driver 580.95.05, CUDA 13.0, 2 GPUs via NVML"
    assert (tmp_path / "state").is_dir()


def test_unreachable_docker_fails_with_exit_3_and_the_fix(tmp_path: Path) -> None:
    report = _doctor(tmp_path, docker=FakeDockerEngine(available=False))
    line = report.line("docker.engine")
    assert (line.outcome, line.required, report.exit_code) == ("fail", True, 3)
    assert "Docker engine unreachable" in line.found and "systemctl start docker" in line.fix
    assert report.line("docker.gpu_runtime").found == "not checked: Docker unreachable"


def test_the_real_adapters_unreachable_message_carries_its_fix_once() -> None:
    from servectl.adapters.docker.sdk import _unreachable
    from servectl.preflight.doctor import _docker_line

    message = _unreachable(FileNotFoundError(2, "No such file or directory"), "unix:///var/run/docker.sock")
    line = _docker_line(None, message)
    shown = f"{line.found} {line.fix}"
    assert shown.count("systemctl start docker") == 1 and "DOCKER_HOST" in line.found and line.fix == ""


def test_gpus_without_a_container_runtime_fail_but_a_gpu_less_host_only_warns(tmp_path: Path) -> None:
    bare = FakeHostProbe(executables={})
    with_gpus = _doctor(tmp_path, docker=FakeDockerEngine(engine_info=NO_NVIDIA_ENGINE), host=bare)
    line = with_gpus.line("docker.gpu_runtime")
    assert (line.outcome, with_gpus.exit_code) == ("fail", 3)
    assert "nvidia-ctk runtime configure" in line.fix
    no_driver = _doctor(
        tmp_path,
        docker=FakeDockerEngine(engine_info=NO_NVIDIA_ENGINE),
        host=bare,
        gpus=FakeGpuInventory.scenario("no_driver"),
    )
    assert no_driver.line("docker.gpu_runtime").outcome == "warn"
    assert no_driver.line("gpu.driver").outcome == "warn" and "NVIDIA driver" in no_driver.line("gpu.driver").fix
    assert no_driver.exit_code == 0


def test_a_cdi_spec_counts_as_a_gpu_runtime(tmp_path: Path) -> None:
    host = FakeHostProbe(executables={}, existing_paths={"/etc/cdi/nvidia.yaml"})
    report = _doctor(tmp_path, docker=FakeDockerEngine(engine_info=NO_NVIDIA_ENGINE), host=host)
    assert report.line("docker.gpu_runtime").found == "CDI spec /etc/cdi/nvidia.yaml"


def test_missing_compose_and_extras_warn_with_their_install_lines(tmp_path: Path) -> None:
    report = _doctor(tmp_path, host=FakeHostProbe(), module_present=lambda name: False)
    assert report.line("compose.cli").outcome == "warn"
    found = report.line("compose.cli").found  # not only rendered files need it (issue 44)
    assert "`compose_file:` conflict" in found and "adopt --compose" in found and "render --to compose" in found
    assert report.line("extra.bench").fix == "pip install 'servectl[bench]'"
    assert report.exit_code == 0


def test_an_unwritable_state_folder_fails(tmp_path: Path) -> None:
    report = _doctor(tmp_path, writable=lambda folder: "Permission denied")
    line = report.line("state.folder")
    assert (line.outcome, report.exit_code) == ("fail", 3) and "SERVECTL_HOME" in line.fix
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert folder_write_problem(blocker / "state") is not None  # a file where the folder should be
    assert folder_write_problem(tmp_path / "ok") is None


def test_text_puts_the_fix_under_each_line_that_is_not_ok(tmp_path: Path) -> None:
    text = doctor_text(_doctor(tmp_path, docker=FakeDockerEngine(available=False)))
    lines = text.splitlines()
    assert lines[0].startswith("FAIL  docker.engine ")
    assert lines[1].strip().startswith("fix: start it")
    assert lines[-1] == "required part failing: docker.engine" and text.endswith("\n")
