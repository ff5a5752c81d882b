"""MAX_JOBS, TORCH_CUDA_ARCH_LIST and KERNELPACK_ARCH=native, as the plan applies them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakes import make_manifest, make_spec, make_toolchain

from kernelpack.errors import SelectionError, UsageError
from kernelpack.plan import BuildPlan, Selection, make_plan
from kernelpack.toolchain.environment import BuildEnvironment, arch_filter, parse_arch_list
from kernelpack_runtime import set_default_probe
from kernelpack_runtime.testing.fakes import fake_probe, no_device_probe


def _plan(environ: dict[str, str], *specs: tuple[str, list[str]]) -> BuildPlan:
    manifest = make_manifest(*(make_spec(name, archs) for name, archs in specs))
    return make_plan(
        manifest,
        make_toolchain(),
        Selection.from_environment(BuildEnvironment.from_environ(environ, "DEMO")),
    )


@pytest.fixture
def h200() -> Iterator[None]:
    previous = set_default_probe(fake_probe("9.0"))
    yield
    set_default_probe(previous)


def test_arch_list_accepts_torch_spellings() -> None:
    assert parse_arch_list("9.0a;10.0") == {(9, 0), (10, 0)}
    assert parse_arch_list("8.0 8.6  9.0+PTX") == {(8, 0), (8, 6), (9, 0)}
    assert parse_arch_list(" 9.0 ; 10.0f ") == {(9, 0), (10, 0)}


def test_arch_list_entry_that_is_no_arch_is_a_one_line_error_quoting_it() -> None:
    with pytest.raises(UsageError, match=r'TORCH_CUDA_ARCH_LIST=9.0;Hoppr: "Hoppr" is not'):
        parse_arch_list("9.0;Hoppr")
    with pytest.raises(UsageError, match=r'"9.5" is not a CUDA arch'):
        parse_arch_list("9.5")


def test_arch_list_narrows_each_kernel_to_the_archs_that_run_on_the_listed_gpus() -> None:
    result = _plan({"TORCH_CUDA_ARCH_LIST": "9.0"}, ("rmsnorm", ["8.0", "9.0a", "10.0a"]))
    kernel = result.kernel("rmsnorm")
    assert [str(a) for a in kernel.archs] == ["9.0a"]
    assert kernel.gencode_flags == ("-gencode=arch=compute_90a,code=sm_90a",)


def test_arch_list_keeps_plain_sass_for_a_later_minor() -> None:
    kernel = _plan({"TORCH_CUDA_ARCH_LIST": "8.6"}, ("k", ["8.0", "9.0"])).kernel("k")
    assert [str(a) for a in kernel.archs] == ["8.0"]


def test_kernel_left_with_no_arch_is_not_selected_and_the_reason_names_the_variable() -> None:
    result = _plan({"TORCH_CUDA_ARCH_LIST": "9.0"}, ("rmsnorm", ["9.0a"]), ("moe", ["10.0a"]))
    assert result.kernel("rmsnorm").build
    skip = result.kernel("moe").skip
    assert skip is not None and skip.code == "not-selected"
    assert "10.0a" in skip.message and "TORCH_CUDA_ARCH_LIST=9.0" in skip.message


def test_a_kernel_narrowed_away_fails_a_required_build_naming_the_variable() -> None:
    # CI images of vLLM and flash-attention export TORCH_CUDA_ARCH_LIST: a release build
    # under require must not ship a wheel without the kernels it leaves out.
    environ = {"TORCH_CUDA_ARCH_LIST": "9.0", "KERNELPACK_REQUIRE": "1"}
    with pytest.raises(SelectionError) as caught:
        _plan(environ, ("rmsnorm", ["9.0a"]), ("moe", ["10.0a"]))
    message = str(caught.value)
    assert caught.value.exit_code == 1 and "\n" not in message
    assert message.startswith("TORCH_CUDA_ARCH_LIST=9.0 leaves out required kernel(s) moe")


def test_a_kernel_narrowed_away_is_no_error_without_require() -> None:
    result = _plan({"TORCH_CUDA_ARCH_LIST": "9.0"}, ("rmsnorm", ["9.0a"]), ("moe", ["10.0a"]))
    assert [k.name for k in result.to_build] == ["rmsnorm"]


def test_a_kernel_left_out_by_name_is_no_error_under_require() -> None:
    environ = {
        "TORCH_CUDA_ARCH_LIST": "9.0",
        "KERNELPACK_REQUIRE": "1",
        "KERNELPACK_KERNELS": "rmsnorm",
    }
    result = _plan(environ, ("rmsnorm", ["9.0a"]), ("moe", ["10.0a"]))
    assert [k.name for k in result.to_build] == ["rmsnorm"]


def test_native_builds_only_the_visible_gpus_arch(h200: None) -> None:
    result = _plan({"KERNELPACK_ARCH": "native"}, ("rmsnorm", ["8.0", "9.0a", "10.0a"]))
    assert [str(a) for a in result.kernel("rmsnorm").archs] == ["9.0a"]
    assert result.archs is not None
    assert result.archs.describe() == "KERNELPACK_ARCH=native (NVIDIA H200, sm_90)"


def test_native_without_a_gpu_is_a_one_line_error() -> None:
    probe = no_device_probe("no NVIDIA driver: libnvidia-ml.so.1 not found")
    with pytest.raises(UsageError) as caught:
        arch_filter(BuildEnvironment.from_environ({"KERNELPACK_ARCH": "native"}), probe)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("KERNELPACK_ARCH=native needs a visible GPU")
    assert "libnvidia-ml.so.1 not found" in message


def test_native_is_not_probed_unless_asked() -> None:
    def probe() -> None:
        raise AssertionError("probed")

    environment = BuildEnvironment.from_environ({"TORCH_CUDA_ARCH_LIST": "9.0"})
    assert arch_filter(environment, probe) is not None  # type: ignore[arg-type]


def test_arch_list_and_native_both_narrow(h200: None) -> None:
    environ = {"KERNELPACK_ARCH": "native", "TORCH_CUDA_ARCH_LIST": "8.0;9.0"}
    result = _plan(environ, ("a", ["8.0", "9.0a"]), ("b", ["8.0"]))
    assert [str(x) for x in result.kernel("a").archs] == ["9.0a"]
    assert result.kernel("b").skip is not None


def test_other_kernelpack_arch_values_are_bad_input() -> None:
    with pytest.raises(UsageError, match="KERNELPACK_ARCH=sm_90: expected native"):
        BuildEnvironment.from_environ({"KERNELPACK_ARCH": "sm_90"})


def test_max_jobs_is_a_positive_integer() -> None:
    assert BuildEnvironment.from_environ({"MAX_JOBS": "3"}).max_jobs == 3
    assert BuildEnvironment.from_environ({}).max_jobs is None
    with pytest.raises(UsageError, match="MAX_JOBS=zero is not a positive integer"):
        BuildEnvironment.from_environ({"MAX_JOBS": "zero"})
