"""servectl as a new user gets it: a wheel installed without ``-e`` and without extras, run from an empty folder.

The wheel is built from this checkout and installed into a fresh venv that cannot see the checkout (no
``PYTHONPATH``, cwd an empty temporary folder), so the shipped profiles, schema and demo model must come from
the package data (tests/integration/_wheel.py builds both, offline from a cached wheelhouse).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _wheel import install_wheel, remove_containers_of, user_env

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv with the servectl wheel (no extras); its bin folder."""
    yield install_wheel(tmp_path_factory.mktemp("wheel"))


def _wheel_version(bin_dir: Path) -> str:
    """The version in the installed wheel's metadata (its file name: servectl-VERSION-py3-none-any.whl)."""
    (dist_info,) = bin_dir.parent.glob("lib/python*/site-packages/servectl-*.dist-info")
    return dist_info.name.removeprefix("servectl-").removesuffix(".dist-info")


def _env(bin_dir: Path, home: Path) -> dict[str, str]:
    return user_env(bin_dir, state=home)


def _run(bin_dir: Path, cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "servectl"), *args],
        cwd=cwd,
        env=_env(bin_dir, cwd.parent / "home"),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_readme_quickstart_works_from_an_empty_folder_with_a_plain_wheel_install(
    installed: Path, tmp_path: Path, docker_client: object
) -> None:
    cwd = tmp_path / "empty"
    cwd.mkdir()
    site = installed.parent
    where = subprocess.run(
        [str(installed / "python"), "-c", "import servectl.paths as p; print(p.SHIPPED_PROFILES_DIR)"],
        cwd=cwd,
        env=_env(installed, cwd.parent / "home"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(site)), f"servectl imported from {where}, not from the installed wheel"

    version = _run(installed, cwd, "--version")
    assert version.returncode == 0 and version.stdout == f"servectl {_wheel_version(installed)}\n", version.stdout

    dry = _run(installed, cwd, "up", "glm53-393k", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "docker run" in dry.stdout and "--tp-size 2" in dry.stdout.replace("\\\n", " ")

    listed = _run(installed, cwd, "profiles")
    assert listed.returncode == 0, listed.stderr
    for name in ("glm53-393k", "demo", "demo-rollback"):
        assert name in listed.stdout, listed.stdout

    missing = _run(installed, cwd, "up", "no-such-profile", "--dry-run")
    assert missing.returncode == 2
    assert missing.stderr.endswith("\n") and str(Path(where)) in missing.stderr, missing.stderr

    try:
        up = _run(installed, cwd, "up", "demo", timeout=600)
        assert up.returncode == 0, up.stdout + up.stderr
        status = _run(installed, cwd, "status", "--json")
        assert status.returncode == 0, status.stderr
        states = {s["profile"]: s["state"] for s in json.loads(status.stdout)["services"]}
        assert states.get("demo") == "ready", status.stdout
        down = _run(installed, cwd, "down", "demo")
        assert down.returncode == 0, down.stdout + down.stderr
        after = _run(installed, cwd, "status", "--json")
        assert "demo" not in {s["profile"] for s in json.loads(after.stdout)["services"]}
    finally:
        remove_containers_of(site)
    assert not list(cwd.glob("*")), "the quickstart wrote into the working folder"


def test_bench_plot_without_the_bench_extra_refuses_at_once_naming_the_extra(installed: Path, tmp_path: Path) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    from servectl.paths import DEMO_MODEL_DIR
    from servectl.standin.process import HostStandin

    missing = subprocess.run(
        [str(installed / "python"), "-c", "import importlib.util as u; print(u.find_spec('matplotlib') is None)"],
        capture_output=True,
        text=True,
        check=True,
        env=_env(installed, tmp_path / "home"),
    )
    assert missing.stdout.strip() == "True", "the venv must not have matplotlib for this test"
    with HostStandin(["--model-path", str(DEMO_MODEL_DIR)], env={"STANDIN_TOKEN_RATE": "500"}) as engine:
        engine.wait_ready()
        served_before = len([line for line in engine.lines if '"POST /v1/' in line])
        url = f"http://{engine.host}:{engine.port}"
        args = ("bench", "--url", url, "--prompt-tokens", "256", "--repeats", "1", "--plot", "t.png")
        t0 = time.perf_counter()
        proc = _run(installed, cwd, *args)
        elapsed = time.perf_counter() - t0
        time.sleep(0.2)  # let the log reader catch up before counting
        served_after = len([line for line in engine.lines if '"POST /v1/' in line])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == "error: --plot needs matplotlib, which is not installed; run: pip install 'servectl[bench]'\n"
    assert "Traceback" not in proc.stdout + proc.stderr
    assert elapsed < 5, f"refusal took {elapsed:.2f}s"  # generous for a loaded CI box; the benchmark records speed
    assert served_after == served_before, "the benchmark sent requests before refusing"
    assert not (cwd / "t.png").exists()


#: The CI installers scripts/test.sh runs; test tooling in tests/tools/servectl_ci, never in the wheel.
CI_INSTALLERS = ("agent_clients", "sglang_venv", "sglang_image")


def test_the_wheel_ships_the_fakes_but_not_the_ci_installers(installed: Path) -> None:
    (site,) = installed.parent.glob("lib/python*/site-packages")
    (dist_info,) = site.glob("servectl-*.dist-info")
    recorded = {line.split(",", 1)[0] for line in (dist_info / "RECORD").read_text(encoding="utf-8").splitlines()}
    assert "servectl/testing/fakes.py" in recorded and "servectl/testing/host.py" in recorded, sorted(recorded)[:20]
    shipped = [name for name in recorded if any(name.endswith(f"/{m}.py") for m in CI_INSTALLERS)]
    assert shipped == [], f"CI installers in the wheel: {shipped}"
    assert not [name for name in recorded if name.startswith(("servectl_ci/", "tests/"))]
    assert not list(site.glob("servectl_ci*"))
