"""The CUDA toolkit rule and kernelpack's toolkit cache, against fake nvcc scripts and fake
CUDA wheels that the real pip installs from a local folder (`fakes.cudawheels`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import (
    NVCC_12_4,
    NVCC_13_0,
    NVCC_13_2,
    install_nvcc,
    install_torch,
    local_index,
    write_cuda_wheels,
)
from packaging.version import Version

from kernelpack import backend
from kernelpack.errors import UsageError
from kernelpack.toolchain import cudawheels, detection
from kernelpack.toolchain.detection import Toolchain, detect
from kernelpack.toolchain.toolkitcache import MANIFEST, ToolkitCache, verify

SYSTEM_PATH = "/usr/bin:/bin"
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cuda-wheels")
    write_cuda_wheels(folder, NVCC_13_0)
    return write_cuda_wheels(folder, NVCC_13_2)


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No system toolkit but the ones a test installs; caches in the test's folder."""
    monkeypatch.setattr(detection, "DEFAULT_CUDA_HOME", tmp_path / "no-default-cuda")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def torch_site(tmp_path: Path) -> Path:
    return install_torch(tmp_path / "torch")


def environ(wheels: Path, *path: Path, site: Path | None = None, **extra: str) -> dict[str, str]:
    env = local_index(wheels)
    env.update(
        PATH=os.pathsep.join([*(str(p) for p in path), SYSTEM_PATH]),
        XDG_CACHE_HOME=os.environ["XDG_CACHE_HOME"],
        KERNELPACK_LAUNCHER="none",
    )
    env.pop("CUDA_HOME", None)
    env.pop("CUDA_PATH", None)
    if site is not None:
        env["PYTHONPATH"] = str(site)
    env.update(extra)
    return env


def provisioned(env: dict[str, str], lines: list[str] | None = None) -> Toolchain:
    said = lines if lines is not None else []
    return detect(env, provision=True, say=said.append)


def cache() -> ToolkitCache:
    return ToolkitCache.of(Path(os.environ["XDG_CACHE_HOME"]) / "kernelpack")


# --- the rule ---------------------------------------------------------------------------------


def test_a_system_toolkit_of_torchs_cuda_major_comes_first(
    tmp_path: Path, wheels: Path, torch_site: Path
) -> None:
    found = provisioned(environ(wheels, install_nvcc(tmp_path, NVCC_13_0), site=torch_site))
    assert (found.toolkit, found.nvcc_version) == ("system", Version("13.0.88"))
    assert "is CUDA 13.0, as torch's CUDA 13.0 asks" in found.toolkit_why
    assert not cache().root.exists()


def test_without_a_system_toolkit_a_build_installs_the_wheels_of_torchs_cuda(
    wheels: Path, torch_site: Path
) -> None:
    lines: list[str] = []
    found = provisioned(environ(wheels, site=torch_site), lines)
    assert found.toolkit == "cache" and found.nvcc_missing is None
    assert found.nvcc_version == Version("13.0.88")
    assert found.cuda_home is not None and found.cuda_home.parent.parent.parent == cache().root
    assert [line.split(" into ")[0] for line in lines] == [
        "kernelpack: installing the CUDA 13.0 wheels"
    ]
    assert found.toolkit_line().startswith("kernelpack: CUDA toolkit 13.0.88 (cache, ")
    assert "no system toolkit" in found.toolkit_line()


def test_a_second_build_uses_the_cached_toolkit_without_installing(
    wheels: Path, torch_site: Path
) -> None:
    first = provisioned(environ(wheels, site=torch_site))
    lines: list[str] = []
    again = provisioned(environ(wheels, site=torch_site), lines)
    assert again.cuda_home == first.cuda_home and lines == []


def test_a_system_toolkit_of_another_major_is_passed_over_for_the_wheels(
    tmp_path: Path, wheels: Path, torch_site: Path
) -> None:
    found = provisioned(environ(wheels, install_nvcc(tmp_path, NVCC_12_4), site=torch_site))
    assert (found.toolkit, found.cuda) == ("cache", Version("13.0"))
    assert "is CUDA 12.4, not 13.x" in found.toolkit_why


def test_kernelpack_cuda_chooses_the_release_over_a_system_toolkit_of_another(
    tmp_path: Path, wheels: Path, torch_site: Path
) -> None:
    bindir = install_nvcc(tmp_path, NVCC_13_0)
    found = provisioned(environ(wheels, bindir, site=torch_site, KERNELPACK_CUDA="13.2"))
    assert (found.toolkit, found.nvcc_version) == ("cache", Version("13.2.51"))
    assert "is CUDA 13.0, not 13.2" in found.toolkit_why


def test_kernelpack_cuda_of_another_major_than_torch_is_one_line(
    wheels: Path, torch_site: Path
) -> None:
    with pytest.raises(UsageError, match=r"KERNELPACK_CUDA=12.8: torch is built with CUDA 13.0"):
        detect(environ(wheels, site=torch_site, KERNELPACK_CUDA="12.8"))


@pytest.mark.parametrize("value", ["13", "13.0.1", "thirteen", "13.0rc1"])
def test_kernelpack_cuda_that_is_not_a_release_is_one_line(
    wheels: Path, torch_site: Path, value: str
) -> None:
    with pytest.raises(UsageError, match=rf"KERNELPACK_CUDA={value}: expected a CUDA release"):
        detect(environ(wheels, site=torch_site, KERNELPACK_CUDA=value))


def test_the_cuda_wheels_in_torchs_environment_come_before_the_cache(
    wheels: Path, torch_site: Path
) -> None:
    wanted = cudawheels.requirements(Version("13.0"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            torch_site,
            *wanted,
        ],
        env=local_index(wheels),
        check=True,
    )
    found = provisioned(environ(wheels, site=torch_site))
    assert (found.toolkit, found.cuda_home) == ("environment", torch_site / "nvidia" / "cu13")
    assert not cache().root.exists()


def test_without_provisioning_the_missing_toolkit_names_how_to_get_it(
    wheels: Path, torch_site: Path
) -> None:
    found = detect(environ(wheels, site=torch_site))
    assert found.nvcc_missing is not None and found.nvcc_missing.code == "nvcc-missing"
    assert "a build installs them, as does `kernelpack toolchain install`" in (
        found.nvcc_missing.message
    )
    assert not cache().root.exists()


def test_cuda_12_torch_without_a_toolkit_says_there_is_no_nvcc_wheel(
    tmp_path: Path, wheels: Path
) -> None:
    site = install_torch(tmp_path / "t12", "2.9.0+cu128", "12.8")
    found = provisioned(environ(wheels, site=site))
    assert found.nvcc_missing is not None
    assert "CUDA 12 has no nvcc wheel" in found.nvcc_missing.message
    assert "install the CUDA 12.8 toolkit and set CUDA_HOME" in found.nvcc_missing.message


def test_an_explicit_cuda_home_without_nvcc_is_not_passed_over(
    tmp_path: Path, wheels: Path, torch_site: Path
) -> None:
    found = provisioned(environ(wheels, site=torch_site, CUDA_HOME=str(tmp_path)))
    assert found.nvcc_missing is not None
    assert f"CUDA_HOME={tmp_path} has no bin/nvcc" in found.nvcc_missing.message
    assert not cache().root.exists()


def test_a_wheel_toolkit_links_cudart_through_a_private_unversioned_name(
    wheels: Path, torch_site: Path
) -> None:
    found = provisioned(environ(wheels, site=torch_site))
    (links,) = found.link_dirs
    assert found.cuda_home is not None
    assert (links / "libcudart.so").resolve() == found.cuda_home / "lib" / "libcudart.so.13"


def test_archs_and_version_checks_come_from_the_wheel_nvcc(wheels: Path, torch_site: Path) -> None:
    found = provisioned(environ(wheels, site=torch_site, KERNELPACK_CUDA="13.2"))
    assert found.cuda == Version("13.2")
    assert {"sm_90a", "sm_100f", "compute_90"} <= found.nvcc_targets


# --- the cache: concurrency, interruptions, changes, no index ---------------------------------


def _install_command(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "kernelpack", "toolchain", "install", "--cuda", "13.0"],
        env={**env, "PYTHONPATH": str(SRC)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_two_installs_at_once_both_succeed_with_one_toolkit(wheels: Path) -> None:
    env = environ(wheels)
    runs = [_install_command(env) for _ in range(2)]
    results = [(run.wait(timeout=300), *run.communicate()) for run in runs]
    assert [code for code, _, _ in results] == [0, 0], results
    (toolkit,) = cache().toolkits(Version("13.0"))
    assert all(str(toolkit.root) in out for _, out, _ in results)
    assert verify(toolkit.folder, full=True) is None


def test_a_killed_install_leaves_no_toolkit_that_a_build_would_use(
    wheels: Path, torch_site: Path
) -> None:
    run = _install_command(environ(wheels))
    root = cache().root
    deadline = time.monotonic() + 60
    while not any(root.glob(".tmp-*/*")) and time.monotonic() < deadline:
        time.sleep(0.005)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait(timeout=30)
    assert cache().toolkits(Version("13.0")) == []
    assert detect(environ(wheels, site=torch_site)).nvcc_missing is not None
    found = provisioned(environ(wheels, site=torch_site))
    assert found.toolkit == "cache"
    assert not list(root.glob(".tmp-*"))


@pytest.mark.parametrize("change", ["edit", "remove"])
def test_a_changed_toolkit_is_found_and_reinstalled_with_one_line(
    wheels: Path, torch_site: Path, change: str
) -> None:
    first = provisioned(environ(wheels, site=torch_site))
    assert first.nvcc is not None
    if change == "edit":
        with first.nvcc.open("a") as handle:
            handle.write("# changed\n")
    else:
        first.nvcc.unlink()
    assert detect(environ(wheels, site=torch_site)).nvcc_missing is not None
    lines: list[str] = []
    again = provisioned(environ(wheels, site=torch_site), lines)
    what = "was changed" if change == "edit" else "is missing"
    assert len(lines) == 2, lines
    assert lines[0].startswith("kernelpack: the CUDA 13.0 toolkit in ")
    assert lines[0].endswith(f"(nvidia/cu13/bin/nvcc {what}); reinstalling it")
    assert again.toolkit == "cache" and again.nvcc_missing is None
    assert again.nvcc is not None and "# changed" not in again.nvcc.read_text()


def test_a_changed_digest_is_found_by_a_full_check(wheels: Path, torch_site: Path) -> None:
    found = provisioned(environ(wheels, site=torch_site))
    assert found.cuda_home is not None
    header = found.cuda_home / "include" / "cuda_runtime.h"
    stat = header.stat()
    header.write_text("/* FAKE */\n")  # the same size
    os.utime(header, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    (toolkit,) = cache().toolkits(Version("13.0"))
    assert verify(toolkit.folder) is None
    assert verify(toolkit.folder, full=True) == (
        "nvidia/cu13/include/cuda_runtime.h was changed (its digest differs)"
    )


def test_an_unreachable_index_is_one_line_naming_what_to_install(
    tmp_path: Path, wheels: Path, torch_site: Path
) -> None:
    env = environ(wheels, site=torch_site)
    del env["PIP_NO_INDEX"], env["PIP_FIND_LINKS"]
    env.update(PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_RETRIES="0", PIP_TIMEOUT="2")
    lines: list[str] = []
    found = provisioned(env, lines)
    assert len(lines) == 2 and "\n" not in lines[1], lines
    assert lines[1].startswith("kernelpack: cannot install the CUDA 13.0 wheels (python: ")
    assert lines[1].endswith(
        "install them by hand: pip install 'nvidia-cuda-nvcc==13.0.*' 'nvidia-nvvm==13.0.*' "
        "'nvidia-cuda-crt==13.0.*' 'nvidia-cuda-cccl==13.0.*' 'nvidia-cuda-runtime==13.0.*', "
        "or set CUDA_HOME to a CUDA 13 toolkit"
    )
    assert found.nvcc_missing is not None and "install them by hand" in found.nvcc_missing.message
    assert cache().toolkits(Version("13.0")) == []


def test_the_manifest_lists_every_file_with_its_digest(wheels: Path, torch_site: Path) -> None:
    provisioned(environ(wheels, site=torch_site))
    (toolkit,) = cache().toolkits(Version("13.0"))
    manifest = json.loads((toolkit.folder / MANIFEST).read_text())
    assert manifest["versions"]["nvidia-cuda-cccl"] == "13.0.88"
    size, _, digest = manifest["files"]["nvidia/cu13/bin/nvcc"]
    assert size == (toolkit.root / "bin" / "nvcc").stat().st_size and len(digest) == 64


# --- the CLI and the PEP 517 hooks ------------------------------------------------------------


def _use(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """This process's environment is `env`'s variables, with no CUDA_HOME."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CUDA_HOME", raising=False)


def test_toolchain_show_json_names_the_toolkit(
    wheels: Path,
    torch_site: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kernelpack.cli import main

    provisioned(environ(wheels, site=torch_site))
    _use(monkeypatch, environ(wheels, site=torch_site))
    assert main(["toolchain", "show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["toolkit"] == "cache" and shown["nvcc_version"] == "13.0.88"
    assert [t["cuda"] for t in shown["cached"]] == ["13.0"]


def test_get_requires_adds_the_cuda_wheels_when_no_nvcc_is_usable(
    wheels: Path, torch_site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(monkeypatch, environ(wheels, site=torch_site))
    monkeypatch.setattr(backend, "_project", lambda: pytest.fail("no project needed"))
    monkeypatch.setattr(backend.importlib.util, "find_spec", lambda name: object())
    requires = backend.get_requires_for_build_wheel()
    assert requires[-5:] == [
        "nvidia-cuda-nvcc==13.0.*",
        "nvidia-nvvm==13.0.*",
        "nvidia-cuda-crt==13.0.*",
        "nvidia-cuda-cccl==13.0.*",
        "nvidia-cuda-runtime==13.0.*",
    ]
    assert backend.get_requires_for_build_editable()[-5:] == requires[-5:]


def test_get_requires_adds_no_cuda_wheel_beside_a_usable_system_nvcc(
    tmp_path: Path, wheels: Path, torch_site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(monkeypatch, environ(wheels, install_nvcc(tmp_path, NVCC_13_0), site=torch_site))
    monkeypatch.setattr(backend.importlib.util, "find_spec", lambda name: object())
    assert backend.get_requires_for_build_wheel() == ["kernelpack", "ninja>=1.11"]


def test_doctor_shows_the_toolkit_and_why(
    wheels: Path,
    torch_site: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kernelpack.cli import main

    provisioned(environ(wheels, site=torch_site))
    _use(monkeypatch, environ(wheels, site=torch_site))
    monkeypatch.chdir(torch_site)
    assert main(["doctor"]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("toolkit")]
    assert row.split(None, 1)[1].startswith("cache: no system toolkit (no nvcc on PATH")
    assert main(["doctor", "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)["toolchain"]
    assert facts["toolkit"] == "cache" and facts["link_dirs"]
