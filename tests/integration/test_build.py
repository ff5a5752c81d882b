"""The build engine with the real nvcc (CPU only): one graph, incremental, cached, atomic.

The test package `packages/kpdemo` has a stable-ABI kernel (`scale`) and a classic one
(`addone`). It is compiled once a run (`built`, shared with the other files through
conftest.py); tests that change files work on a copy of that built tree (`tree`), which the
graph's relative paths keep valid, and every compile goes through the run's private ccache
so copies and fresh clones hit it.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from builds import BuiltPackage, build_env, copy_built, copy_package
from elftools.elf.elffile import ELFFile
from signals import with_default_signals

from kernelpack.builder import engine, install
from kernelpack.builder.flags import KernelFlags, kernel_flags
from kernelpack.builder.outputs import BuildResult
from kernelpack.cli import main
from kernelpack.errors import BuildError, PlanError
from kernelpack.plan import plan_project
from kernelpack.project.locate import Project, locate
from kernelpack_runtime.arch import Arch
from kernelpack_runtime.record import BuildRecord

pytestmark = pytest.mark.integration

SRC = Path(__file__).resolve().parents[2] / "src"
CUOBJDUMP_PARTS = ("triton", "backends", "nvidia", "bin", "cuobjdump")
# Mangled names in torch's C++ namespaces: c10::, at::, torch:: (also const members: _ZNK).
TORCH_CXX_SYMBOL = re.compile(r"^_ZN?K?\d*(3c10|2at|5torch)")


def _build(root: Path, env: dict[str, str], **options: object) -> BuildResult:
    result = engine.build_project(locate(root), environ=env, **options)  # type: ignore[arg-type]
    install.install_inplace(result)
    return result


def _compiled(result: BuildResult) -> set[str]:
    return {step.output for step in result.compiled}


@pytest.fixture(scope="session")
def built(built_package: BuiltPackage) -> tuple[Path, BuildResult]:
    """kpdemo copied out of the source tree and built in place once a run (shared)."""
    return built_package("kpdemo")


@pytest.fixture
def tree(built: tuple[Path, BuildResult], tmp_path: Path) -> Path:
    """A private copy of the built tree (sources, build folder and libraries, mtimes kept)."""
    return copy_built(built[0], tmp_path / "kpdemo")


def _add_to_addone(manifest: Path, line: str) -> None:
    """Add a key to the `[addone]` table of a copied manifest."""
    sources = 'sources = ["csrc/addone.cu"'
    manifest.write_text(manifest.read_text().replace(sources, f"{line}\n{sources}"))


def _project(root: Path) -> Project:
    return locate(root)


def _library(root: Path, kernel: str) -> Path:
    (path,) = (root / "kpdemo" / kernel).glob("_C*.so")
    return path


def _cuobjdump() -> Path:
    import triton

    path = Path(triton.__file__).parent.joinpath(*CUOBJDUMP_PARTS[1:])
    if not path.is_file():
        pytest.skip("triton's cuobjdump is not installed")
    return path


def _undefined_symbols(library: Path) -> set[str]:
    with library.open("rb") as fh:
        dynsym = ELFFile(fh).get_section_by_name(".dynsym")
        return {sym.name for sym in dynsym.iter_symbols() if sym["st_shndx"] == "SHN_UNDEF"}


# --- what one build produces -------------------------------------------------------------


def test_builds_stable_and_classic_kernel_for_sm_90a(built: tuple[Path, BuildResult]) -> None:
    root, result = built
    record = result.record
    assert {name: k.status for name, k in record.kernels.items()} == {
        "scale": "built",
        "addone": "built",
    }
    assert record.kernels["scale"].archs == (Arch.parse("9.0a"),)
    assert _library(root, "scale").name == "_C.abi3.so"
    assert _library(root, "addone").name.startswith("_C.cpython-")


def test_both_kernels_compile_in_one_ninja_graph(built: tuple[Path, BuildResult]) -> None:
    root, _ = built
    graph = (root / "build" / "kernelpack" / "build.ninja").read_text()
    assert "lib/scale/_C.abi3.so" in graph
    assert "lib/addone/_C.cpython-" in graph


@pytest.mark.parametrize("kernel", ["scale", "addone"])
def test_library_holds_sm_90a_cubin_and_no_ptx(
    built: tuple[Path, BuildResult], kernel: str
) -> None:
    library = _library(built[0], kernel)
    cuobjdump = _cuobjdump()
    elves = subprocess.run(
        [cuobjdump, "--list-elf", library], capture_output=True, text=True, check=True
    ).stdout
    ptx = subprocess.run([cuobjdump, "--list-ptx", library], capture_output=True, text=True)
    assert "sm_90a" in elves
    assert ".ptx" not in ptx.stdout


def test_stable_library_needs_no_cxx_torch_symbol(built: tuple[Path, BuildResult]) -> None:
    undefined = _undefined_symbols(_library(built[0], "scale"))
    assert sorted(s for s in undefined if TORCH_CXX_SYMBOL.match(s)) == []
    assert any(s.startswith(("aoti_torch_", "torch_")) for s in undefined)


def test_classic_library_does_need_cxx_torch_symbols(built: tuple[Path, BuildResult]) -> None:
    # The control for the check above: the same pattern finds ATen's C++ symbols here.
    undefined = _undefined_symbols(_library(built[0], "addone"))
    assert any(TORCH_CXX_SYMBOL.match(s) for s in undefined)


def test_generated_module_init_makes_c_importable(built: tuple[Path, BuildResult]) -> None:
    for kernel in ("scale", "addone"):
        with _library(built[0], kernel).open("rb") as fh:
            dynsym = ELFFile(fh).get_section_by_name(".dynsym")
            assert dynsym.get_symbol_by_name("PyInit__C"), kernel


def test_build_record_is_written_into_the_package(built: tuple[Path, BuildResult]) -> None:
    root, result = built
    record = BuildRecord.read(root / "kpdemo" / "_kernelpack.json")
    assert record == result.record
    assert record.version == "0.3.0+" + result.plan.version_tag()
    scale = record.kernels["scale"]
    assert (scale.abi, scale.stable_target, scale.namespace) == ("stable", "2.10", "kpdemo_scale")
    assert scale.library == "scale/_C.abi3.so"
    assert re.fullmatch(r"[0-9a-f]{64}", scale.sources_sha256 or "")


def test_record_on_disk_is_exactly_what_the_record_types_write(
    tree: Path, ccache_dir: Path
) -> None:
    # tests/unit/test_record.py pins the wire format of the types; the build writes through them.
    _build(tree, build_env(ccache_dir, KPDEMO_KERNELS="scale"))
    path = tree / "kpdemo" / "_kernelpack.json"
    data = json.loads(path.read_text())
    assert BuildRecord.from_json(data).to_json() == data
    assert (data["schema"], data["package"], data["env_prefix"]) == (2, "kpdemo", "KPDEMO")
    assert data["kernels"]["addone"]["status"] == "skipped"


def test_in_place_record_is_readable_by_every_user(tree: Path, ccache_dir: Path) -> None:
    previous = os.umask(0o022)
    try:
        _build(tree, build_env(ccache_dir, KPDEMO_KERNELS="scale"))
    finally:
        os.umask(previous)
    assert (tree / "kpdemo" / "_kernelpack.json").stat().st_mode & 0o777 == 0o644


def test_a_custom_env_prefix_is_recorded_and_disables_at_run_time(
    tree: Path, ccache_dir: Path
) -> None:
    pyproject = tree / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(
            "[tool.kernelpack]\n", '[tool.kernelpack]\nenv-prefix = "DEMO"\n'
        )
    )
    _build(tree, build_env(ccache_dir, DEMO_KERNELS="scale"))
    record = BuildRecord.read(tree / "kpdemo" / "_kernelpack.json")
    assert record.env_prefix == "DEMO"
    assert not record.kernels["addone"].built  # DEMO_KERNELS selected at build time
    code = (
        "import json, os\n"
        "from kernelpack_runtime import Registry\n"
        "from kernelpack_runtime.testing.fakes import fake_probe\n"
        "os.environ['DEMO_DISABLE'] = 'scale'\n"
        "reason = Registry('kpdemo', probe=fake_probe('9.0')).unavailable_reason('scale')\n"
        "print(json.dumps([reason.code, reason.message]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KPDEMO_", "DEMO_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(SRC)])
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout.splitlines()[-1]) == [
        "disabled",
        "disabled by DEMO_DISABLE=scale; remove 'scale' from it to use the kernel",
    ]


def _flags(built: tuple[Path, BuildResult], kernel: str) -> KernelFlags:
    toolchain = built[1].plan.toolchain
    return kernel_flags(built[1].plan.kernel(kernel), toolchain)


def test_classic_flags_come_from_torch_helpers(built: tuple[Path, BuildResult]) -> None:
    import torch
    from torch.utils import cpp_extension

    flags = _flags(built, "addone")
    abi = int(torch.compiled_with_cxx11_abi())
    assert {f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-DTORCH_EXTENSION_NAME=_C"} <= set(flags.defines)
    assert set(cpp_extension.include_paths(device_type="cpu")) <= set(flags.include_dirs)
    libraries = cpp_extension.CUDAExtension("_C", []).libraries
    assert {f"-l{lib}" for lib in libraries} <= set(flags.ldflags)
    assert "-ltorch_python" in flags.ldflags


def test_stable_flags_target_the_stable_abi_and_the_limited_api(
    built: tuple[Path, BuildResult],
) -> None:
    flags = _flags(built, "scale")
    assert {
        "-DTORCH_TARGET_VERSION=0x020a000000000000", "-DUSE_CUDA", "-DPy_LIMITED_API=0x030a0000"
    } <= set(flags.defines)  # fmt: skip
    assert "-DTORCH_API_INCLUDE_EXTENSION_H" not in flags.defines
    assert "-ltorch_python" not in flags.ldflags
    assert flags.ldflags.index("-Wl,--as-needed") < flags.ldflags.index("-ltorch")


# --- incremental rebuilds ----------------------------------------------------------------


def test_noop_rebuild_compiles_nothing(tree: Path, ccache_dir: Path) -> None:
    result = _build(tree, build_env(ccache_dir))
    assert result.steps == ()


def test_touching_one_source_recompiles_only_that_kernel(tree: Path, ccache_dir: Path) -> None:
    (tree / "kpdemo" / "scale" / "csrc" / "scale.cu").touch()
    result = _build(tree, build_env(ccache_dir))
    assert _compiled(result) == {"obj/scale/scale/csrc/scale.cu.o"}


def test_header_edit_rebuilds_its_includer(tree: Path, ccache_dir: Path) -> None:
    header = tree / "kpdemo" / "scale" / "csrc" / "scale.h"
    header.write_text(header.read_text().replace("256", "128"))
    result = _build(tree, build_env(ccache_dir))
    assert _compiled(result) == {"obj/scale/scale/csrc/scale.cu.o"}


def test_flag_change_rebuilds_that_kernel(tree: Path, ccache_dir: Path) -> None:
    manifest = tree / "kpdemo" / "kernels.toml"
    _add_to_addone(manifest, 'defines = { KPDEMO_FLAG_TEST = "1" }')
    result = _build(tree, build_env(ccache_dir))
    assert {o.split("/")[1] for o in _compiled(result)} == {"addone"}


def test_nvcc_env_flags_are_on_the_command_line_so_cache_and_graph_see_them(
    tree: Path, ccache_dir: Path
) -> None:
    # nvcc reads NVCC_APPEND_FLAGS itself; left in the environment, ccache would serve an
    # object compiled without it (or the graph would not rebuild when it changes).
    env = {**build_env(ccache_dir), "NVCC_APPEND_FLAGS": "-DKPDEMO_ENV_FLAG=1"}
    result = _build(tree, env)
    cuda_objects = {o for o in _compiled(result) if o.endswith(".cu.o")}
    assert {o.split("/")[1] for o in cuda_objects} == {"addone", "scale"}
    assert "-DKPDEMO_ENV_FLAG=1" in (tree / "build" / "kernelpack" / "build.ninja").read_text()
    restored = _build(tree, build_env(ccache_dir))
    assert {o for o in _compiled(restored) if o.endswith(".cu.o")} == cuda_objects


def test_unchanged_library_is_not_reinstalled(tree: Path, ccache_dir: Path) -> None:
    before = _library(tree, "addone").stat().st_mtime_ns
    (tree / "kpdemo" / "scale" / "csrc" / "scale.cu").touch()
    _build(tree, build_env(ccache_dir))
    assert _library(tree, "addone").stat().st_mtime_ns == before


def test_fresh_clone_in_another_folder_hits_the_cache(tmp_path: Path, ccache_dir: Path) -> None:
    clone = tmp_path / "elsewhere" / "clone"
    copy_package("kpdemo", clone)
    env = build_env(ccache_dir)
    project = _project(clone)
    plan = plan_project(project, env)
    if plan.toolchain.launcher is None or "ccache" not in plan.toolchain.launcher.name:
        pytest.skip("ccache is not installed")
    subprocess.run(["ccache", "-z"], env=env, check=True, capture_output=True)
    built_result = _build(clone, env)
    stats = dict(
        line.split("\t")
        for line in subprocess.run(
            ["ccache", "--print-stats"], env=env, capture_output=True, text=True, check=True
        ).stdout.splitlines()
    )
    hits = int(stats["direct_cache_hit"]) + int(stats["preprocessed_cache_hit"])
    assert int(stats["cache_miss"]) == 0
    assert hits == len(built_result.compiled) > 0


def test_fresh_clone_does_not_import_torch(
    built: tuple[Path, BuildResult],
    tmp_path: Path,
    ccache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What torch says (version, ABI, extension flags) is cached on the machine, not per tree.
    clone = tmp_path / "clone"
    copy_package("kpdemo", clone)
    pythons: list[list[str]] = []
    run = subprocess.run

    def spy(argv: list[str], *args: object, **kwargs: object) -> object:
        if "-c" in argv:
            pythons.append(argv)
        return run(argv, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "run", spy)
    result = _build(clone, build_env(ccache_dir))
    assert result.libraries.keys() == {"scale", "addone"}
    assert pythons == []


# --- selection -----------------------------------------------------------------------------


def test_subset_variable_builds_only_the_named_kernel(tree: Path, ccache_dir: Path) -> None:
    result = _build(tree, build_env(ccache_dir, KPDEMO_KERNELS="scale"))
    addone = result.record.kernels["addone"]
    assert addone.reason is not None and addone.reason.code == "not-selected"
    assert result.libraries.keys() == {"scale"}


def test_unbuildable_kernel_is_recorded_as_skipped_with_its_reason(
    tree: Path, ccache_dir: Path
) -> None:
    _add_to_addone(tree / "kpdemo" / "kernels.toml", 'min-cuda = "99.0"')
    result = _build(tree, build_env(ccache_dir))
    record = BuildRecord.read(tree / "kpdemo" / "_kernelpack.json")
    reason = record.kernels["addone"].reason
    assert reason is not None and reason.code == "cuda-too-old"
    assert result.libraries.keys() == {"scale"}


def test_kernel_without_its_sources_is_skipped_so_the_rest_still_builds(
    tree: Path, ccache_dir: Path
) -> None:
    # A kernel vendored as a git submodule that is not checked out: an empty folder.
    shutil.rmtree(tree / "kpdemo" / "addone" / "csrc")
    (tree / "kpdemo" / "addone" / "csrc").mkdir()
    result = _build(tree, build_env(ccache_dir))
    reason = result.record.kernels["addone"].reason
    assert reason is not None and reason.code == "sources-missing"
    assert result.record.kernels["scale"].built


def test_require_variable_turns_a_skip_into_an_error(tree: Path, ccache_dir: Path) -> None:
    _add_to_addone(tree / "kpdemo" / "kernels.toml", 'min-cuda = "99.0"')
    with pytest.raises(PlanError, match="addone"):
        _build(tree, build_env(ccache_dir, KPDEMO_KERNELS_REQUIRE="1"))


def test_all_stable_selection_carries_the_stable_version_tag(tree: Path, ccache_dir: Path) -> None:
    result = _build(tree, build_env(ccache_dir, KERNELPACK_KERNELS="scale"))
    assert result.record.version == "0.3.0+cu130stable2.10"


# --- failures ------------------------------------------------------------------------------


def test_compile_error_keeps_the_previous_library(tree: Path, ccache_dir: Path) -> None:
    library = _library(tree, "scale")
    before = library.read_bytes()
    source = tree / "kpdemo" / "scale" / "csrc" / "scale.cu"
    source.write_text(source.read_text() + "\nthis is not C++;\n")
    with pytest.raises(BuildError, match=r"kernel 'scale'.*failed to compile.*error"):
        _build(tree, build_env(ccache_dir))
    assert library.read_bytes() == before


def test_cli_compile_error_exits_1_showing_nvcc_message(
    tree: Path, ccache_dir: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    source = tree / "kpdemo" / "scale" / "csrc" / "scale.cu"
    source.write_text(source.read_text() + "\nint broken = undefined_name;\n")
    monkeypatch.setenv("CCACHE_DIR", str(ccache_dir))
    code = main(["build", str(tree), "--inplace"])
    err = capfd.readouterr().err
    assert code == 1
    assert 'identifier "undefined_name" is undefined' in err


def test_cli_inplace_noop_prints_nothing_to_do(
    tree: Path, ccache_dir: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CCACHE_DIR", str(ccache_dir))
    assert main(["build", str(tree), "--inplace"]) == 0
    assert "nothing to do" in capfd.readouterr().err


def test_cli_progress_names_each_step_then_lists_its_wall_time(
    tree: Path, ccache_dir: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CCACHE_DIR", str(ccache_dir))
    (tree / "kpdemo" / "scale" / "csrc" / "scale.cu").touch()
    assert main(["build", str(tree), "--inplace"]) == 0
    err = capfd.readouterr().err
    assert re.search(r"^\[\d/\d\] nvcc obj/scale/scale/csrc/scale\.cu\.o$", err, re.MULTILINE)
    assert "steps run (wall time)" in err
    assert re.search(r"nvcc .*obj/scale/scale/csrc/scale\.cu\.o .* \d+\.\d", err)


def test_cli_kernels_flag_builds_only_the_named_kernel(
    tree: Path, ccache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CCACHE_DIR", str(ccache_dir))
    assert main(["build", str(tree), "--inplace", "--kernels", "scale", "-j", "1"]) == 0
    record = BuildRecord.read(tree / "kpdemo" / "_kernelpack.json")
    addone = record.kernels["addone"]
    assert addone.reason is not None and addone.reason.code == "not-selected"
    assert record.kernels["scale"].built


def test_cli_require_flag_turns_a_skip_into_exit_2_naming_it(
    tree: Path, ccache_dir: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CCACHE_DIR", str(ccache_dir))
    _add_to_addone(tree / "kpdemo" / "kernels.toml", 'min-cuda = "99.0"')
    assert main(["build", str(tree), "--inplace", "--require"]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1
    assert "addone: cuda-too-old" in err


def test_cli_wheel_dir_writes_the_wheel_and_prints_its_path(
    tree: Path, ccache_dir: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CCACHE_DIR", str(ccache_dir))
    wheels = tree.parent / "wheels"
    assert main(["build", str(tree), "--wheel-dir", str(wheels)]) == 0
    (wheel,) = wheels.glob("*.whl")
    assert capfd.readouterr().out.splitlines() == [str(wheel)]
    assert wheel.name.startswith("kpdemo-0.3.0+cu130torch")


@pytest.mark.parametrize("argv", [["-j", "0"], ["--kernels", ","]], ids=["jobs", "kernels"])
def test_cli_bad_flag_is_one_line_exit_2(
    tree: Path, capfd: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert main(["build", str(tree), "--inplace", *argv]) == 2
    assert capfd.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("where", [[], ["--inplace"]], ids=["wheel", "inplace"])
def test_cli_bad_manifest_is_one_line_exit_2(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], where: list[str]
) -> None:
    root = tmp_path / "kpdemo"
    copy_package("kpdemo", root)
    manifest = root / "kpdemo" / "kernels.toml"
    manifest.write_text(manifest.read_text().replace('abi = "stable"', 'abi = "abi3"'))
    assert main(["build", str(root), *where]) == 2
    captured = capfd.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("kernelpack build: error: ")
    assert "kpdemo/kernels.toml: [scale].abi: " in captured.err


def _compiler_running(session: int) -> bool:
    """Whether a compiler process (nvcc's stages included) runs in `session`."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[3]) == session and comm in {"cicc", "cudafe++", "ptxas", "cc1plus"}:
            return True
    return False


def test_ctrl_c_leaves_nothing_half_written(tree: Path, ccache_dir: Path) -> None:
    library = _library(tree, "scale")
    before = library.read_bytes()
    header = tree / "kpdemo" / "scale" / "csrc" / "scale.h"
    # A value no other test compiles: a real compile, never a cache hit that ends before Ctrl-C.
    header.write_text(header.read_text().replace("256", str(random.randrange(10_000, 99_999))))
    proc = subprocess.Popen(
        with_default_signals(
            [Path(sys.executable).parent / "kernelpack", "build", tree, "--inplace"]
        ),
        env=build_env(ccache_dir),
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    # Event-driven: the Ctrl-C goes while a compiler runs, however loaded the machine is (the
    # 600 s bound only stops a hang), and a build that ended first is said so.
    deadline = time.monotonic() + 600
    while not _compiler_running(proc.pid):
        if proc.poll() is not None:
            pytest.fail(f"the build ended (exit {proc.returncode}) before a compiler was seen")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("no compiler started within 600 s")
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    # Generous: this test is about what is left behind, not how fast (test_interrupt.py).
    proc.communicate(timeout=600)
    allowed = {".lock", ".ninja_deps", ".ninja_log"}
    stray = [
        p.relative_to(tree)
        for p in tree.rglob("*")
        if p.is_file() and (p.suffix == ".tmp" or p.name.startswith(".")) and p.name not in allowed
    ]
    assert proc.returncode != 0
    assert library.read_bytes() == before
    assert stray == []
    # The lock died with its holder: the next build runs and finishes the job.
    assert _compiled(_build(tree, build_env(ccache_dir))) == {"obj/scale/scale/csrc/scale.cu.o"}


def test_depends_puts_the_dependency_headers_on_the_include_path(
    tree: Path, ccache_dir: Path
) -> None:
    headers = tree / "third_party" / "mydep"
    headers.mkdir(parents=True)
    (headers / "mydep.h").write_text("#pragma once\n#define MYDEP_FACTOR 3.0f\n")
    pyproject = tree / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text() + '\n[tool.kernelpack.deps]\nmydep = "third_party/mydep"\n'
    )
    manifest = tree / "kpdemo" / "kernels.toml"
    manifest.write_text(
        manifest.read_text().replace(
            'sources = ["csrc/scale.cu"]', 'sources = ["csrc/scale.cu"]\ndepends = ["mydep"]'
        )
    )
    source = tree / "kpdemo" / "scale" / "csrc" / "scale.cu"
    source.write_text(
        "#include <mydep.h>\n" + source.read_text().replace("* factor;", "* factor * MYDEP_FACTOR;")
    )
    result = _build(tree, build_env(ccache_dir))
    compiled = _compiled(result)
    assert "obj/scale/scale/csrc/scale.cu.o" in compiled
    assert {o.split("/")[1] for o in compiled} == {"scale"}
