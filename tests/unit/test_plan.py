"""The build plan: each kernel's build-or-skip decision, its flags, errors and the version tag.

`make_plan()` is pure, so these tests construct the manifest and the toolchain directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes import (
    NVCC_12_4,
    NVCC_12_8,
    NVCC_13_0,
    PACKAGE_DIR,
    make_manifest,
    make_spec,
    make_toolchain,
)
from packaging.version import Version

from kernelpack.errors import PlanError, UsageError
from kernelpack.plan import Selection, decide, make_plan, plan_project
from kernelpack.project.locate import Project, locate
from kernelpack.toolchain.environment import BuildEnvironment
from kernelpack_runtime.reason import Reason


def skip_of(kernel: str, **toolchain: Any) -> Reason | None:
    return (
        make_plan(make_manifest(make_spec(kernel)), make_toolchain(**toolchain)).kernel(kernel).skip
    )


# --- build decisions -------------------------------------------------------------------------


def test_builds_kernel_when_toolchain_fits() -> None:
    result = make_plan(make_manifest(make_spec("rmsnorm", ["9.0a"])), make_toolchain())
    assert result.kernel("rmsnorm").build


def test_emits_one_gencode_per_arch_without_ptx_by_default() -> None:
    result = make_plan(make_manifest(make_spec("rmsnorm", ["8.0", "9.0a"])), make_toolchain())
    assert result.kernel("rmsnorm").gencode_flags == (
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90a,code=sm_90a",
    )


def test_adds_ptx_of_highest_arch_only_when_ptx_is_set() -> None:
    spec = make_spec("rmsnorm", ["9.0", "8.0"], ptx=True)
    flags = make_plan(make_manifest(spec), make_toolchain()).kernel("rmsnorm").gencode_flags
    assert flags == (
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90,code=compute_90",
    )


def test_uses_platform_archs_from_arch_table() -> None:
    spec = make_spec("moe", {"x86_64": ["9.0a"], "aarch64": ["10.0a"]})
    kernel = make_plan(make_manifest(spec), make_toolchain(machine="aarch64")).kernel("moe")
    assert kernel.gencode_flags == ("-gencode=arch=compute_100a,code=sm_100a",)


# --- C++ standard ------------------------------------------------------------------------------


def test_classic_abi_defaults_to_cxx20_on_torch_2_14() -> None:
    assert make_plan(make_manifest(make_spec()), make_toolchain()).kernel("rmsnorm").cxx_std == 20


def test_classic_abi_defaults_to_cxx17_before_torch_2_14() -> None:
    toolchain = make_toolchain(torch_version=Version("2.13.0"))
    assert make_plan(make_manifest(make_spec()), toolchain).kernel("rmsnorm").cxx_std == 17


def test_stable_abi_defaults_to_cxx17() -> None:
    spec = make_spec(abi="stable")
    assert make_plan(make_manifest(spec), make_toolchain()).kernel("rmsnorm").cxx_std == 17


def test_explicit_cxx_std_is_kept() -> None:
    spec = make_spec(abi="stable", cxx_std=20)
    assert make_plan(make_manifest(spec), make_toolchain()).kernel("rmsnorm").cxx_std == 20


def test_cxx17_with_classic_abi_on_torch_2_14_is_a_plan_error_naming_file_kernel_key() -> None:
    spec = make_spec("rmsnorm", cxx_std=17)
    with pytest.raises(PlanError) as error:
        make_plan(make_manifest(spec), make_toolchain())
    message = str(error.value)
    assert message.startswith("/pkgs/demo/kernels.toml: [rmsnorm].cxx-std: C++17")
    assert "C++20" in message
    assert "\n" not in message


def test_cxx17_with_classic_abi_on_torch_2_13_builds() -> None:
    spec = make_spec("rmsnorm", cxx_std=17)
    toolchain = make_toolchain(torch_version=Version("2.13.0"))
    assert make_plan(make_manifest(spec), toolchain).kernel("rmsnorm").cxx_std == 17


def test_cxx17_error_is_not_raised_for_a_skipped_kernel() -> None:
    spec = make_spec("rmsnorm", cxx_std=17, platforms=("aarch64",))
    result = make_plan(make_manifest(spec), make_toolchain())
    assert result.kernel("rmsnorm").skip is not None


# --- skip reasons ------------------------------------------------------------------------------


def test_skips_not_selected_kernel() -> None:
    manifest = make_manifest(make_spec("rmsnorm"), make_spec("silu_mul"))
    result = make_plan(manifest, make_toolchain(), Selection(kernels=frozenset({"rmsnorm"})))
    skip = result.kernel("silu_mul").skip
    assert skip is not None and skip.code == "not-selected"
    assert result.kernel("rmsnorm").build


def test_skips_kernel_with_missing_sources() -> None:
    spec = make_spec(sources=(), missing_sources="csrc/ is empty: run git submodule update --init")
    skip = make_plan(make_manifest(spec), make_toolchain()).kernel("rmsnorm").skip
    assert skip == Reason("sources-missing", "csrc/ is empty: run git submodule update --init")


def test_skips_kernel_whose_platforms_exclude_this_machine() -> None:
    spec = make_spec(platforms=("aarch64",))
    skip = make_plan(make_manifest(spec), make_toolchain()).kernel("rmsnorm").skip
    assert skip is not None and skip.code == "platform-excluded"
    assert "x86_64" in skip.message


def test_skips_kernel_whose_arch_table_lacks_this_machine() -> None:
    spec = make_spec(arch={"aarch64": ["10.0a"]})
    skip = make_plan(make_manifest(spec), make_toolchain()).kernel("rmsnorm").skip
    assert skip is not None and skip.code == "platform-excluded"


def test_skips_every_kernel_when_nvcc_is_missing() -> None:
    manifest = make_manifest(make_spec("rmsnorm"), make_spec("silu_mul"))
    result = make_plan(manifest, make_toolchain(nvcc=None))
    assert [k.skip.code for k in result.kernels if k.skip] == ["nvcc-missing", "nvcc-missing"]


def test_skips_when_nvcc_cuda_major_differs_from_torch_cuda() -> None:
    skip = skip_of("rmsnorm", nvcc=NVCC_12_8)
    assert skip is not None and skip.code == "cuda-mismatch"
    assert "CUDA 12.8" in skip.message and "CUDA 13.0" in skip.message


def test_skips_classic_abi_kernel_against_cpu_only_torch() -> None:
    skip = skip_of("rmsnorm", torch_cuda=None)
    assert skip is not None and skip.code == "cuda-mismatch"
    assert "CPU-only" in skip.message


def test_builds_stable_abi_kernel_against_cpu_only_torch() -> None:
    spec = make_spec(abi="stable")
    result = make_plan(make_manifest(spec), make_toolchain(torch_cuda=None))
    assert result.kernel("rmsnorm").build


def test_skips_when_nvcc_is_older_than_min_cuda() -> None:
    spec = make_spec(min_cuda=Version("12.8"))
    toolchain = make_toolchain(nvcc=NVCC_12_4, torch_cuda=Version("12.4"))
    skip = make_plan(make_manifest(spec), toolchain).kernel("rmsnorm").skip
    assert skip is not None and skip.code == "cuda-too-old"
    assert "12.8" in skip.message and "12.4" in skip.message


def test_skips_kernel_when_nvcc_cannot_build_arch() -> None:
    spec = make_spec("flash_moe", ["9.0a", "10.0a"])
    toolchain = make_toolchain(nvcc=NVCC_12_4, torch_cuda=Version("12.4"))
    skip = make_plan(make_manifest(spec), toolchain).kernel("flash_moe").skip
    assert skip == Reason("arch-unsupported", "nvcc 12.4 cannot build sm_100a")


def test_skips_family_arch_when_nvcc_predates_family_codes() -> None:
    spec = make_spec("gemm", ["10.0f"])
    toolchain = make_toolchain(nvcc=NVCC_12_8, torch_cuda=Version("12.8"))
    skip = make_plan(make_manifest(spec), toolchain).kernel("gemm").skip
    assert skip == Reason("arch-unsupported", "nvcc 12.8 cannot build sm_100f")


def test_builds_sm100a_with_nvcc_13() -> None:
    spec = make_spec("flash_moe", ["10.0a"])
    assert make_plan(make_manifest(spec), make_toolchain(nvcc=NVCC_13_0)).kernel("flash_moe").build


def test_skips_when_nvcc_cannot_emit_requested_ptx() -> None:
    spec = make_spec("rmsnorm", ["9.0"], ptx=True)
    toolchain = make_toolchain(nvcc_targets=frozenset({"sm_90"}))
    skip = make_plan(make_manifest(spec), toolchain).kernel("rmsnorm").skip
    assert skip is not None and skip.code == "arch-unsupported"
    assert "compute_90" in skip.message


def test_skip_reasons_are_single_lines() -> None:
    manifest = make_manifest(
        make_spec("a", platforms=("aarch64",)),
        make_spec("b", ["10.0a"]),
        make_spec("c", min_cuda=Version("12.8")),
    )
    toolchain = make_toolchain(nvcc=NVCC_12_4, torch_cuda=Version("12.4"))
    for kernel in make_plan(manifest, toolchain).kernels:
        assert kernel.skip is not None and "\n" not in kernel.skip.message


# --- missing torch, require, selection ----------------------------------------------------------


def test_missing_torch_with_a_kernel_to_build_is_a_plan_error() -> None:
    toolchain = make_toolchain(torch_version=None, torch_cuda=None, torch_missing="no torch")
    with pytest.raises(PlanError, match="cannot build rmsnorm: no torch"):
        make_plan(make_manifest(make_spec()), toolchain)


def test_missing_torch_without_nvcc_only_skips() -> None:
    toolchain = make_toolchain(
        nvcc=None, torch_version=None, torch_cuda=None, torch_missing="no torch"
    )
    assert make_plan(make_manifest(make_spec()), toolchain).kernel("rmsnorm").skip is not None


def test_require_turns_skips_into_an_error_listing_every_skipped_kernel() -> None:
    manifest = make_manifest(
        make_spec("rmsnorm"),
        make_spec("flash_moe", ["10.0a"]),
        make_spec("arm_only", platforms=("aarch64",)),
    )
    toolchain = make_toolchain(nvcc=NVCC_12_4, torch_cuda=Version("12.4"))
    with pytest.raises(PlanError) as error:
        make_plan(manifest, toolchain, Selection(require=True))
    message = str(error.value)
    assert "flash_moe: arch-unsupported" in message
    assert "arm_only: platform-excluded" in message
    assert "rmsnorm" not in message


def test_require_passes_when_nothing_is_skipped() -> None:
    result = make_plan(make_manifest(make_spec()), make_toolchain(), Selection(require=True))
    assert not result.skipped


def test_require_ignores_kernels_left_out_of_the_selection() -> None:
    manifest = make_manifest(make_spec("rmsnorm"), make_spec("arm_only", platforms=("aarch64",)))
    selection = Selection(kernels=frozenset({"rmsnorm"}), require=True)
    assert [k.name for k in make_plan(manifest, make_toolchain(), selection).to_build] == [
        "rmsnorm"
    ]


def test_unknown_selected_kernel_is_a_usage_error_listing_known_kernels() -> None:
    manifest = make_manifest(make_spec("rmsnorm"), make_spec("silu_mul"))
    selection = Selection(kernels=frozenset({"rmsnrom"}), origin="DEMO_KERNELS")
    with pytest.raises(
        UsageError, match=r"DEMO_KERNELS names unknown kernel\(s\) rmsnrom; .*rmsnorm, silu_mul"
    ):
        make_plan(manifest, make_toolchain(), selection)


def _selection(environ: dict[str, str]) -> Selection:
    return Selection.from_environment(BuildEnvironment.from_environ(environ, "LLM_OPS"))


def test_selection_reads_package_prefixed_kernels() -> None:
    selection = _selection({"LLM_OPS_KERNELS": "rmsnorm, silu_mul"})
    assert selection.kernels == frozenset({"rmsnorm", "silu_mul"})
    assert selection.origin == "LLM_OPS_KERNELS"


def test_selection_reads_kernelpack_kernels() -> None:
    selection = _selection({"KERNELPACK_KERNELS": "rmsnorm"})
    assert selection.kernels == frozenset({"rmsnorm"})


def test_selection_prefers_package_variable_over_kernelpack_variable() -> None:
    environ = {"LLM_OPS_KERNELS": "rmsnorm", "KERNELPACK_KERNELS": "silu_mul"}
    assert _selection(environ).kernels == frozenset({"rmsnorm"})


def test_selection_defaults_to_every_kernel_without_require() -> None:
    assert _selection({}) == Selection()


@pytest.mark.parametrize("var", ["LLM_OPS_KERNELS_REQUIRE", "KERNELPACK_REQUIRE"])
def test_selection_reads_require(var: str) -> None:
    assert _selection({var: "1"}).require


def test_selection_rejects_non_boolean_require() -> None:
    with pytest.raises(UsageError, match="KERNELPACK_REQUIRE=maybe is not a boolean"):
        _selection({"KERNELPACK_REQUIRE": "maybe"})


# --- version tag -------------------------------------------------------------------------------


def test_version_tag_names_exact_torch_when_any_kernel_is_classic_abi() -> None:
    manifest = make_manifest(make_spec("a", abi="stable"), make_spec("b"))
    assert make_plan(manifest, make_toolchain()).version_tag() == "cu130torch2.14.1"


def test_version_tag_names_stable_target_when_all_kernels_are_stable() -> None:
    manifest = make_manifest(make_spec("a", abi="stable"))
    assert make_plan(manifest, make_toolchain()).version_tag() == "cu130stable2.10"


def test_version_tag_uses_highest_stable_target() -> None:
    manifest = make_manifest(
        make_spec("a", abi="stable"),
        make_spec("b", abi="stable", stable_target=Version("2.12")),
    )
    assert make_plan(manifest, make_toolchain()).version_tag() == "cu130stable2.12"


def test_version_tag_ignores_skipped_classic_kernels() -> None:
    manifest = make_manifest(make_spec("a", abi="stable"), make_spec("b", platforms=("aarch64",)))
    assert make_plan(manifest, make_toolchain()).version_tag() == "cu130stable2.10"


def test_version_tag_takes_cuda_from_nvcc() -> None:
    toolchain = make_toolchain(nvcc=NVCC_12_8, torch_cuda=Version("12.8"))
    assert make_plan(make_manifest(make_spec()), toolchain).version_tag() == "cu128torch2.14.1"


# --- decide() and problems() --------------------------------------------------------------------


def test_decide_returns_decisions_and_problems_without_raising() -> None:
    manifest = make_manifest(make_spec("rmsnorm", cxx_std=17), make_spec("b", ["10.0a"]))
    toolchain = make_toolchain(nvcc=NVCC_12_4, torch_cuda=Version("12.4"))
    result = decide(manifest, toolchain, Selection(require=True))
    assert result.kernel("rmsnorm").build
    assert [p.split(":")[0] for p in result.problems()] == [
        "required kernels would be skipped (1)",
        "/pkgs/demo/kernels.toml",
    ]


def test_decide_has_no_problems_for_a_buildable_plan() -> None:
    assert decide(make_manifest(make_spec()), make_toolchain()).problems() == ()


def test_cxx17_error_names_the_manifest_relative_to_the_working_folder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Path, "cwd", lambda: PACKAGE_DIR.parent)
    with pytest.raises(PlanError, match=r"^demo/kernels\.toml: \[rmsnorm\]\.cxx-std: "):
        make_plan(make_manifest(make_spec("rmsnorm", cxx_std=17)), make_toolchain())


# --- the one rule for "stable", and a project's complete plan ---------------------------------


def test_all_stable_is_decided_by_the_kernels_to_build() -> None:
    manifest = make_manifest(make_spec("a", abi="stable"), make_spec("b", platforms=("aarch64",)))
    result = make_plan(manifest, make_toolchain())
    assert result.all_stable
    assert result.stable_target == Version("2.10")
    assert str(result.abi_tag) == result.version_tag() == "cu130stable2.10"


def test_all_stable_falls_back_to_every_kernel_when_none_is_built() -> None:
    manifest = make_manifest(make_spec("a", abi="stable"), make_spec("b"))
    result = make_plan(manifest, make_toolchain(nvcc=None))
    assert not result.to_build
    assert not result.all_stable
    assert result.version_tag() == "cu130torch2.14.1"


def test_classic_plan_without_torch_has_no_abi_tag_and_is_tagged_by_cuda() -> None:
    result = decide(make_manifest(make_spec()), make_toolchain(torch_version=None))
    assert result.abi_tag is None
    assert result.version_tag() == "cu130"


def _project(tmp_path: Path, *, requires_python: str, depends: str = "") -> Project:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "demo"\nversion = "0.4.0"\n'
        f'requires-python = "{requires_python}"\n'
        '[tool.kernelpack]\nmanifest = "demo/kernels.toml"\n'
        '[tool.kernelpack.deps]\nmylib = "third_party/mylib"\n'
    )
    (tmp_path / "demo" / "k" / "csrc").mkdir(parents=True)
    (tmp_path / "demo" / "k" / "csrc" / "k.cu").write_text("")
    (tmp_path / "demo" / "kernels.toml").write_text(
        f'[k]\nsources = ["csrc/k.cu"]\narch = ["9.0a"]\nabi = "stable"\n{depends}'
    )
    return locate(tmp_path)


def test_plan_project_carries_version_python_floor_and_dependency_folders(
    tmp_path: Path,
) -> None:
    (tmp_path / "third_party" / "mylib").mkdir(parents=True)
    project = _project(tmp_path, requires_python=">=3.12", depends='depends = ["mylib"]\n')
    result = plan_project(project, {}, tools=make_toolchain())
    assert result.version == "0.4.0+cu130stable2.10"
    assert result.python_floor == (3, 12) == project.python_floor
    assert result.kernel("k").dep_include_dirs == ((tmp_path / "third_party" / "mylib").resolve(),)
    assert result.problems() == ()


def test_missing_header_dependency_is_a_plan_problem_naming_the_kernel(tmp_path: Path) -> None:
    project = _project(tmp_path, requires_python=">=3.10", depends='depends = ["mylib"]\n')
    report = plan_project(project, {}, strict=False, tools=make_toolchain())
    (problem,) = report.problems()
    assert problem.startswith("k: ") and "third_party/mylib" in problem
    with pytest.raises(PlanError, match=r"^k: .*third_party/mylib"):
        plan_project(project, {}, tools=make_toolchain())


def test_plan_project_reads_the_selection_from_the_package_prefix(tmp_path: Path) -> None:
    project = _project(tmp_path, requires_python=">=3.10")
    result = plan_project(project, {"DEMO_KERNELS": "k"}, tools=make_toolchain())
    assert [k.name for k in result.to_build] == ["k"]
    with pytest.raises(UsageError, match="DEMO_KERNELS names unknown kernel"):
        plan_project(project, {"DEMO_KERNELS": "nope"}, tools=make_toolchain())
