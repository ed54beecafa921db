"""Every preflight check, failing and passing, on fake GPUs, a fake host and a fake Docker engine."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from servectl.adapters.docker import ContainerState, EngineInfo, GpuRequest, ImageInfo, OneShotResult, PublishedPort
from servectl.adapters.gpu import MIB, GpuProcess, NullGpuInventory
from servectl.adapters.host import DiskSpace, HostMemory, Listener, ShmInfo
from servectl.errors import PreflightFailed, ServiceConflict, UsageError
from servectl.preflight.checks import CHECK_IDS
from servectl.preflight.model import ConflictRef, PreflightReport, PreflightRequest, Replacing, ServiceRef
from servectl.preflight.run import raise_if_failed, run_preflight
from servectl.testing.docker import FakeDockerEngine, probe_answer
from servectl.testing.fakes import (
    DRIVER_RESERVED_MIB,
    RTX_PRO_6000_TOTAL_MIB,
    FakeGpuInventory,
    FakeHostProbe,
    fake_model_dir,
    make_device,
)

GIB = 1024 * MIB
TAG = "ghcr.io/ormandj/sglang-glm53-flash-sm120:v0.4.3"
IMAGE_ID = "sha256:" + "0c" * 32
REPO_DIGEST = "sha256:" + "d1" * 32
COMMIT = "c3cbb9891b67c741bcbf6b176dd7af9265b069db"
MODEL = "/models/GLM-5.3-Flash"
DS4_COMPOSE = "/home/me/vllm/compose-DeepSeek-V4-Flash.yml"
DS4_ID = "d5" * 32
OTHER_ID = "0a" * 32


def request(**changes: Any) -> PreflightRequest:
    base = PreflightRequest(
        profile_name="glm53-393k",
        source_file="profiles/glm53-393k.yaml",
        status="promoted",
        gpu_indices=(0, 1),
        arch="sm120",
        tp=2,
        port=8180,
        role="bench",
        image_ref=TAG,
        image_digest=IMAGE_ID,
        model_path=MODEL,
        model_revision=COMMIT,
        ipc_host=True,
        cache_paths=("/home/me/vllm/cache",),
        conflicts=(ConflictRef("compose", DS4_COMPOSE),),
        engine_argv=("--model-path", "/model", "--tp-size", "2"),
    )
    return replace(base, **changes)


def host(**changes: Any) -> FakeHostProbe:
    probe = FakeHostProbe(models={MODEL: fake_model_dir(MODEL, weights_bytes=100 * GIB, revision=COMMIT)})
    for key, value in changes.items():
        setattr(probe, key, value)
    return probe


def image(**changes: Any) -> ImageInfo:
    base = ImageInfo(
        id=IMAGE_ID, repo_digests=(f"ghcr.io/ormandj/sglang-glm53-flash-sm120@{REPO_DIGEST}",), tags=(TAG,)
    )
    return replace(base, **changes)


def docker(*containers: ContainerState, **changes: Any) -> FakeDockerEngine:
    return FakeDockerEngine(**{"images": [image()], "running": containers, **changes})


def ds4(**changes: Any) -> ContainerState:
    base = ContainerState(
        id=DS4_ID,
        name="ds4-daily",
        image="ds4:v9",
        status="running",
        labels={"com.docker.compose.project.config_files": DS4_COMPOSE, "com.docker.compose.service": "ds4"},
        gpu_request=GpuRequest(True, (), "device-request"),
        ports=(PublishedPort("0.0.0.0", 8080, 8080),),
    )
    return replace(base, **changes)


def preflight(
    req: PreflightRequest | None = None,
    gpus: FakeGpuInventory | None = None,
    probe: FakeHostProbe | None = None,
    engine: FakeDockerEngine | None = None,
    skip: frozenset[str] = frozenset(),
) -> PreflightReport:
    return run_preflight(
        request=req or request(),
        gpus=gpus or FakeGpuInventory.scenario("two_free_sm120"),
        host=probe or host(),
        docker=engine or docker(),
        skip=skip,
    )


def image_parser(**answer: Any) -> FakeDockerEngine:
    """A Docker engine whose throwaway containers answer as SGLang's probe would (default: parsed)."""
    document = {"sglang_version": "0.5.23", "parsed": True, "resolved": True, **answer}
    seen: list[list[str]] = []

    def oneshot(image: str, command: list[str]) -> OneShotResult:
        seen.append(command)
        return probe_answer(document)

    engine = docker(oneshot=oneshot)
    engine.commands = seen  # type: ignore[attr-defined]  # what the tests read back
    return engine


def ds4_on_both_cards(mib: int = 90_000) -> FakeGpuInventory:
    return FakeGpuInventory.of(
        make_device(0, processes=[GpuProcess(501, mib * MIB)]),
        make_device(1, processes=[GpuProcess(502, mib * MIB)]),
    )


def ds4_host() -> FakeHostProbe:
    return host(container_ids={501: DS4_ID, 502: DS4_ID}, process_names={501: "python3", 502: "python3"})


# ------------------------------------------------------------------------------------------ whole report


def test_a_ready_box_passes_every_check_in_the_stable_order() -> None:
    report = preflight()
    assert [c.id for c in report.checks] == list(CHECK_IDS)
    assert {c.id: c.result for c in report.checks if c.result != "pass"} == {}
    assert not report.failed and report.exit_code == 0


def test_the_report_is_json_with_every_check_its_facts_and_counts() -> None:
    report = preflight(gpus=FakeGpuInventory.scenario("foreign_pid"))
    data = json.loads(report.to_json())
    assert data["profile"] == "glm53-393k" and data["failed"] is True
    assert data["counts"]["fail"] == 1
    exclusive = next(c for c in data["checks"] if c["id"] == "gpu.exclusive")
    assert exclusive["result"] == "fail"
    assert exclusive["facts"]["foreign_processes"][0] == {
        "card": 0,
        "pid": 4242,
        "process_name": None,
        "container_id": None,
        "container_name": None,
        "used_mib": 20480,
        "disposition": "foreign",
    }
    assert report.exit_code == 3
    assert report.failure_summary().startswith("preflight gpu.exclusive: card 0: pid 4242 holds 20,480 MiB")


def test_force_skips_one_named_check_and_records_what_it_would_have_said() -> None:
    report = preflight(gpus=FakeGpuInventory.scenario("foreign_pid"), skip=frozenset({"gpu.exclusive"}))
    check = report.check("gpu.exclusive")
    assert check.result == "skipped" and check.forced
    assert check.facts["result_without_force"] == "fail"
    assert "pid 4242" in check.message
    assert not report.failed


def test_force_with_an_unknown_check_id_is_a_usage_error_with_a_suggestion() -> None:
    with pytest.raises(UsageError, match=r"did you mean gpu\.exclusive\?"):
        preflight(skip=frozenset({"gpu.exclusiv"}))


def test_a_profile_without_gpus_skips_the_gpu_checks_and_never_asks_nvml() -> None:
    gpus = FakeGpuInventory.scenario("no_driver")
    report = preflight(request(gpus_requested=False, gpu_indices=(), tp=1, arch=None), gpus=gpus)
    for check_id in (
        "gpu.present",
        "gpu.arch",
        "gpu.count",
        "gpu.mig",
        "gpu.exclusive",
        "gpu.vram_reserve",
        "docker.gpu_runtime",
    ):
        assert report.check(check_id).result == "skipped", check_id
        assert report.check(check_id).message == "the profile requests no GPUs"
    assert gpus.calls == 0
    assert not report.failed


def test_a_retired_profile_fails() -> None:
    assert preflight(request(status="retired")).check("profile.status").result == "fail"


# ------------------------------------------------------------------------------------------ GPUs


def test_no_driver_is_one_clear_line_and_the_other_gpu_checks_are_unknown() -> None:
    report = preflight(gpus=FakeGpuInventory.scenario("no_driver"))
    present = report.check("gpu.present")
    assert present.result == "fail"
    assert present.message.startswith("NVML unavailable: NVML library (libnvidia-ml.so.1) not found")
    assert "\n" not in present.message
    for check_id in ("gpu.arch", "gpu.mig", "gpu.exclusive", "gpu.vram_reserve"):
        assert report.check(check_id).result == "unknown"


def test_a_null_inventory_reads_no_card_and_its_checks_are_unknown_not_failed() -> None:
    """Issue 40: where no card is read by choice (a context built without NVML), preflight says so: the gpu
    checks are unknown with the reason, none fails, and no driver is asked (it failed with the driver's fix)."""
    report = preflight(gpus=NullGpuInventory("this servectl context reads no GPUs (built with nvml=False)"))
    present = report.check("gpu.present")
    assert present.result == "unknown" and present.fix == ""
    assert present.message == "the cards were not read: this servectl context reads no GPUs (built with nvml=False)"
    for check_id in ("gpu.arch", "gpu.mig", "gpu.exclusive", "gpu.vram_reserve"):
        check = report.check(check_id)
        assert (check.result, check.message) == ("unknown", "the cards were not read, see gpu.present"), check_id
    assert not any(c.result == "fail" and c.id.startswith("gpu.") for c in report.checks)


def test_a_lost_card_fails_gpu_present_with_a_reset_hint() -> None:
    check = preflight(gpus=FakeGpuInventory.scenario("gpu_lost", card=1)).check("gpu.present")
    assert check.result == "fail" and "card 1: GPU is lost" in check.message
    assert "nvidia-smi -r" in check.fix


def test_a_card_the_host_does_not_have_fails_gpu_present() -> None:
    check = preflight(request(gpu_indices=(0, 2))).check("gpu.present")
    assert check.result == "fail"
    assert check.message == "card(s) [2] not found; this host has 2 card(s) [0, 1]"


def test_the_wrong_architecture_fails_naming_each_card() -> None:
    gpus = FakeGpuInventory.of(make_device(0, compute_capability=(9, 0)), make_device(1))
    check = preflight(gpus=gpus).check("gpu.arch")
    assert check.result == "fail"
    assert check.message == "profile needs sm120 (compute capability 12.0); card 0 is sm90 (9.0)"


def test_an_unreadable_architecture_is_unknown_and_no_pin_passes() -> None:
    assert preflight(gpus=FakeGpuInventory.scenario("not_supported")).check("gpu.arch").result == "unknown"
    assert preflight(request(arch=None)).check("gpu.arch").message == "no architecture pinned"


def test_card_count_must_equal_tp_times_pp() -> None:
    check = preflight(request(tp=1)).check("gpu.count")
    assert check.result == "fail" and check.message == "tp 1 x dp 1 = 1 ranks but 2 card(s) [0, 1]"
    assert preflight(request(gpu_indices=(0, 0))).check("gpu.count").message == "card(s) [0] listed twice"
    assert preflight(request(tp=1, dp=2)).check("gpu.count").result == "pass"


def test_mig_mode_fails_with_the_command_that_turns_it_off() -> None:
    check = preflight(gpus=FakeGpuInventory.scenario("mig")).check("gpu.mig")
    assert check.result == "fail" and "card(s) [0]" in check.message and "-mig 0" in check.fix


# ------------------------------------------------------------------------------------------ exclusive use


def test_a_foreign_host_process_fails_exclusive_use_with_pid_name_and_mib() -> None:
    probe = host(process_names={4242: "python3"})
    check = preflight(gpus=FakeGpuInventory.scenario("foreign_pid", mib=8802), probe=probe).check("gpu.exclusive")
    assert check.result == "fail"
    assert check.message == "card 0: pid 4242 python3 holds 8,802 MiB"
    assert check.fix == "end pid(s) 4242 or pick other cards"


def test_a_foreign_process_in_a_container_is_named_by_container() -> None:
    other = ContainerState(id=OTHER_ID, name="comfyui", image="comfy", status="running")
    probe = host(process_names={4242: "python"}, container_ids={4242: OTHER_ID})
    check = preflight(gpus=FakeGpuInventory.scenario("foreign_pid"), probe=probe, engine=docker(other)).check(
        "gpu.exclusive"
    )
    assert check.result == "fail"
    assert check.message == f"card 0: pid 4242 python in container comfyui ({OTHER_ID[:12]}) holds 20,480 MiB"
    assert check.fix.startswith("stop comfyui (docker stop NAME)")
    assert check.facts["foreign_processes"][0]["container_id"] == OTHER_ID


def test_an_idle_container_that_requests_the_cards_is_reported_too() -> None:
    idle = ContainerState(
        id=OTHER_ID,
        name="jupyter",
        image="jupyter",
        status="running",
        gpu_request=GpuRequest(False, ("1",), "device-request"),
    )
    check = preflight(engine=docker(idle)).check("gpu.exclusive")
    assert check.result == "fail"
    assert check.message == f"container jupyter ({OTHER_ID[:12]}) requests card(s) [1] (idle)"


def test_a_container_requesting_other_cards_does_not_count() -> None:
    elsewhere = ContainerState(
        id=OTHER_ID, name="tts", image="tts", status="running", gpu_request=GpuRequest(False, ("2",), "cdi")
    )
    assert preflight(engine=docker(elsewhere)).check("gpu.exclusive").result == "pass"


def test_another_servectl_service_on_the_cards_points_at_swap() -> None:
    other = ContainerState(
        id=OTHER_ID,
        name="servectl-glm53-exl3",
        image="x",
        status="running",
        labels={"servectl.profile": "glm53-exl3-524k"},
        gpu_request=GpuRequest(False, ("0", "1"), "device-request"),
    )
    check = preflight(engine=docker(other)).check("gpu.exclusive")
    assert check.result == "fail"
    assert check.message.startswith("servectl service glm53-exl3-524k servectl-glm53-exl3")
    assert "servectl swap" in check.fix


def test_the_service_being_replaced_does_not_count_and_its_memory_is_freed() -> None:
    replaced = ds4(name="servectl-glm53-exl3", labels={"servectl.profile": "glm53-exl3-524k"})
    req = request(
        conflicts=(),
        replacing=Replacing(container_id=DS4_ID[:12]),
        vram_reserve_waiver=None,
        mem_fraction=0.95,
    )
    report = preflight(req, gpus=ds4_on_both_cards(), probe=ds4_host(), engine=docker(replaced))
    exclusive = report.check("gpu.exclusive")
    assert exclusive.result == "pass", exclusive.message
    assert exclusive.message.endswith("will stop 2 process(es) first")
    assert [p["disposition"] for p in exclusive.facts["will_stop_processes"]] == ["replacing", "replacing"]
    reserve = report.check("gpu.vram_reserve")
    assert reserve.result == "pass", reserve.message
    card0 = reserve.facts["cards"][0]
    assert card0["freed_by_stopping_mib"] == 90_000 and card0["free_before_start_mib"] == 97_400


def test_a_declared_conflict_blocks_a_plain_up_and_is_stopped_by_swap() -> None:
    plain = preflight(gpus=ds4_on_both_cards(), probe=ds4_host(), engine=docker(ds4()))
    assert plain.check("conflicts").result == "fail"
    assert plain.check("conflicts").message == "conflicting service(s) running: ds4-daily"
    assert "servectl swap glm53-393k" in plain.check("conflicts").fix
    assert plain.check("gpu.exclusive").result == "fail"

    swap = preflight(
        request(stop_conflicts=True, vram_reserve_waiver="model-only pair"),
        gpus=ds4_on_both_cards(),
        probe=ds4_host(),
        engine=docker(ds4()),
    )
    assert swap.check("conflicts").result == "warn"
    assert swap.check("conflicts").message == "will be stopped: ds4-daily (restored afterwards)"
    assert swap.check("conflicts").facts["running"][0]["compose_file"] == DS4_COMPOSE
    assert swap.check("gpu.exclusive").result == "pass"
    assert swap.check("gpu.vram_reserve").facts["cards"][1]["free_before_start_mib"] == 97_400
    assert not swap.failed


def test_conflicts_match_compose_files_with_a_home_folder_and_container_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", "/home/me")
    tilde = request(conflicts=(ConflictRef("compose", "~/vllm/compose-DeepSeek-V4-Flash.yml", service="ds4"),))
    assert preflight(tilde, engine=docker(ds4())).check("conflicts").result == "fail"
    other_service = request(conflicts=(ConflictRef("compose", DS4_COMPOSE, service="other"),))
    assert preflight(other_service, engine=docker(ds4())).check("conflicts").result == "pass"
    by_name = request(conflicts=(ConflictRef("container", "ds4-daily"),))
    assert preflight(by_name, engine=docker(ds4())).check("conflicts").result == "fail"


def test_shared_use_allowed_by_the_profile_only_warns() -> None:
    check = preflight(request(exclusive=False), gpus=FakeGpuInventory.scenario("foreign_pid")).check("gpu.exclusive")
    assert check.result == "warn"


def test_cards_whose_processes_cannot_be_listed_leave_exclusive_use_unknown() -> None:
    check = preflight(gpus=FakeGpuInventory.scenario("not_supported")).check("gpu.exclusive")
    assert check.result == "unknown" and check.facts["cards_without_process_list"] == [0, 1]


def test_memory_used_with_no_listed_process_warns() -> None:
    gpus = FakeGpuInventory.of(make_device(0, extra_used_mib=5000), make_device(1))
    check = preflight(gpus=gpus).check("gpu.exclusive")
    assert check.result == "warn" and check.message == "memory in use that no listed process holds (card 0: 5,000 MiB)"


# ------------------------------------------------------------------------------------------ VRAM reserve


def test_the_reserve_is_checked_against_what_the_engine_leaves_and_fails_without_a_waiver() -> None:
    check = preflight(request(mem_fraction=0.99)).check("gpu.vram_reserve")
    assert check.result == "fail"
    assert check.message.startswith("card 0: 979 MiB left once the engine runs (estimate) < reserve 3,072 MiB")
    assert "waive the reserve" in check.fix
    row = check.facts["cards"][0]
    assert row["free_mib"] == 97_400 and row["engine_estimate_mib"] == 96_421
    assert row["weights_per_card_mib"] == 51_200 and row["free_after_start_mib"] == 979
    # where those numbers come from: SGLang leaves (1 - mem_fraction) of the card's total free, the
    # driver keeps its reservation, and the 100 GiB of weights split over tp 2
    assert RTX_PRO_6000_TOTAL_MIB - DRIVER_RESERVED_MIB == 97_400
    assert round(RTX_PRO_6000_TOTAL_MIB * (1 - 0.99)) == 979 and 97_400 - 979 == 96_421
    assert 100 * GIB // 2 // MIB == 51_200


def test_a_waived_reserve_passes_and_records_the_reason() -> None:
    check = preflight(request(mem_fraction=0.99, vram_reserve_waiver="model-only pair")).check("gpu.vram_reserve")
    assert check.result == "pass"
    assert check.message.startswith("reserve 3,072 MiB waived: model-only pair (card 0: free 97,400 MiB")
    assert check.facts["waived"] is True and check.facts["waiver_reason"] == "model-only pair"


def test_without_estimate_inputs_the_reserve_is_checked_against_free_memory_now() -> None:
    tight = FakeGpuInventory.of(make_device(0, extra_used_mib=95_000), make_device(1))
    probe = host(models={MODEL: fake_model_dir(MODEL, weight_files=0, revision=COMMIT)})
    check = preflight(gpus=tight, probe=probe).check("gpu.vram_reserve")
    assert check.result == "fail" and check.message == "card 0: 2,400 MiB free now < reserve 3,072 MiB"


def test_weights_that_do_not_fit_fail_even_with_a_waiver() -> None:
    big = host(models={MODEL: fake_model_dir(MODEL, weights_bytes=200 * GIB, revision=COMMIT)})
    check = preflight(request(vram_reserve_waiver="model-only pair"), probe=big).check("gpu.vram_reserve")
    assert check.result == "fail"
    assert check.message.startswith("card 0: weights need 102,400 MiB per card but only 97,400 MiB are free")


def test_a_mem_fraction_that_leaves_no_room_for_weights_fails() -> None:
    check = preflight(request(mem_fraction=0.5, vram_reserve_waiver="x" * 10)).check("gpu.vram_reserve")
    assert check.result == "fail"
    assert "mem fraction 0.5 leaves 48,456 MiB for weights + KV cache but weights need 51,200 MiB" in check.message


# ------------------------------------------------------------------------------------------ ports and network


def test_a_listener_on_the_port_fails_naming_the_owner() -> None:
    probe = host()
    probe.listen("0.0.0.0", 8180, pid=999, name="llama-server")
    check = preflight(probe=probe).check("port.free")
    assert check.result == "fail" and check.message == "pid 999 llama-server listens on 0.0.0.0:8180"


def test_a_listener_of_another_user_is_still_reported() -> None:
    probe = host()
    probe.listen("::", 8180)
    check = preflight(probe=probe).check("port.free")
    assert check.message == "a process of another user (run as root to name it) listens on :::8180"


def test_a_listener_on_another_address_does_not_collide() -> None:
    probe = host()
    probe.listen("10.0.0.5", 8180, pid=999, name="x")
    assert preflight(probe=probe).check("port.free").result == "pass"


def test_a_docker_published_port_is_named_by_container_not_by_docker_proxy() -> None:
    other = ContainerState(
        id=OTHER_ID,
        name="bench-old",
        image="x",
        status="running",
        ports=(PublishedPort("127.0.0.1", 8180, 30000),),
    )
    probe = host()
    probe.listen("127.0.0.1", 8180, pid=77, name="docker-proxy")
    check = preflight(probe=probe, engine=docker(other)).check("port.free")
    assert check.result == "fail"
    assert check.message == f"container bench-old ({OTHER_ID[:12]}) publishes 127.0.0.1:8180"


def test_the_port_of_the_service_being_replaced_is_free_to_take() -> None:
    old = ContainerState(
        id=OTHER_ID,
        name="servectl-old",
        image="x",
        status="running",
        ports=(PublishedPort("127.0.0.1", 8180, 30000),),
    )
    req = request(replacing=Replacing(container_name="servectl-old", port=8180))
    check = preflight(req, engine=docker(old)).check("port.free")
    assert check.result == "pass" and check.message.endswith("(held by the service being replaced)")


def test_the_replaced_service_s_proxy_is_told_by_its_published_port_when_its_process_cannot_be_named() -> None:
    """Issue 39 (12): in the gateway container (not root) docker-proxy is 'a process of another user'; the Docker
    API's published ports of the container being replaced tell it."""
    old = ContainerState(
        id=OTHER_ID,
        name="servectl-old",
        image="x",
        status="running",
        ports=(PublishedPort("127.0.0.1", 8180, 30000),),
    )
    probe = host()
    probe.listen("127.0.0.1", 8180)  # no pid, no name: another user's process
    req = request(replacing=Replacing(container_name="servectl-old", port=8180))
    check = preflight(req, probe=probe, engine=docker(old)).check("port.free")
    assert check.result == "pass" and check.message.endswith("(held by the service being replaced)")
    probe.listen("127.0.0.1", 8181)
    alone = preflight(request(), probe=probe).check("port.free")  # no container publishes it: still refused
    assert alone.result == "fail" and "a process of another user" in alone.message


@pytest.mark.parametrize(
    ("role", "port", "ports", "result"),
    [
        ("bench", 8080, (8080,), "fail"),
        ("bench", 8180, (8080,), "pass"),
        ("production", 8080, (8080,), "pass"),
        ("production", 8180, (8080,), "fail"),
        ("production", 9000, (8080, 9000), "pass"),
        ("bench", 9000, (8080, 9000), "fail"),
    ],
)
def test_port_role_keeps_bench_off_production_ports(role: Any, port: int, ports: tuple[int, ...], result: str) -> None:
    check = preflight(request(role=role, port=port, production_ports=ports)).check("port.role")
    assert check.result == result


def test_host_networking_needs_a_reason_and_then_warns() -> None:
    assert preflight(request(network_mode="host")).check("network.mode").result == "fail"
    check = preflight(request(network_mode="host", host_network_reason="RDMA between nodes")).check("network.mode")
    assert check.result == "warn" and "RDMA between nodes" in check.message


# ------------------------------------------------------------------------------------------ image


def test_the_pinned_image_passes_by_repo_digest_too() -> None:
    pinned_by_repo_digest = request(image_digest=REPO_DIGEST)
    assert preflight(pinned_by_repo_digest).check("image.pinned").result == "pass"


def test_a_missing_image_fails_with_the_pull_command() -> None:
    check = preflight(engine=docker(images=[])).check("image.pinned")
    assert check.result == "fail" and "not present locally" in check.message
    assert check.fix == f"docker pull the pinned image (repo@{IMAGE_ID}) or docker load it"


def test_a_tag_that_moved_fails_for_promoted_and_warns_for_candidates() -> None:
    moved = image(id="sha256:" + "ee" * 32, repo_digests=())
    old = image(tags=())
    promoted = preflight(engine=docker(images=[moved, old])).check("image.pinned")
    assert promoted.result == "fail"
    assert promoted.message == (
        f"tag {TAG} now points to sha256:eeeeeeeeeeee, not the pinned sha256:0c0c0c0c0c0c "
        "(the pinned image is still present)"
    )
    candidate = preflight(request(status="candidate"), engine=docker(images=[moved])).check("image.pinned")
    assert candidate.result == "warn"


def test_an_unpinned_image_warns_for_candidates_and_fails_for_promoted() -> None:
    assert preflight(request(image_digest=None, status="candidate")).check("image.pinned").result == "warn"
    check = preflight(request(image_digest=None)).check("image.pinned")
    assert check.result == "fail" and check.fix == f"pin it in the profile: image digest {IMAGE_ID}"


# ------------------------------------------------------------------------------------------ model


def test_a_missing_model_folder_fails_with_the_download_hint() -> None:
    check = preflight(request(model_path="/models/nope")).check("model.present")
    assert check.result == "fail" and check.message == "model folder /models/nope does not exist"
    assert preflight(request(model_path="/models/nope")).check("model.revision").result == "unknown"


@pytest.mark.parametrize(
    ("config", "files", "missing"),
    [(False, 3, "config.json"), (True, 0, "weight files"), (False, 0, "config.json and no weight files")],
)
def test_a_model_folder_without_config_or_weights_fails(config: bool, files: int, missing: str) -> None:
    probe = host(models={MODEL: fake_model_dir(MODEL, has_config_json=config, weight_files=files)})
    check = preflight(probe=probe).check("model.present")
    assert check.result == "fail" and check.message == f"model folder {MODEL} has no {missing}"


def test_model_present_reports_the_weights_size() -> None:
    check = preflight().check("model.present")
    assert check.message == f"40 weight file(s), 100.0 GiB in {MODEL}"
    assert check.facts["weights_bytes"] == 100 * GIB


def test_a_snapshot_of_another_revision_fails() -> None:
    probe = host(models={MODEL: fake_model_dir(MODEL, revision="ab" * 20, hf_repo_id="ormandj/GLM")})
    check = preflight(probe=probe).check("model.revision")
    assert (
        check.result == "fail" and check.message == "hf cache snapshot is abababababab, the profile pins c3cbb9891b67"
    )
    assert check.fix.startswith(f"hf download ormandj/GLM --revision {COMMIT}")


def test_a_revision_pinned_by_ref_name_or_read_from_local_dir_metadata_passes() -> None:
    by_ref = host(models={MODEL: fake_model_dir(MODEL, revision=COMMIT, refs={"main": COMMIT})})
    assert preflight(request(model_revision="main"), probe=by_ref).check("model.revision").result == "pass"
    local = host(models={MODEL: fake_model_dir(MODEL, local_dir_revision=COMMIT)})
    assert preflight(probe=local).check("model.revision").result == "pass"


def test_a_plain_folder_cannot_prove_its_revision() -> None:
    plain = host(models={MODEL: fake_model_dir(MODEL)})
    assert preflight(probe=plain).check("model.revision").result == "unknown"
    assert preflight(request(model_revision=None), probe=plain).check("model.revision").result == "warn"


# ------------------------------------------------------------------------------------------ host


def test_tp_above_one_needs_shared_memory() -> None:
    check = preflight(request(ipc_host=False)).check("host.shm")
    assert check.result == "fail" and check.message == "2 ranks with a 64 MiB container /dev/shm (needs 4,096 MiB)"
    assert preflight(request(ipc_host=False, shm_size_bytes=32 * GIB)).check("host.shm").result == "pass"
    assert preflight(request(ipc_host=False, tp=1, gpu_indices=(0,))).check("host.shm").result == "pass"


def test_ipc_host_needs_room_on_the_host_dev_shm() -> None:
    probe = host(shm_info=ShmInfo("/dev/shm", 8 * GIB, 1 * GIB))
    check = preflight(probe=probe).check("host.shm")
    assert check.result == "fail" and "1,024 MiB free, needs 4,096 MiB" in check.message


def test_host_memory_must_cover_the_minimum_plus_the_engine_host_buffers() -> None:
    probe = host(host_memory=HostMemory(64 * GIB, 40 * GIB))
    assert preflight(probe=probe).check("host.memory").result == "pass"
    check = preflight(request(host_memory_extra_bytes=64 * GIB), probe=probe).check("host.memory")
    assert check.result == "fail" and check.message == "40,960 MiB host RAM available, needs 73,728 MiB"


def test_a_cache_folder_on_a_full_disk_fails() -> None:
    path = "/home/me/vllm/cache"
    probe = host(disks={path: DiskSpace(path, "/home", 100 * GIB, 2 * GIB)})
    check = preflight(probe=probe).check("host.disk")
    assert check.result == "fail" and check.message == f"{path}: 2.0 GiB free (needs 10 GiB)"


# ------------------------------------------------------------------------------------------ Docker


def test_an_unreachable_engine_fails_once_and_leaves_engine_checks_unknown() -> None:
    report = preflight(engine=docker(available=False))
    assert report.check("docker.engine").result == "fail"
    assert report.check("docker.engine").message.startswith("Docker engine unreachable")
    for check_id in ("image.pinned", "docker.gpu_runtime", "conflicts"):
        assert report.check(check_id).result == "unknown", check_id
    assert report.check("gpu.exclusive").result == "pass"  # NVML still answers


def test_gpus_without_any_nvidia_container_support_fail_with_the_toolkit_fix() -> None:
    bare = EngineInfo(server_version="27.5.1", runtimes=frozenset({"runc"}), default_runtime="runc")
    check = preflight(probe=host(executables={}), engine=docker(engine_info=bare)).check("docker.gpu_runtime")
    assert check.result == "fail" and "nvidia-ctk runtime configure" in check.fix


def test_a_cdi_spec_alone_is_enough_for_gpus() -> None:
    bare = EngineInfo(
        server_version="28.0",
        runtimes=frozenset({"runc"}),
        default_runtime="runc",
        cdi_spec_dirs=("/etc/cdi",),
    )
    probe = host(executables={}, existing_paths={"/etc/cdi/nvidia.yaml"})
    check = preflight(probe=probe, engine=docker(engine_info=bare)).check("docker.gpu_runtime")
    assert check.result == "pass" and check.message == "CDI spec /etc/cdi/nvidia.yaml"


def test_each_fact_is_gathered_once() -> None:
    engine = docker()
    gpus = FakeGpuInventory.scenario("two_free_sm120")
    preflight(gpus=gpus, engine=engine)
    assert gpus.calls == 1
    assert sorted(call for call, _ in engine.calls) == ["image", "ping", "run_oneshot", "running_containers"]


def test_listener_fixture_records_names() -> None:
    probe = host()
    probe.listen("127.0.0.1", 8180, pid=5, name="x")
    assert probe.listeners(8180) == (Listener("127.0.0.1", 8180, 5, "x"),)


def test_raise_if_failed_gives_exit_3_with_one_line_per_failed_check() -> None:
    report = preflight(request(status="retired"), gpus=FakeGpuInventory.scenario("foreign_pid"))
    with pytest.raises(PreflightFailed) as caught:
        raise_if_failed(report)
    assert caught.value.exit_code == 3 and caught.value.report is report
    assert caught.value.lines() == [
        "preflight profile.status: profile glm53-393k is retired; fix: promote it again or start another profile",
        "preflight gpu.exclusive: card 0: pid 4242 holds 20,480 MiB; fix: end pid(s) 4242 or pick other cards",
    ]
    raise_if_failed(preflight())  # nothing failed: no error


def test_a_card_whose_memory_cannot_be_read_leaves_the_reserve_unknown_even_when_waived() -> None:
    gpus = FakeGpuInventory.scenario("gpu_lost", card=1)
    check = preflight(request(vram_reserve_waiver="model-only pair"), gpus=gpus).check("gpu.vram_reserve")
    assert check.result == "unknown" and check.message == "cannot read the memory of card(s) [1]"


def test_a_replaced_service_of_unknown_size_leaves_the_reserve_unknown() -> None:
    gpus = FakeGpuInventory.of(make_device(0, processes=[GpuProcess(501, None)]), make_device(1))
    req = request(conflicts=(), replacing=Replacing(pids=frozenset({501})))
    check = preflight(req, gpus=gpus).check("gpu.vram_reserve")
    assert check.result == "unknown"
    assert check.message.startswith("cannot tell what stopping the replaced service frees on card(s) [0]")


# ------------------------------------------------------------------------------------------ engine.parse


def test_engine_parse_passes_the_argv_to_the_images_own_parser() -> None:
    runner = image_parser()
    check = preflight(engine=runner).check("engine.parse")
    assert check.result == "pass"
    assert "SGLang 0.5.23" in check.message and "parsed and resolved" in check.message
    (command,) = runner.commands  # type: ignore[attr-defined]
    assert command[0] == "python3" and command[1] == "-c"
    assert command[-5:] == ["parse", "--model-path", "/model", "--tp-size", "2"]


def test_engine_parse_fails_with_sglangs_own_message_and_blocks_the_start() -> None:
    error = "sglang serve: error: unrecognized arguments: --exl3-cache-mode q8"
    report = preflight(engine=image_parser(parsed=False, parse_error=error, resolved=None))
    check = report.check("engine.parse")
    assert check.result == "fail"
    assert error in check.message
    with pytest.raises(PreflightFailed, match="unrecognized arguments: --exl3-cache-mode q8"):
        raise_if_failed(report)


def test_engine_parse_fails_a_warm_standby_whose_image_cannot_import_torch_memory_saver() -> None:
    missing = "ModuleNotFoundError: No module named 'torch_memory_saver'"
    report = preflight(engine=image_parser(memory_saver_error=missing))
    check = report.check("engine.parse")
    assert check.result == "fail"
    assert check.message.endswith(
        f"cannot import torch_memory_saver, which --enable-memory-saver (swap.standby: warm) needs: {missing}; "
        "SGLang raises that at start (sglang/srt/utils/torch_memory_saver_adapter.py TorchMemorySaverAdapter.create)"
    )
    assert check.fix.startswith("install torch-memory-saver in the image")
    assert preflight(engine=image_parser(memory_saver_error=None)).check("engine.parse").result == "pass"


def test_engine_parse_forced_is_recorded_and_the_container_is_not_run() -> None:
    runner = image_parser(parsed=False, parse_error="sglang serve: error: nope")
    check = preflight(engine=runner, skip=frozenset({"engine.parse"})).check("engine.parse")
    assert check.result == "skipped" and check.forced
    assert runner.commands == []  # type: ignore[attr-defined]


def test_engine_parse_is_skipped_for_the_standin_and_for_an_absent_image() -> None:
    assert preflight(request(image_built_here=True)).check("engine.parse").result == "skipped"
    absent = preflight(engine=docker(images=[])).check("engine.parse")
    assert absent.result == "skipped" and "not on this host" in absent.message


def test_engine_parse_of_a_standin_fails_on_a_standin_setting_it_would_refuse_at_start() -> None:
    bad = request(image_built_here=True, standin_env=(("STANDIN_TAPER", "4096:160,1024:200"),))
    check = preflight(bad).check("engine.parse")
    assert check.result == "fail" and check.message.startswith(
        "the stand-in refuses engine.env: STANDIN_TAPER='4096:160,1024:200': prompt tokens must rise"
    )
    good = request(image_built_here=True, standin_env=(("STANDIN_TAPER", "1024:200,4096:160"),))
    assert preflight(good).check("engine.parse").result == "skipped"


def test_engine_parse_warns_when_the_image_has_no_sglang() -> None:
    def no_sglang(image: str, command: list[str]) -> OneShotResult:
        return probe_answer({"error": "cannot import sglang.srt.server_args: ModuleNotFoundError", "no_sglang": True})

    check = preflight(engine=docker(oneshot=no_sglang)).check("engine.parse")
    assert check.result == "warn"
    assert "has no SGLang" in check.message and "image.entrypoint" in check.message


def test_engine_parse_does_not_ask_a_standin_image_by_its_label() -> None:
    from servectl.preflight.facts import STANDIN_LABEL
    from servectl.standin.image import IMAGE_LABEL

    assert STANDIN_LABEL == IMAGE_LABEL
    seen: list[list[str]] = []
    standin = docker(images=[image(labels={IMAGE_LABEL: "1"})], oneshot=lambda i, c: seen.append(c))
    check = preflight(engine=standin).check("engine.parse")
    assert check.result == "skipped" and "stand-in" in check.message
    assert seen == []


# ------------------------------------------------------------------ container.name and services (up, swap)

SERVECTL = {"servectl.managed": "1", "servectl.profile": "glm53-exl3"}


def container(name: str, cid: str, *, status: str = "running", **changes: Any) -> ContainerState:
    return ContainerState(id=cid, name=name, image="img", status=status, **changes)


def exl3(**changes: Any) -> ServiceRef:
    base = ServiceRef(profile="glm53-exl3", container_id=OTHER_ID, container_name="servectl-exl3", port=8080, gpus=(1,))
    return replace(base, **changes)


def test_another_servectl_service_on_a_card_is_a_service_conflict_naming_swap_and_down() -> None:
    held = container("servectl-exl3", OTHER_ID, labels=SERVECTL)
    report = preflight(request(services=(exl3(port=8180),), conflicts=()), engine=docker(held))
    check = report.check("services")
    assert check.result == "fail"
    assert check.message == "servectl service glm53-exl3 holds port 8180; servectl service glm53-exl3 holds GPU 1"
    assert check.fix == "use servectl swap glm53-393k to replace it (or servectl down glm53-exl3 first)"
    with pytest.raises(ServiceConflict) as err:
        raise_if_failed(report)
    assert err.value.exit_code == 1 and "preflight services: servectl service glm53-exl3 holds port 8180" in str(
        err.value
    )


def test_the_replaced_service_and_the_profiles_own_service_do_not_count() -> None:
    replacing = Replacing(container_id=OTHER_ID, container_name="servectl-exl3", port=8080)
    swap_report = preflight(request(services=(exl3(),), replacing=replacing, conflicts=()))
    assert swap_report.check("services").result == "pass"
    own = preflight(request(services=(exl3(profile="glm53-393k"),), conflicts=()))
    assert own.check("services").result == "pass"
    elsewhere = preflight(request(services=(exl3(gpus=(2, 3)),), conflicts=()))  # port 8080, cards 2-3
    assert elsewhere.check("services").result == "pass"


def test_a_foreign_container_given_every_gpu_is_left_to_gpu_exclusive_and_is_a_box_problem() -> None:
    """services speaks for servectl's own services; a container servectl did not start is gpu.exclusive's."""
    trainer = container("trainer", OTHER_ID, gpu_request=GpuRequest(True, (), "device-request"))
    report = preflight(request(conflicts=()), engine=docker(trainer))
    assert report.check("services").result == "pass"
    exclusive = report.check("gpu.exclusive")
    assert exclusive.result == "fail" and "container trainer" in exclusive.message and "idle" in exclusive.message
    with pytest.raises(PreflightFailed) as err:
        raise_if_failed(report)
    assert not isinstance(err.value, ServiceConflict) and err.value.exit_code == 3
    declared = request(conflicts=(ConflictRef("container", "trainer"),), stop_conflicts=True)
    assert preflight(declared, engine=docker(trainer)).check("gpu.exclusive").result == "pass"


def test_an_adopted_service_is_named_as_a_servectl_service_by_the_services_check() -> None:
    adopted = container("exl3-by-hand", OTHER_ID, ports=(PublishedPort("0.0.0.0", 8180, 8000),))
    ref = exl3(container_name="exl3-by-hand", port=8180, gpus=())
    report = preflight(request(services=(ref,), conflicts=()), engine=docker(adopted))
    assert report.check("services").message == "servectl service glm53-exl3 holds port 8180"
    assert report.check("port.free").result == "fail"  # the measured view names the container too
    with pytest.raises(ServiceConflict):
        raise_if_failed(report)


def test_container_name_refuses_a_foreign_container_and_a_running_service_but_not_the_replaced_one() -> None:
    name = "servectl-glm53-393k"
    foreign = container(name, OTHER_ID, status="exited")
    check = preflight(request(container_name=name), engine=docker(foreign)).check("container.name")
    assert check.result == "fail" and "servectl did not start it" in check.message
    assert check.fix == "remove or rename it yourself, or set container.name in profiles/glm53-393k.yaml"
    own_adopted = request(container_name=name, own_container_ids=frozenset({OTHER_ID}))
    assert preflight(own_adopted, engine=docker(foreign)).check("container.name").result == "pass"

    with pytest.raises(PreflightFailed) as box:  # a container servectl did not start: fixed on the box, exit 3
        raise_if_failed(preflight(request(container_name=name), engine=docker(foreign)))
    assert not isinstance(box.value, ServiceConflict)

    other = container(name, OTHER_ID, labels=SERVECTL)
    taken = preflight(request(container_name=name, conflicts=()), engine=docker(other))
    check = taken.check("container.name")
    assert (check.result, check.message) == ("fail", f"container {name} already runs profile glm53-exl3")
    with pytest.raises(ServiceConflict):  # a servectl service: swap or down, exit 1
        raise_if_failed(taken)
    replaced = request(container_name=name, conflicts=(), replacing=Replacing(container_id=OTHER_ID))
    assert preflight(replaced, engine=docker(other)).check("container.name").result == "pass"

    stopped = container(name, OTHER_ID, status="exited", labels=SERVECTL)
    check = preflight(request(container_name=name), engine=docker(stopped)).check("container.name")
    assert check.result == "pass" and "removed before the start" in check.message


def test_a_failed_check_that_is_no_conflict_stays_a_preflight_failure() -> None:
    report = preflight(request(), gpus=FakeGpuInventory.scenario("no_driver"))
    assert report.check("services").result == "pass" and report.failed
    with pytest.raises(PreflightFailed) as err:
        raise_if_failed(report)
    assert not isinstance(err.value, ServiceConflict) and err.value.exit_code == 3


def test_an_adopted_profiles_own_container_is_in_the_way_of_no_check() -> None:
    """own_container_ids (swap to an adopted profile) count for every check, as the replaced service does."""
    own = container(
        "exl3-by-hand",
        OTHER_ID,
        gpu_request=GpuRequest(True, (), "device-request"),
        ports=(PublishedPort("127.0.0.1", 8180, 8000),),
    )
    alone = preflight(request(conflicts=()), engine=docker(own))
    assert {alone.check("gpu.exclusive").result, alone.check("port.free").result} == {"fail"}
    ours = preflight(request(conflicts=(), own_container_ids=frozenset({OTHER_ID})), engine=docker(own))
    assert ours.check("gpu.exclusive").result == "pass" and ours.check("port.free").result == "pass"


def test_an_unreachable_engine_says_its_fix_once_in_preflight_as_in_doctor() -> None:
    from servectl.adapters.docker.sdk import _unreachable
    from servectl.preflight.checks.docker import check_docker_engine
    from servectl.preflight.facts import Facts

    real = check_docker_engine(
        request(), Facts(engine_error=_unreachable(ConnectionRefusedError(111, "refused"), "unix:///x.sock"))
    )
    assert f"{real.message} {real.fix}".count("systemctl start docker") == 1 and real.fix == ""
    bare = check_docker_engine(request(), Facts(engine_error="Docker engine unreachable"))  # a message with no fix
    assert "systemctl start docker" in bare.fix


def test_a_warm_standby_needs_host_ram_for_the_cpu_copy_of_its_weights() -> None:
    probe = host(host_memory=HostMemory(256 * GIB, 100 * GIB))  # the model is 100 GiB on disk
    assert preflight(probe=probe).check("host.standby_ram").result == "pass"  # no standby, nothing to hold
    check = preflight(request(standby_warm=True), probe=probe).check("host.standby_ram")
    assert check.result == "fail" and check.message == (
        "the CPU copies of the weights leave less than 8,192 MiB of host RAM free: glm53-393k 102,400 MiB (while "
        "it is released); 102,400 MiB needed, 102,400 MiB available"
    )
    assert "swap.standby: none" in check.fix and "swap.standby_ram_waiver" in check.fix
    roomy = host(host_memory=HostMemory(512 * GIB, 200 * GIB))
    assert preflight(request(standby_warm=True), probe=roomy).check("host.standby_ram").result == "pass"
    kept = preflight(request(standby_warm=True, standby_retained=True), probe=roomy).check("host.standby_ram")
    assert kept.result == "pass" and "glm53-393k 102,400 MiB (pinned for as long as it runs)" in kept.message
    assert kept.facts["retained"] is True


def warm(profile: str, gib: int, hold: Any, cid: str = OTHER_ID) -> ServiceRef:
    """A running warm service whose CPU copy of the weights takes ``gib`` GiB of host RAM as ``hold`` says."""
    return ServiceRef(profile, cid, f"servectl-{profile}", backup_bytes=gib * GIB, backup_hold=hold)


def test_preflight_counts_the_pinned_copies_of_the_running_retained_services_beside_the_new_one() -> None:
    """A retained service not paid yet will pin its copy at its first release (counted); one paid already holds
    it now (in use: named, not counted twice); one that takes its copy only while released is not counted."""
    services = (
        warm("a", 50, "to-pin"),
        warm("b", 30, "held", DS4_ID),
        warm("c", 70, "on-release", "c" * 64),
    )
    req = request(standby_warm=True, standby_retained=True, services=services)
    fits = preflight(req, probe=host(host_memory=HostMemory(512 * GIB, 200 * GIB))).check("host.standby_ram")
    assert fits.result == "pass" and fits.facts["copies_mib"] == 150 * 1024
    check = preflight(req, probe=host(host_memory=HostMemory(512 * GIB, 140 * GIB))).check("host.standby_ram")
    assert check.result == "fail" and check.message == (
        "host RAM cannot hold the CPU copies of the weights: glm53-393k 102,400 MiB (pinned for as long as it "
        "runs); a 51,200 MiB (retained, pinned at its first release); already in use: b holds 30,720 MiB; "
        "153,600 MiB needed, 143,360 MiB available"
    )
    assert check.fix.startswith("stop a warm service, set swap.standby_retain_backup: false")
    assert "swap.standby_ram_waiver" not in check.fix  # the copies do not fit at all: nothing to waive
    # the service this swap replaces takes its copy at its release: counted
    replaced = replace(req, replacing=Replacing(container_id="c" * 12))
    both = preflight(replaced, probe=host(host_memory=HostMemory(512 * GIB, 200 * GIB))).check("host.standby_ram")
    assert both.result == "fail" and "c 71,680 MiB (released by this swap)" in both.message


def test_a_waiver_lets_the_copies_eat_into_the_host_ram_reserve_but_not_past_it() -> None:
    req = request(standby_warm=True, standby_ram_waiver="a dedicated box, nothing else runs here")
    short = host(host_memory=HostMemory(256 * GIB, 104 * GIB))  # 100 GiB of copies + 8 GiB reserve > 104 GiB
    assert preflight(replace(req, standby_ram_waiver=None), probe=short).check("host.standby_ram").result == "fail"
    waived = preflight(req, probe=short).check("host.standby_ram")
    assert waived.result == "pass" and "reserve waived: a dedicated box, nothing else runs here" in waived.message
    assert waived.facts["waived"] is True
    assert preflight(req, probe=host(host_memory=HostMemory(256 * GIB, 90 * GIB))).check("host.standby_ram").result == (
        "fail"
    )


def test_the_engines_memlock_limit_is_a_note_not_a_refusal() -> None:
    """CUDA's pinned memory is not charged to RLIMIT_MEMLOCK (the NVIDIA driver pins it without): a 64 KiB limit
    passes, and the message says which limit applies and why it does not bound the copy."""
    roomy = host(host_memory=HostMemory(512 * GIB, 200 * GIB))
    low = request(standby_warm=True, memlock=(65536, 65536), memlock_source="container.ulimits")
    check = preflight(low, probe=roomy).check("host.standby_ram")
    assert check.result == "pass" and "memlock 64 KiB (container.ulimits) does not bound it: CUDA's pinned" in (
        check.message
    )
    assert check.facts["memlock"] == [65536, 65536]
    unset = preflight(request(standby_warm=True), probe=roomy).check("host.standby_ram")
    assert "memlock: the Docker engine's default" in unset.message
    unlimited = preflight(replace(low, memlock=(-1, -1)), probe=roomy).check("host.standby_ram")
    assert "memlock unlimited (container.ulimits)" in unlimited.message


def test_a_warm_profiles_image_may_not_set_what_its_memory_saver_refuses_unless_the_profile_overrides_it() -> None:
    """The image's own environment (its Config.Env) decides PYTORCH_CUDA_ALLOC_CONF, SGLANG_MEMORY_SAVER_CUDA_GRAPH
    and NCCL_GRAPH_REGISTER unless engine.env sets them: rule swap.standby_engine sees only the profile's."""
    env = {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "NCCL_GRAPH_REGISTER": "1",
        "SGLANG_MEMORY_SAVER_CUDA_GRAPH": "true",
        "PATH": "/usr/bin",
    }
    engine = docker(images=[replace(image(), env=env)])
    assert preflight(engine=engine).check("image.standby_env").result == "pass"  # not warm: nothing to check
    warm = request(standby_warm=True, tp=2)
    check = preflight(warm, engine=engine).check("image.standby_env")
    assert check.result == "fail" and check.message.startswith(
        "the image sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: expandable_segments:True turns "
        "torch_memory_saver off (torch_memory_saver/entrypoint.py:397"
    )
    assert "the image sets SGLANG_MEMORY_SAVER_CUDA_GRAPH=true: with the breakable" in check.message
    assert "the image sets NCCL_GRAPH_REGISTER=1: NCCL_GRAPH_REGISTER=1 with tp 2" in check.message
    assert check.fix.startswith("override PYTORCH_CUDA_ALLOC_CONF, SGLANG_MEMORY_SAVER_CUDA_GRAPH, NCCL_GRAPH_REGISTER")
    overridden = replace(
        warm,
        engine_env_names=frozenset({"PYTORCH_CUDA_ALLOC_CONF", "NCCL_GRAPH_REGISTER"}),
        standby_breakable_graph=False,  # cuda-graph-backend-prefill: full
    )
    passed = preflight(overridden, engine=engine).check("image.standby_env")
    assert passed.result == "pass" and passed.facts["overridden"] == ["NCCL_GRAPH_REGISTER", "PYTORCH_CUDA_ALLOC_CONF"]
    assert preflight(warm, engine=docker(images=[])).check("image.standby_env").result == "unknown"


def test_the_docker_adapter_reads_an_images_environment() -> None:
    from servectl.adapters.docker.translate import image_info_from_inspect

    info = image_info_from_inspect({"Id": "sha256:1", "Config": {"Env": ["A=1", "B=x=y", "BROKEN"]}})
    assert info.env == {"A": "1", "B": "x=y"}
    assert image_info_from_inspect({"Id": "sha256:1", "Config": {"Env": None}}).env == {}
