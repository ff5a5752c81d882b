"""`build.toml` (kernel-builder edition 5) read as a kernelpack manifest: the real example
projects in tests/foreign, and one-line errors for what kernel-builder would reject."""

from __future__ import annotations

import shutil
import sys
import textwrap
import types
from pathlib import Path

import pytest
from fakes.projects import write_tree
from fakes.values import make_toolchain
from packaging.version import Version

from kernelpack.errors import ManifestError
from kernelpack.plan import Selection, decide
from kernelpack.project import buildtoml
from kernelpack.project.buildtoml.capabilities import default_capabilities
from kernelpack.project.locate import locate
from kernelpack.project.manifest import ANY_PLATFORM
from kernelpack_runtime.arch import Arch

# Every test runs in its tmp_path.
pytestmark = pytest.mark.usefixtures("in_tmp")

FOREIGN = Path(__file__).resolve().parents[1] / "foreign"
EXAMPLES = FOREIGN / "hf-kernels" / "examples"

MINIMAL = """\
[general]
name = "my-kernel"
version = 2
edition = 5
license = "Apache-2.0"
backends = ["cuda"]

[torch]
src = ["torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h"]

[kernel.mine]
backend = "cuda"
depends = ["torch"]
src = ["mine_cuda/mine.cu"]
"""


def make_project(root: Path, text: str = MINIMAL) -> Path:
    """A kernel-builder project with the files MINIMAL names; returns build.toml."""
    names = ("torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h", "mine_cuda/mine.cu")
    files = {**dict.fromkeys(names, "// x\n"), "torch-ext/my_kernel/__init__.py": ""}
    write_tree(root, {**files, "build.toml": textwrap.dedent(text)})
    return root / "build.toml"


# --- the real examples --------------------------------------------------------------------


def test_relu_is_one_library_holding_the_cuda_kernel_and_the_binding() -> None:
    manifest = locate(EXAMPLES / "relu").load_manifest()
    library = manifest.kernel(buildtoml.KERNEL)
    root = EXAMPLES / "relu"
    assert manifest.package == "relu"
    assert manifest.package_dir == root / "torch-ext" / "relu"
    assert set(library.sources) == {
        root / "relu_cuda" / "relu.cu",
        root / "torch-ext" / "torch_binding.cpp",
        root / "torch-ext" / "torch_binding.h",
    }
    assert library.folder == manifest.package_dir  # the library sits in the package itself
    assert library.abi == "torch"
    assert library.defines["CUDA_KERNEL"] == "1"


def test_library_module_namespace_and_ops_py_agree() -> None:
    manifest = locate(EXAMPLES / "relu").load_manifest()
    library = manifest.kernel(buildtoml.KERNEL)
    assert library.module == library.namespace == buildtoml.namespace("relu", 1)
    assert library.namespace.startswith("_relu_")
    cpu = manifest.kernel(buildtoml.CPU_KERNEL)
    assert cpu.module == cpu.namespace == f"{library.namespace}_cpu"
    ops_py = manifest.generated["_ops.py"]
    # the build's libraries, CUDA first: the first usable one gives `ops` its namespace
    assert f"load_first(__package__, {(buildtoml.KERNEL, buildtoml.CPU_KERNEL)!r})" in ops_py
    assert "ops = getattr(torch.ops, NAMESPACE)\n" in ops_py


def test_cpu_kernels_build_into_one_cpu_library_with_the_binding() -> None:
    root = EXAMPLES / "relu"
    manifest = locate(root).load_manifest()
    cpu = manifest.kernel(buildtoml.CPU_KERNEL)
    assert cpu.backend == "cpu" and cpu.skip is None
    assert set(cpu.sources) == {
        root / "relu_cpu" / "relu_cpu.cpp",
        root / "torch-ext" / "torch_binding.cpp",
        root / "torch-ext" / "torch_binding.h",
    }
    assert cpu.defines == {"CPU_KERNEL": "1"}
    assert not cpu.nvcc_flags and cpu.arch == {ANY_PLATFORM: ()}


def test_generated_ops_py_gives_ops_and_the_namespace_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = types.ModuleType("torch")
    torch.ops = types.SimpleNamespace(_relu_1234567="the-namespace")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    namespace: dict[str, object] = {}
    exec(compile(buildtoml.ops_py("_relu_1234567", compiled=False), "_ops.py", "exec"), namespace)
    prefix = namespace["add_op_namespace_prefix"]
    assert namespace["ops"] == "the-namespace"
    assert callable(prefix) and prefix("relu_fwd") == "_relu_1234567::relu_fwd"


def test_namespace_is_stable_and_unique_per_name_and_major_version() -> None:
    assert buildtoml.namespace("relu", 1) == buildtoml.namespace("relu", 1)
    assert buildtoml.namespace("relu", 1) != buildtoml.namespace("relu", 2)
    assert buildtoml.namespace("relu", 1) != buildtoml.namespace("gelu", 1)


def test_kernels_of_other_backends_are_skipped_with_a_reason() -> None:
    manifest = locate(EXAMPLES / "relu").load_manifest()
    skipped = {spec.name: spec.skip for spec in manifest.kernels if spec.skip is not None}
    assert set(skipped) == {"relu_xpu", "relu_metal", "relu_rocm"}
    for name, reason in skipped.items():
        assert reason is not None
        assert reason.code == "platform-excluded"
        assert f'backend = "{name.removeprefix("relu_")}"' in reason.message


def test_registration_h_is_generated_only_when_the_project_ships_none() -> None:
    relu = locate(EXAMPLES / "relu").load_manifest().kernel(buildtoml.KERNEL)
    gemm = locate(EXAMPLES / "cutlass-gemm").load_manifest().kernel(buildtoml.KERNEL)
    header = relu.generated_headers["registration.h"]
    for macro in (
        "TORCH_LIBRARY_EXPAND",
        "TORCH_LIBRARY_IMPL_EXPAND",
        "STABLE_TORCH_LIBRARY_EXPAND",
        "STABLE_TORCH_LIBRARY_IMPL_EXPAND",
        "REGISTER_EXTENSION",
    ):
        assert f"#define {macro}(" in header
    assert gemm.generated_headers == {}  # cutlass-gemm ships torch-ext/registration.h


def test_stable_abi_table_makes_the_library_stable_for_its_cuda_target() -> None:
    library = locate(EXAMPLES / "relu-torch-stable-abi").load_manifest().kernel(buildtoml.KERNEL)
    assert library.abi == "stable"
    assert str(library.stable_target) == "2.11"


def test_a_cutlass_dependency_keeps_its_exact_version() -> None:
    library = locate(EXAMPLES / "cutlass-gemm").load_manifest().kernel(buildtoml.KERNEL)
    assert library.depends == ("cutlass_3_6",)


def test_without_capabilities_a_kernel_wishes_for_kernel_builders_default_set() -> None:
    library = locate(EXAMPLES / "relu").load_manifest().kernel(buildtoml.KERNEL)
    (part,) = library.parts
    defaults = default_capabilities(None)  # kernel-builder's set for CUDA 13
    assert [str(a) for a in part.arch] == [c.removesuffix("+PTX") for c in defaults]
    assert [str(a) for a in part.ptx] == ["12.1"]  # "12.1+PTX"
    assert library.arch == {ANY_PLATFORM: part.arch} and library.loose_archs


def test_the_plan_keeps_the_capabilities_this_nvcc_can_build() -> None:
    manifest = locate(EXAMPLES / "relu").load_manifest()
    targets = frozenset({"sm_80", "sm_90", "sm_121", "compute_121"})
    kernel = decide(manifest, make_toolchain(nvcc_targets=targets)).kernel(buildtoml.KERNEL)
    assert kernel.build
    assert [str(a) for a in kernel.archs] == ["8.0", "9.0", "12.1"]
    (part,) = kernel.parts
    assert part.gencode_flags[-1] == "-gencode=arch=compute_121,code=compute_121"


def test_listed_capabilities_are_built(tmp_path: Path) -> None:
    text = MINIMAL + 'cuda-capabilities = ["9.0a", "10.0"]\n'
    library = buildtoml.load(make_project(tmp_path, text)).kernel(buildtoml.KERNEL)
    assert library.arch == {ANY_PLATFORM: (Arch.parse("9.0a"), Arch.parse("10.0"))}
    assert not library.ptx


@pytest.mark.parametrize(
    ("listed", "built"),
    [
        (["7.5", "8.0", "8.6", "9.0a"], ["7.5", "8.0", "8.6", "9.0a"]),
        (["8.0", "11.8"], ["8.0"]),  # no GPU is 11.8: kernel-builder's intersection drops it
        (["8.0", "9.0", "9.0a"], ["8.0", "9.0a"]),  # 9.0a takes 9.0's place
        (["8.0+PTX"], ["8.0"]),
    ],
)
def test_capabilities_are_kernel_builders_loose_intersection(
    tmp_path: Path, listed: list[str], built: list[str]
) -> None:
    text = MINIMAL + f"cuda-capabilities = {listed!r}\n".replace("'", '"')
    (part,) = buildtoml.load(make_project(tmp_path, text)).kernel(buildtoml.KERNEL).parts
    assert [str(a) for a in part.arch] == built
    assert bool(part.ptx) == any(c.endswith("+PTX") for c in listed)


def test_capabilities_matching_nothing_are_one_line(tmp_path: Path) -> None:
    text = MINIMAL + 'cuda-capabilities = ["11.8"]\n'
    assert "[kernel.mine].cuda-capabilities: none of ['11.8']" in _error(tmp_path, text)


def test_tool_kernelpack_arch_is_the_default_for_kernels_without_capabilities(
    tmp_path: Path,
) -> None:
    make_project(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.kernelpack]\narch = "9.0"\n')
    library = locate(tmp_path / "build.toml").load_manifest().kernel(buildtoml.KERNEL)
    assert library.arch == {ANY_PLATFORM: (Arch.parse("9.0"),)}


def test_cuda_minver_and_maxver_bound_the_toolkit(tmp_path: Path) -> None:
    text = MINIMAL.replace("[torch]", '[general.cuda]\nmaxver = "12.9"\n\n[torch]')
    text += 'cuda-minver = "12.8"\n'
    manifest = buildtoml.load(make_project(tmp_path, text))
    library = manifest.kernel(buildtoml.KERNEL)
    assert str(library.parts[0].min_cuda) == "12.8"
    assert str(library.max_cuda) == "12.9"
    skip = decide(manifest, make_toolchain()).kernel(buildtoml.KERNEL).skip
    assert skip is not None and skip.code == "cuda-mismatch" and "12.9" in skip.message


@pytest.mark.parametrize(
    ("bounds", "torch", "skipped"),
    [
        ('minver = "2.15"', "2.14.1", "needs torch >= 2.15 ([torch].minver)"),
        ('maxver = "2.12"', "2.14.1", "needs torch <= 2.12 ([torch].maxver)"),
        ('minver = "2.12"\nmaxver = "2.14"', "2.14.1", None),
        ('maxver = "2.12"', "2.12.0", None),
    ],
)
def test_torch_bounds_skip_the_libraries_outside_them(
    tmp_path: Path, bounds: str, torch: str, skipped: str | None
) -> None:
    text = MINIMAL.replace("[torch]\n", f"[torch]\n{bounds}\n")
    manifest = buildtoml.load(make_project(tmp_path, text))
    toolchain = make_toolchain(torch_version=Version(torch))
    kernel = decide(manifest, toolchain).kernel(buildtoml.KERNEL)
    if skipped is None:
        assert kernel.skip is None or kernel.skip.code != "platform-excluded"
    else:
        assert kernel.skip is not None and kernel.skip.code == "platform-excluded"
        assert skipped in kernel.skip.message and torch in kernel.skip.message


def test_a_torch_outside_the_bounds_is_an_error_under_require(tmp_path: Path) -> None:
    text = MINIMAL.replace("[torch]\n", '[torch]\nmaxver = "2.12"\n')
    manifest = buildtoml.load(make_project(tmp_path, text))
    plan = decide(manifest, make_toolchain(), Selection(require=True))
    problems = plan.problems()
    assert len(problems) == 1 and "([torch].maxver)" in problems[0]


@pytest.mark.parametrize(("torch", "refused"), [("2.14.1", True), ("2.11.0", False)])
def test_a_kernels_own_std_flag_below_atens_is_a_plan_error(
    tmp_path: Path, torch: str, refused: bool
) -> None:
    # sage-attention's cuda-flags say -std=c++17 (the last -std wins): against torch 2.14's
    # ATen headers the compile would stop at their '#error C++20 or later'.
    text = MINIMAL + 'cuda-flags = ["-O3", "-std=c++17"]\n'
    manifest = buildtoml.load(make_project(tmp_path, text))
    problems = decide(manifest, make_toolchain(torch_version=Version(torch))).problems()
    if refused:
        (problem,) = problems
        assert "[kernel.mine].cuda-flags: -std=c++17 cannot compile torch 2.14.1" in problem
        assert "C++20" in problem
    else:
        assert problems == ()


def test_maxver_below_minver_is_an_error(tmp_path: Path) -> None:
    text = MINIMAL.replace("[torch]\n", '[torch]\nminver = "2.12"\nmaxver = "2.11"\n')
    assert "[torch].maxver" in _error(tmp_path, text)


def test_the_hub_variant_never_claims_an_excluded_torch(tmp_path: Path) -> None:
    from kernelpack.release import hub

    stable = MINIMAL.replace("[torch]\n", '[torch]\nstable-abi = "2.11"\n')
    for extra, expected in (
        ("", "torch-stable-abi211-cu130-x86_64-linux"),
        # the stable name would claim every torch >= 2.11, the project stops at 2.14
        ('maxver = "2.14"\n', "torch214-cxx11-cu130-x86_64-linux"),
    ):
        text = stable.replace("[torch]\n", f"[torch]\n{extra}")
        manifest = buildtoml.load(make_project(tmp_path, text))
        toolchain = make_toolchain()
        plan = decide(manifest, toolchain)
        kernel = plan.kernel(buildtoml.KERNEL)
        assert hub._variant_name(plan, (kernel,), "cuda") == expected


def test_noarch_project_builds_nothing_and_generates_ops_py(tmp_path: Path) -> None:
    text = MINIMAL.split("[torch]")[0] + "[torch-noarch]\n"
    manifest = buildtoml.load(make_project(tmp_path, text))
    assert manifest.kernels == ()
    assert "from . import" not in manifest.generated["_ops.py"]


def test_project_facts_come_from_general(tmp_path: Path) -> None:
    project = locate(make_project(tmp_path))
    assert (project.dist_name, project.version, project.package) == ("my-kernel", "2", "my_kernel")
    assert project.metadata["license"] == "Apache-2.0"
    assert project.found is None  # PATH named the build.toml


@pytest.mark.parametrize(
    ("license", "expression"),
    [("other", "LicenseRef-other"), ("Apache 2.0", "LicenseRef-Apache-2.0"), ("mit", "MIT")],
)
def test_a_license_spdx_does_not_list_is_a_license_ref(
    tmp_path: Path, license: str, expression: str
) -> None:
    # kernel-builder takes any text ("other", the Hub's value for a license SPDX lacks);
    # the wheel's License-Expression must be valid, so such text becomes a LicenseRef.
    from kernelpack.backend.metadata import core_metadata

    project = locate(make_project(tmp_path, MINIMAL.replace('"Apache-2.0"', f'"{license}"')))
    assert project.metadata["license"] == expression
    assert str(core_metadata(project).standard.license) == expression


def test_csrc_is_an_include_folder_of_the_library_and_of_each_kernel(tmp_path: Path) -> None:
    make_project(tmp_path)
    (tmp_path / "csrc").mkdir()
    (kernel,) = buildtoml.load(tmp_path / "build.toml").kernels
    assert tmp_path / "csrc" in kernel.include_dirs
    assert all(tmp_path / "csrc" in part.include_dirs for part in kernel.parts)


# --- errors ---------------------------------------------------------------------------------


def _error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ManifestError) as excinfo:
        buildtoml.load(make_project(tmp_path, text))
    message = str(excinfo.value)
    assert "\n" not in message and message.startswith("build.toml: ")
    return message


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (
            ("[kernel.mine]", "[kernel.mine]\ncuda-flag = []"),
            '[kernel.mine].cuda-flag: unknown key; did you mean "cuda-flags"?',
        ),
        (("[torch]", "[torch]\nsrcs = []"), "[torch].srcs: unknown key"),
        (
            ("edition = 5", "edition = 4"),
            "[general].edition: got an integer (4); expected edition = 5",
        ),
        (
            ('backend = "cuda"', 'backend = "cudaa"'),
            '[kernel.mine].backend: unknown backend "cudaa"',
        ),
        (('depends = ["torch"]', 'depends = ["cutlass_9_9"]'), 'unknown dependency "cutlass_9_9"'),
        (
            ('src = ["mine_cuda/mine.cu"]', 'src = ["mine_cuda/gone.cu"]'),
            '"mine_cuda/gone.cu" does not exist',
        ),
        (
            ('src = ["mine_cuda/mine.cu"]', 'src = ["../elsewhere.cu"]'),
            "points outside the project",
        ),
        (('backends = ["cuda"]', 'backends = ["cuda", "vulkan"]'), 'unknown backend "vulkan"'),
        (('name = "my-kernel"', 'name = "other"'), "torch-ext/other does not exist"),
    ],
)
def test_bad_build_toml_is_one_line_naming_table_and_key(
    tmp_path: Path, edit: tuple[str, str], fragment: str
) -> None:
    assert fragment in _error(tmp_path, MINIMAL.replace(*edit))


def test_each_kernel_keeps_its_own_capabilities_flags_and_cuda_floor(tmp_path: Path) -> None:
    text = MINIMAL + 'cuda-capabilities = ["9.0a"]\ncuda-flags = ["-DMINE"]\n'
    text += '\n[kernel.other]\nbackend = "cuda"\ndepends = ["torch"]\nsrc = ["other/o.cu"]\n'
    text += 'cuda-capabilities = ["8.0"]\ncxx-flags = ["-DOTHER"]\ncuda-minver = "13.1"\n'
    path = make_project(tmp_path, text)
    write_tree(tmp_path, {"other/o.cu": "// o\n"})
    manifest = buildtoml.load(path)
    library = manifest.kernel(buildtoml.KERNEL)
    mine, other = library.parts
    assert (mine.name, [str(a) for a in mine.arch], mine.nvcc_flags) == (
        "mine",
        ["9.0a"],
        ("-DMINE",),
    )
    assert (other.name, [str(a) for a in other.arch], other.cxx_flags) == (
        "other",
        ["8.0"],
        ("-DOTHER",),
    )
    assert library.arch == {ANY_PLATFORM: (Arch.parse("8.0"), Arch.parse("9.0a"))}
    # nvcc 13.0 is below other's cuda-minver: kernel-builder leaves it out of the library
    targets = frozenset({"sm_80", "sm_90a"})
    kernel = decide(manifest, make_toolchain(nvcc_targets=targets)).kernel(buildtoml.KERNEL)
    assert [p.name for p in kernel.parts] == ["mine"]
    assert kernel.left_out == ("other: needs CUDA >= 13.1, nvcc is CUDA 13.0",)
    assert [str(a) for a in kernel.archs] == ["9.0a"]


def test_missing_sources_skip_the_library_when_allowed(tmp_path: Path) -> None:
    path = make_project(tmp_path)
    (tmp_path / "mine_cuda" / "mine.cu").unlink()
    library = buildtoml.load(path, allow_missing_sources=True).kernel(buildtoml.KERNEL)
    assert library.missing_sources is not None and "mine.cu" in library.missing_sources


def test_an_unchanged_copy_still_reads_the_same(tmp_path: Path) -> None:
    copy = tmp_path / "relu"
    shutil.copytree(EXAMPLES / "relu", copy)
    original = locate(EXAMPLES / "relu").load_manifest().kernel(buildtoml.KERNEL)
    copied = locate(copy).load_manifest().kernel(buildtoml.KERNEL)
    assert (
        copied.namespace == original.namespace
    )  # the namespace does not depend on where the tree is


def test_require_does_not_fail_on_kernels_of_other_backends() -> None:
    manifest = locate(EXAMPLES / "relu").load_manifest()
    toolchain = make_toolchain(nvcc_targets=frozenset({"sm_90", "compute_90"}))
    assert decide(manifest, toolchain, Selection(require=True)).problems() == ()
    no_nvcc = decide(manifest, make_toolchain(nvcc=None), Selection(require=True)).problems()
    assert len(no_nvcc) == 1 and no_nvcc[0].startswith(
        "required kernels would be skipped (1): _ops"
    )
