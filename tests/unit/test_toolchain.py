"""Toolchain detection against fake `nvcc` scripts and a stand-in `torch` on the search paths."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from fakes import (
    NVCC_12_4,
    NVCC_12_8,
    NVCC_13_0,
    install_nvcc,
    install_torch,
    make_manifest,
    make_spec,
)
from packaging.version import Version

from kernelpack.errors import UsageError
from kernelpack.plan import make_plan
from kernelpack.toolchain import detection as toolchain
from kernelpack.toolchain.detection import detect

SYSTEM_PATH = "/usr/bin:/bin"


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """This machine has a real /usr/local/cuda; tests see only the toolkits they install,
    and cache torch facts in their own folder."""
    monkeypatch.setattr(toolchain, "DEFAULT_CUDA_HOME", tmp_path / "no-default-cuda")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def environ(*path: Path, site: Path | None = None, **extra: str) -> dict[str, str]:
    env = {
        "PATH": os.pathsep.join([*(str(p) for p in path), SYSTEM_PATH]),
        "HOME": os.environ.get("HOME", "/tmp"),
        "XDG_CACHE_HOME": os.environ["XDG_CACHE_HOME"],
        "KERNELPACK_LAUNCHER": "none",
    }
    if site is not None:
        env["PYTHONPATH"] = str(site)
    env.update(extra)
    return env


@pytest.fixture
def torch_site(tmp_path: Path) -> Path:
    return install_torch(tmp_path / "torch")


# --- nvcc and CUDA_HOME ----------------------------------------------------------------------


def test_resolves_cuda_home_through_wrapper_script(tmp_path: Path, torch_site: Path) -> None:
    bindir = install_nvcc(tmp_path, NVCC_12_4, wrapper=True)
    found = detect(environ(bindir, site=torch_site))
    assert found.cuda_home == tmp_path / "cuda-12.4"
    assert found.nvcc == tmp_path / "cuda-12.4" / "bin" / "nvcc"


def test_resolves_cuda_home_through_symlink(tmp_path: Path, torch_site: Path) -> None:
    install_nvcc(tmp_path, NVCC_12_4, wrapper=False)
    links = tmp_path / "links"
    links.mkdir()
    (links / "nvcc").symlink_to(tmp_path / "cuda-12.4" / "bin" / "nvcc")
    assert detect(environ(links, site=torch_site)).cuda_home == tmp_path / "cuda-12.4"


def test_asks_nvcc_dry_run_for_a_wrapper_it_cannot_read(tmp_path: Path, torch_site: Path) -> None:
    install_nvcc(tmp_path, NVCC_12_4, wrapper=False)
    opaque = tmp_path / "opaque"
    opaque.mkdir()
    (opaque / "nvcc").write_text('#!/bin/sh\nexec "$(dirname "$0")/../cuda-12.4/bin/nvcc" "$@"\n')
    (opaque / "nvcc").chmod(0o755)
    found = detect(environ(opaque, site=torch_site))
    assert found.cuda_home == tmp_path / "cuda-12.4"
    assert found.nvcc == tmp_path / "cuda-12.4" / "bin" / "nvcc"


def test_cuda_home_variable_wins_over_path(tmp_path: Path, torch_site: Path) -> None:
    on_path = install_nvcc(tmp_path / "a", NVCC_12_4)
    install_nvcc(tmp_path / "b", NVCC_13_0)
    home = tmp_path / "b" / "cuda-13.0"
    found = detect(environ(on_path, site=torch_site, CUDA_HOME=str(home)))
    assert found.cuda_home == home
    assert found.nvcc_version == Version("13.0.88")


def test_cuda_path_variable_is_honoured(tmp_path: Path, torch_site: Path) -> None:
    install_nvcc(tmp_path, NVCC_13_0)
    home = tmp_path / "cuda-13.0"
    assert detect(environ(site=torch_site, CUDA_PATH=str(home))).cuda_home == home


def test_cuda_home_without_nvcc_is_nvcc_missing(tmp_path: Path, torch_site: Path) -> None:
    found = detect(environ(site=torch_site, CUDA_HOME=str(tmp_path)))
    assert found.nvcc is None
    assert found.nvcc_missing is not None
    assert found.nvcc_missing.code == "nvcc-missing"
    assert f"CUDA_HOME={tmp_path} has no bin/nvcc" in found.nvcc_missing.message


def test_no_nvcc_anywhere_is_a_fact_not_a_crash(torch_site: Path) -> None:
    found = detect(environ(site=torch_site))
    assert found.nvcc is None and found.nvcc_version is None and found.cuda is None
    assert found.nvcc_missing is not None and found.nvcc_missing.code == "nvcc-missing"
    assert "install the CUDA toolkit" in found.nvcc_missing.message


def test_falls_back_to_default_toolkit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, torch_site: Path
) -> None:
    install_nvcc(tmp_path, NVCC_13_0, wrapper=False)
    monkeypatch.setattr(toolchain, "DEFAULT_CUDA_HOME", tmp_path / "cuda-13.0")
    assert detect(environ(site=torch_site)).cuda_home == tmp_path / "cuda-13.0"


def test_reads_nvcc_version(tmp_path: Path, torch_site: Path) -> None:
    found = detect(environ(install_nvcc(tmp_path, NVCC_12_4), site=torch_site))
    assert found.nvcc_version == Version("12.4.131")
    assert found.cuda == Version("12.4")


def test_nvcc_12_4_targets_include_sm90a_but_not_sm100a(tmp_path: Path, torch_site: Path) -> None:
    targets = detect(environ(install_nvcc(tmp_path, NVCC_12_4), site=torch_site)).nvcc_targets
    assert {"sm_90", "sm_90a", "compute_90"} <= targets
    assert "sm_100a" not in targets


def test_runs_each_nvcc_query_once(tmp_path: Path, torch_site: Path) -> None:
    log = tmp_path / "calls.log"
    detect(environ(install_nvcc(tmp_path, NVCC_12_4), site=torch_site, FAKE_NVCC_LOG=str(log)))
    calls = log.read_text().splitlines()
    assert sorted(calls) == ["--help", "--list-gpu-arch", "--list-gpu-code", "--version"]


# --- torch --------------------------------------------------------------------------------------


def test_reads_torch_facts_without_local_version(tmp_path: Path) -> None:
    site = install_torch(tmp_path, "2.14.1+cu130", "13.0", cxx11_abi=True)
    found = detect(environ(site=site))
    assert found.torch_version == Version("2.14.1")
    assert found.torch_cuda == Version("13.0")
    assert found.cxx11_abi is True
    assert found.torch_dir == site / "torch"
    assert found.torch_missing is None


def test_cpu_only_torch_has_no_cuda(tmp_path: Path) -> None:
    found = detect(environ(site=install_torch(tmp_path, "2.13.0+cpu", None)))
    assert found.torch_version == Version("2.13.0")
    assert found.torch_cuda is None


def test_missing_torch_is_a_fact_not_a_crash(tmp_path: Path) -> None:
    found = detect(environ(site=install_torch(tmp_path, missing=True)))
    assert found.torch_version is None
    assert found.torch_missing is not None and "torch is not installed" in found.torch_missing


def test_broken_torch_reports_its_import_error(tmp_path: Path) -> None:
    found = detect(environ(site=install_torch(tmp_path, import_error="libcudart.so.13: nope")))
    assert found.torch_missing == "import torch failed: ImportError: libcudart.so.13: nope"


def test_torch_folder_in_working_directory_does_not_shadow_torch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, torch_site: Path
) -> None:
    install_torch(tmp_path / "cwd", import_error="shadowed")
    monkeypatch.chdir(tmp_path / "cwd" / "site")
    assert detect(environ(site=torch_site)).torch_missing is None


def test_unrunnable_python_is_torch_missing(tmp_path: Path) -> None:
    found = detect(environ(), python=str(tmp_path / "no-python"))
    assert found.torch_missing is not None and "could not run" in found.torch_missing
    assert found.python == f"{sys.version_info.major}.{sys.version_info.minor}"


def test_finds_nvidia_wheel_include_dirs(tmp_path: Path) -> None:
    site = install_torch(tmp_path)
    for name in ("cu13", "cudnn"):
        (site / "nvidia" / name / "include").mkdir(parents=True)
    (site / "nvidia" / "nccl" / "lib").mkdir(parents=True)
    found = detect(environ(site=site)).nvidia_include_dirs
    ours = [d for d in found if site in d.parents]
    assert ours == [site / "nvidia" / "cu13" / "include", site / "nvidia" / "cudnn" / "include"]


def test_reuses_cached_torch_facts_while_torch_is_unchanged(tmp_path: Path) -> None:
    env = environ(site=install_torch(tmp_path, "2.14.1+cu130", "13.0"))
    detect(env)
    (cached,) = (tmp_path / "cache" / "kernelpack").glob("torch-*.json")
    cached.write_text(cached.read_text().replace("2.14.1+cu130", "2.14.9+cu130"))
    assert detect(env).torch_version == Version("2.14.9")


def test_reinstalled_torch_is_probed_again(tmp_path: Path) -> None:
    site = install_torch(tmp_path, "2.14.1+cu130", "13.0")
    detect(environ(site=site))
    init = site / "torch" / "__init__.py"
    install_torch(tmp_path, "2.13.0+cpu", None)
    stamp = init.stat().st_mtime_ns + 10**9
    os.utime(init, ns=(stamp, stamp))
    assert detect(environ(site=site)).torch_version == Version("2.13.0")


def test_missing_torch_is_not_cached(tmp_path: Path) -> None:
    detect(environ(site=install_torch(tmp_path, missing=True)))
    assert not list((tmp_path / "cache").rglob("torch-*.json"))


# --- launcher and jobs ---------------------------------------------------------------------------


def launchers(tmp_path: Path, *names: str) -> Path:
    folder = tmp_path / "launchers"
    folder.mkdir(exist_ok=True)
    for name in names:
        (folder / name).write_text('#!/bin/sh\nexec "$@"\n')
        (folder / name).chmod(0o755)
    return folder


def test_prefers_ccache_over_sccache_and_says_why(tmp_path: Path, torch_site: Path) -> None:
    folder = launchers(tmp_path, "sccache", "ccache")
    env = environ(folder, site=torch_site)
    del env["KERNELPACK_LAUNCHER"]
    found = detect(env)
    assert found.launcher == folder / "ccache"
    assert found.to_json()["launcher_why"] == (
        "ccache is on PATH and no remote sccache backend or farm is configured"
    )


def test_uses_ccache_when_no_sccache(tmp_path: Path, torch_site: Path) -> None:
    folder = launchers(tmp_path, "ccache")
    env = environ(folder, site=torch_site, PATH=str(folder))
    del env["KERNELPACK_LAUNCHER"]
    assert detect(env).launcher == folder / "ccache"


def test_launcher_none_turns_it_off(tmp_path: Path, torch_site: Path) -> None:
    folder = launchers(tmp_path, "ccache")
    assert detect(environ(folder, site=torch_site, KERNELPACK_LAUNCHER="none")).launcher is None


def test_launcher_path_forces_one(tmp_path: Path, torch_site: Path) -> None:
    forced = launchers(tmp_path, "mycache") / "mycache"
    env = environ(site=torch_site, KERNELPACK_LAUNCHER=str(forced))
    assert detect(env).launcher == forced


def test_launcher_that_does_not_exist_is_a_usage_error(tmp_path: Path, torch_site: Path) -> None:
    env = environ(site=torch_site, KERNELPACK_LAUNCHER=str(tmp_path / "nope"))
    with pytest.raises(UsageError, match="KERNELPACK_LAUNCHER="):
        detect(env)


def test_jobs_variable_overrides_budget(torch_site: Path) -> None:
    assert detect(environ(site=torch_site, KERNELPACK_JOBS="7")).jobs == 7


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_bad_jobs_variable_is_a_usage_error(torch_site: Path, value: str) -> None:
    with pytest.raises(UsageError, match=f"KERNELPACK_JOBS={value} is not a positive integer"):
        detect(environ(site=torch_site, KERNELPACK_JOBS=value))


def test_jobs_default_to_the_cores_whatever_the_memory(
    monkeypatch: pytest.MonkeyPatch, torch_site: Path
) -> None:
    monkeypatch.setattr(toolchain, "_cores", lambda: 2)
    monkeypatch.setattr(toolchain, "available_memory", lambda: 1024**3)
    assert detect(environ(site=torch_site)).jobs == 2


def test_available_memory_is_reported_for_the_job_pools(
    monkeypatch: pytest.MonkeyPatch, torch_site: Path
) -> None:
    monkeypatch.setattr(toolchain, "available_memory", lambda: 10 * 1024**3)
    found = detect(environ(site=torch_site))
    assert found.memory == 10 * 1024**3
    assert found.to_json()["memory"] == 10 * 1024**3


# --- JSON and detection feeding the plan -------------------------------------------------------


def test_to_json_carries_nvcc_and_torch_versions(tmp_path: Path, torch_site: Path) -> None:
    found = detect(environ(install_nvcc(tmp_path, NVCC_12_4), site=torch_site))
    data = json.loads(json.dumps(found.to_json()))
    assert data["nvcc_version"] == "12.4.131"
    assert data["cuda"] == "12.4"
    assert data["torch"] == "2.14.1"
    assert data["torch_cuda"] == "13.0"
    assert data["nvcc_missing"] is None


def test_cuda_12_nvcc_against_cuda_13_torch_skips_with_cuda_mismatch(tmp_path: Path) -> None:
    site = install_torch(tmp_path / "t", "2.14.1+cu130", "13.0")
    found = detect(environ(install_nvcc(tmp_path, NVCC_12_8), site=site))
    skip = make_plan(make_manifest(make_spec()), found).kernel("rmsnorm").skip
    assert skip is not None and skip.code == "cuda-mismatch"


def test_nvcc_12_4_skips_sm100a_kernel_with_arch_unsupported(tmp_path: Path) -> None:
    site = install_torch(tmp_path / "t", "2.6.0+cu124", "12.4")
    found = detect(environ(install_nvcc(tmp_path, NVCC_12_4), site=site))
    skip = (
        make_plan(make_manifest(make_spec("flash_moe", ["10.0a"])), found).kernel("flash_moe").skip
    )
    assert skip is not None and skip.code == "arch-unsupported"
    assert skip.message == "nvcc 12.4 cannot build sm_100a"


def test_no_nvcc_skips_with_nvcc_missing(torch_site: Path) -> None:
    skip = (
        make_plan(make_manifest(make_spec()), detect(environ(site=torch_site)))
        .kernel("rmsnorm")
        .skip
    )
    assert skip is not None and skip.code == "nvcc-missing"
