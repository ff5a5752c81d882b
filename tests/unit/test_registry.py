"""`Registry`: reasons in docs/runtime.md's order, from hand-written records and injected probes."""

from __future__ import annotations

import dataclasses
import logging
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from registry_support import (
    TORCH_2141_CU130,
    built,
    make_package,
    skipped,
    toolchain,
    unique_name,
)

import kernelpack
from kernelpack_runtime import (
    DeviceFacts,
    KernelUnavailableError,
    Registry,
    TorchFacts,
    ops_namespace,
    set_default_probe,
)
from kernelpack_runtime.checks import CHECKS
from kernelpack_runtime.reason import RUNTIME_CODES, Reason
from kernelpack_runtime.record import BuildRecord, ReleaseRecord
from kernelpack_runtime.testing.fakes import fake_probe, no_device_probe

H200 = fake_probe("9.0", driver_cuda="13.0")


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("KERNELPACK_DISABLE", raising=False)
    return tmp_path


def registry(package: str, probe: object = H200, torch: TorchFacts = TORCH_2141_CU130) -> Registry:
    return Registry(package, probe=probe, read_torch=lambda: torch)  # type: ignore[arg-type]


def one_kernel(root: Path, **kernel: object) -> tuple[str, Registry]:
    package = unique_name()
    make_package(root, package, {"k": built("k", package, **kernel)})  # type: ignore[arg-type]
    return package, registry(package)


# -- the public shape ---------------------------------------------------------------------------


def test_api_unpacks_into_status_is_available_unavailable_reason_load(root: Path) -> None:
    package, reg = one_kernel(root)
    status, is_available, unavailable_reason, load = reg.api()
    assert status() == {"k": "available"}
    assert is_available("k") is True
    assert unavailable_reason("k") is None
    assert load("k").__name__ == f"{package}.k"


def test_package_init_wiring_exports_the_four_functions(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package)})
    set_default_probe(no_device_probe("fake: none"))
    try:
        module = __import__(package)
        assert module.status() == {"k": "no-device: no CUDA device visible: fake: none"}
        assert module.unavailable_reason("k").code == "no-device"
        assert module.is_available("k") is False
    finally:
        set_default_probe(None)


def test_status_shows_skipped_kernel_with_the_build_message(root: Path) -> None:
    package = unique_name()
    make_package(
        root,
        package,
        {
            "rmsnorm": built("rmsnorm", package),
            "flash_moe": skipped("arch-unsupported", "nvcc 12.4 cannot build sm_100a"),
        },
    )
    assert registry(package).status() == {
        "rmsnorm": "available",
        "flash_moe": "skipped: nvcc 12.4 cannot build sm_100a",
    }


def test_status_word_is_the_reason_code_for_run_time_reasons(root: Path) -> None:
    package, _ = one_kernel(root)
    status = registry(package, probe=no_device_probe("CUDA_VISIBLE_DEVICES is empty")).status()
    assert status == {"k": "no-device: no CUDA device visible: CUDA_VISIBLE_DEVICES is empty"}


def test_unknown_kernel_name_raises_value_error_listing_the_kernels(root: Path) -> None:
    _, reg = one_kernel(root)
    with pytest.raises(ValueError, match=r"has no kernel 'kk' \(its kernels: k\)"):
        reg.unavailable_reason("kk")


def test_load_raises_kernel_unavailable_error_with_kernel_and_reason(root: Path) -> None:
    package, _ = one_kernel(root)
    reg = registry(package, probe=no_device_probe())
    with pytest.raises(kernelpack.KernelUnavailableError) as info:
        reg.load("k")
    assert info.value.kernel == "k"
    assert info.value.reason.code == "no-device"


def test_load_is_idempotent(root: Path) -> None:
    _, reg = one_kernel(root)
    assert reg.load("k") is reg.load("k")


def test_checks_are_declared_in_the_documented_order() -> None:
    names = [check.__name__.strip("_").replace("_", "-") for check in CHECKS]
    assert names == list(RUNTIME_CODES[: len(names)])
    assert RUNTIME_CODES[len(names) :] == (
        "library-modified",
        "load-failed",
        "namespace-collision",
        "record-invalid",
    )


# -- not-built ----------------------------------------------------------------------------------


def test_not_built_carries_the_builds_reason_as_cause(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": skipped("nvcc-missing", "nvcc not found on PATH")})
    reason = registry(package).unavailable_reason("k")
    assert reason is not None
    assert reason.code == "not-built"
    assert reason.cause == Reason("nvcc-missing", "nvcc not found on PATH")
    assert "nvcc not found on PATH" in reason.message


def test_missing_build_record_makes_every_kernel_not_built(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package)}, record=False)
    reg = registry(package)
    reason = reg.unavailable_reason("k")
    assert reason is not None and reason.code == "not-built"
    assert "kernelpack build" in reason.message
    assert reg.status() == {}


def test_not_built_is_checked_before_disabled(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = unique_name()
    make_package(root, package, {"k": skipped("not-selected", "not in LLM_OPS_KERNELS")})
    monkeypatch.setenv("KERNELPACK_DISABLE", "k")
    assert registry(package).unavailable_reason("k").code == "not-built"  # type: ignore[union-attr]


def test_not_built_kernel_never_probes_the_device(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": skipped("nvcc-missing", "no nvcc")})

    def probe() -> DeviceFacts:
        raise AssertionError("probed")

    assert registry(package, probe=probe).unavailable_reason("k").code == "not-built"  # type: ignore[union-attr]


# -- disabled -----------------------------------------------------------------------------------


def test_disabled_by_package_prefix_variable(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package, _ = one_kernel(root)
    monkeypatch.setenv(f"{package.upper()}_DISABLE", "other, k")
    reason = registry(package).unavailable_reason("k")
    assert reason is not None and reason.code == "disabled"
    assert f"{package.upper()}_DISABLE=other, k" in reason.message


def test_disabled_by_kernelpack_disable(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package, _ = one_kernel(root)
    monkeypatch.setenv("KERNELPACK_DISABLE", "k")
    assert registry(package).unavailable_reason("k").code == "disabled"  # type: ignore[union-attr]


def test_disabled_is_checked_before_torch(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package, _ = one_kernel(root)
    monkeypatch.setenv("KERNELPACK_DISABLE", "k")
    cpu = TorchFacts("2.13.0+cpu", None)
    assert registry(package, torch=cpu).unavailable_reason("k").code == "disabled"  # type: ignore[union-attr]


# -- no-cuda-torch ------------------------------------------------------------------------------


def test_no_cuda_torch_for_a_cpu_only_torch(root: Path) -> None:
    package, _ = one_kernel(root)
    reason = registry(package, torch=TorchFacts("2.13.0+cpu", None)).unavailable_reason("k")
    assert reason is not None and reason.code == "no-cuda-torch"
    assert reason.message == (
        "torch 2.13.0+cpu is a CPU-only build; install a CUDA 13.0 build of torch"
    )


def test_no_cuda_torch_when_torch_is_not_installed(root: Path) -> None:
    package, _ = one_kernel(root)
    reason = registry(package, torch=TorchFacts(None, None)).unavailable_reason("k")
    assert reason is not None and reason.code == "no-cuda-torch"
    assert reason.message.startswith("torch is not installed")


def test_no_cuda_torch_is_decided_without_probing_the_device(root: Path) -> None:
    package, _ = one_kernel(root)

    def probe() -> DeviceFacts:
        raise AssertionError("probed")

    reg = registry(package, probe=probe, torch=TorchFacts("2.13.0+cpu", None))
    assert reg.unavailable_reason("k").code == "no-cuda-torch"  # type: ignore[union-attr]


# -- no-device ----------------------------------------------------------------------------------


def test_no_device_names_the_probes_problem(root: Path) -> None:
    package, _ = one_kernel(root)
    reg = registry(package, probe=no_device_probe("no NVIDIA driver: libnvidia-ml.so.1 not found"))
    reason = reg.unavailable_reason("k")
    assert reason == Reason(
        "no-device", "no CUDA device visible: no NVIDIA driver: libnvidia-ml.so.1 not found"
    )


def test_default_probe_is_used_when_none_is_injected(root: Path) -> None:
    package, _ = one_kernel(root)
    previous = set_default_probe(no_device_probe("fake: none"))
    try:
        reason = Registry(package, read_torch=lambda: TORCH_2141_CU130).unavailable_reason("k")
    finally:
        set_default_probe(previous)
    assert reason is not None and reason.message.endswith("fake: none")


# -- arch-mismatch ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("archs", "ptx", "device"),
    [
        (("9.0a",), False, "9.0"),
        (("8.0",), False, "8.6"),
        (("8.0",), True, "9.0"),
        (("10.0f",), False, "10.3"),
        (("8.0", "9.0a"), False, "9.0"),
    ],
)
def test_runs_on_a_device_the_archs_cover(
    root: Path, archs: tuple[str, ...], ptx: bool, device: str
) -> None:
    package, _ = one_kernel(root, archs=archs, ptx=ptx)
    assert registry(package, probe=fake_probe(device)).unavailable_reason("k") is None


@pytest.mark.parametrize(
    ("archs", "ptx", "device"),
    [
        (("9.0a",), False, "8.0"),
        (("9.0a",), True, "10.0"),
        (("8.0",), False, "9.0"),
        (("10.0f",), False, "12.0"),
        (("10.0a",), False, "9.0"),
    ],
)
def test_arch_mismatch_when_no_arch_runs_on_the_device(
    root: Path, archs: tuple[str, ...], ptx: bool, device: str
) -> None:
    package, _ = one_kernel(root, archs=archs, ptx=ptx)
    reason = registry(package, probe=fake_probe(device)).unavailable_reason("k")
    assert reason is not None and reason.code == "arch-mismatch"


def test_arch_mismatch_message_names_device_sm_and_built_archs(root: Path) -> None:
    package, _ = one_kernel(root, archs=("9.0a",))
    reason = registry(package, probe=fake_probe("8.0", name="NVIDIA A100")).unavailable_reason("k")
    assert reason is not None
    assert reason.message.startswith("device 0 (NVIDIA A100) is sm_80; k was built for sm_90a;")


def test_arch_mismatch_when_any_visible_device_cannot_run_it(root: Path) -> None:
    package, _ = one_kernel(root, archs=("9.0a",))
    reason = registry(package, probe=fake_probe("9.0", "8.0")).unavailable_reason("k")
    assert reason is not None and reason.message.startswith("device 1 ")


# -- torch-mismatch -----------------------------------------------------------------------------


def test_classic_abi_needs_the_exact_torch_it_was_built_for(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package)}, tool=toolchain(torch="2.13.0"))
    reason = registry(package).unavailable_reason("k")
    assert reason is not None and reason.code == "torch-mismatch"
    assert reason.message.startswith("built for torch 2.13.0, running 2.14.1;")


def test_stable_abi_runs_on_a_newer_torch(root: Path) -> None:
    package = unique_name()
    kernel = built("k", package, abi="stable", stable_target="2.10")
    make_package(root, package, {"k": kernel}, tool=toolchain(torch="2.12.0"))
    assert registry(package).unavailable_reason("k") is None


def test_stable_abi_refuses_a_torch_older_than_its_target(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package, abi="stable", stable_target="2.15")})
    reason = registry(package).unavailable_reason("k")
    assert reason is not None and reason.code == "torch-mismatch"
    assert reason.message.startswith("built for torch >= 2.15 (stable ABI), running 2.14.1;")


def test_unparsable_torch_version_in_the_record_leaves_the_decision_to_loading(
    root: Path,
) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package)}, tool=toolchain(torch="main-branch"))
    assert registry(package).unavailable_reason("k") is None


def _cuda_12_stable(root: Path, index_url: str | None = None) -> str:
    """A stable-ABI package built for CUDA 12.8 (`+cu128stable2.10`)."""
    package = unique_name()
    kernel = built("k", package, abi="stable")
    folder = make_package(
        root, package, {"k": kernel}, tool=toolchain(torch_cuda="12.8", cuda="12.8")
    )
    record = BuildRecord.read(folder / "_kernelpack.json")
    release = ReleaseRecord(index_url) if index_url else None
    dataclasses.replace(record, version="0.1.0+cu128stable2.10", release=release).write(
        folder / "_kernelpack.json"
    )
    return package


def test_torch_of_another_cuda_major_is_a_cuda_mismatch_naming_both(root: Path) -> None:
    reason = registry(_cuda_12_stable(root)).unavailable_reason("k")
    assert reason is not None and reason.code == "cuda-mismatch"
    assert reason.message.startswith(
        "k was built for CUDA 12.8, torch 2.14.1+cu130 has CUDA 13.0 (the library would not load)"
    )


def test_cuda_mismatch_names_the_exact_install_line_from_the_recorded_index(root: Path) -> None:
    package = _cuda_12_stable(root, "https://example.org/whl/{cuda}/simple")
    reason = registry(package).unavailable_reason("k")
    assert reason is not None and reason.code == "cuda-mismatch"
    assert reason.message.endswith(
        "install its cu130 build: pip install --force-reinstall --no-deps --extra-index-url "
        f"https://example.org/whl/cu130/simple {package}==0.1.0+cu130stable2.10"
    )


def test_cuda_mismatch_stops_load_before_the_library_is_opened(root: Path) -> None:
    package = _cuda_12_stable(root)
    with pytest.raises(KernelUnavailableError) as caught:
        registry(package).load("k")
    assert caught.value.reason.code == "cuda-mismatch"
    assert f"{package}.k._C" not in sys.modules


def test_arch_mismatch_comes_before_cuda_mismatch(root: Path) -> None:
    reason = registry(_cuda_12_stable(root), probe=fake_probe("8.0")).unavailable_reason("k")
    assert reason is not None and reason.code == "arch-mismatch"


# -- driver-too-old -----------------------------------------------------------------------------


def test_driver_too_old_when_driver_cuda_is_below_the_builds(root: Path) -> None:
    package, _ = one_kernel(root)
    reason = registry(package, probe=fake_probe("9.0", driver_cuda="12.8")).unavailable_reason("k")
    assert reason is not None and reason.code == "driver-too-old"
    assert reason.message.startswith("the NVIDIA driver supports CUDA 12.8, k was built with CUDA")


def test_newer_driver_is_fine(root: Path) -> None:
    package, _ = one_kernel(root)
    assert registry(package, probe=fake_probe("9.0", driver_cuda="13.1")).is_available("k")


# -- the order of the later checks -------------------------------------------------------------


def test_arch_mismatch_is_checked_before_torch(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package)}, tool=toolchain(torch="2.13.0"))
    reason = registry(package, probe=fake_probe("8.0")).unavailable_reason("k")
    assert reason is not None and reason.code == "arch-mismatch"


def test_torch_mismatch_is_checked_before_the_driver(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package)}, tool=toolchain(torch="2.13.0"))
    reason = registry(package, probe=fake_probe("9.0", driver_cuda="12.8")).unavailable_reason("k")
    assert reason is not None and reason.code == "torch-mismatch"


def test_driver_too_old_is_checked_before_loading(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package)}, c_module="raise OSError('boom')\n")
    reason = registry(package, probe=fake_probe("9.0", driver_cuda="12.8")).unavailable_reason("k")
    assert reason is not None and reason.code == "driver-too-old"
    assert f"{package}.k" not in sys.modules


# -- load-failed --------------------------------------------------------------------------------


def test_load_failed_reports_a_corrupted_so_with_the_dlopen_error(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package, library="k/_C.so")})
    (root / package / "k" / "_C.so").write_bytes(b"corrupt" * 1024)
    reason = registry(package).unavailable_reason("k")
    assert reason is not None and reason.code == "load-failed"
    assert "invalid ELF header" in reason.message
    assert reason.message.endswith(
        "built for torch 2.14.1 (CUDA 13.0), running torch 2.14.1+cu130 (CUDA 13.0)"
    )


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to link a .so")
def test_load_failed_demangles_the_missing_symbol(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package, library="k/_C.so")})
    source = root / "missing.cpp"
    source.write_text("namespace c10 { void gone(int); }\nvoid use() { c10::gone(1); }\n")
    subprocess.run(
        ["g++", "-shared", "-fPIC", str(source), "-o", str(root / package / "k" / "_C.so")],
        check=True,
    )
    reason = registry(package).unavailable_reason("k")
    assert reason is not None and reason.code == "load-failed"
    assert "undefined symbol: c10::gone(int)" in reason.message


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to link a .so")
def test_truncated_so_is_load_failed_instead_of_a_crash(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package, library="k/_C.so")})
    library = root / package / "k" / "_C.so"
    source = root / "whole.cpp"
    source.write_text("int table[100000] = {1};\nint get(int i) { return table[i]; }\n")
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    with library.open("r+b") as fh:
        fh.truncate(library.stat().st_size // 2)
    reason = registry(package).unavailable_reason("k")
    assert reason is not None and reason.code == "load-failed"
    assert reason.message.startswith(f"{library} is truncated (")


def test_load_failed_when_the_recorded_library_is_missing(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package, library="k/_C.abi3.so")})
    reason = registry(package).unavailable_reason("k")
    assert reason is not None and reason.code == "load-failed"
    assert "_C.abi3.so is missing" in reason.message


def test_load_failed_reports_an_error_raised_by_the_kernel_module(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package)}, c_module="raise OSError('boom')\n")
    reason = registry(package).unavailable_reason("k")
    assert reason is not None and reason.code == "load-failed"
    assert reason.message.startswith("OSError: boom;")


def test_a_failed_load_is_not_retried_by_another_registry(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package)}, c_module="raise OSError('boom')\n")
    first = registry(package).unavailable_reason("k")
    assert registry(package).unavailable_reason("k") == first


# -- namespace-collision ------------------------------------------------------------------------


@pytest.fixture
def foreign_library() -> Iterator[str]:
    torch = pytest.importorskip("torch")
    namespace = unique_name("kp_foreign_ns")
    library = torch.library.Library(namespace, "DEF")
    library.define("gemm(Tensor x) -> Tensor")
    yield namespace
    library._destroy()


def test_namespace_collision_when_another_library_owns_the_ops(
    root: Path, foreign_library: str
) -> None:
    package, _ = one_kernel(root, namespace=foreign_library)
    reason = registry(package).unavailable_reason("k")
    assert reason is not None and reason.code == "namespace-collision"
    assert reason.message.startswith(
        f"torch.ops.{foreign_library} already holds {foreign_library}::gemm from another library"
    )
    assert f"{package}.k" not in sys.modules


def test_namespace_collision_raised_while_registering_is_classified(
    root: Path, foreign_library: str
) -> None:
    package = unique_name()
    init = (
        "import torch\n"
        f"lib = torch.library.Library({foreign_library!r}, 'FRAGMENT')\n"
        "lib.define('gemm(Tensor x) -> Tensor')\n"
    )
    # The pre-check is for another namespace, so the registration itself raises.
    make_package(root, package, {"k": built("k", package)}, kernel_init=init)
    reason = registry(package).unavailable_reason("k")
    assert reason is not None and reason.code == "namespace-collision"


def test_a_taken_namespace_is_reported_before_a_library_that_would_not_load(
    root: Path, foreign_library: str
) -> None:
    package = unique_name()
    kernel = built("k", package, library="k/_C.so", namespace=foreign_library)
    make_package(root, package, {"k": kernel})
    (root / package / "k" / "_C.so").write_bytes(b"corrupt" * 1024)
    assert registry(package).unavailable_reason("k").code == "namespace-collision"  # type: ignore[union-attr]


def test_a_missing_library_is_load_failed_even_in_a_taken_namespace(
    root: Path, foreign_library: str
) -> None:
    package = unique_name()
    kernel = built("k", package, library="k/_C.abi3.so", namespace=foreign_library)
    make_package(root, package, {"k": kernel})
    assert registry(package).unavailable_reason("k").code == "load-failed"  # type: ignore[union-attr]


def test_kernels_sharing_a_namespace_in_one_package_do_not_collide(root: Path) -> None:
    pytest.importorskip("torch")
    package = unique_name()
    namespace = f"{package}_shared"
    init = (
        "import torch\n"
        "_lib = torch.library.Library({ns!r}, 'FRAGMENT')\n"
        "_lib.define('{op}(Tensor x) -> Tensor')\n"
    )
    make_package(
        root,
        package,
        {"a": built("a", package, namespace=namespace)},
        kernel_init=init.format(ns=namespace, op="a_op"),
    )
    (root / package / "b").mkdir()
    (root / package / "b" / "__init__.py").write_text(init.format(ns=namespace, op="b_op"))
    (root / package / "b" / "_C.py").write_text("")
    path = root / package / "_kernelpack.json"
    record = BuildRecord.read(path)
    kernels = {**record.kernels, "b": built("b", package, namespace=namespace)}
    dataclasses.replace(record, kernels=kernels).write(path)
    reg = registry(package)
    assert reg.is_available("a")
    assert reg.is_available("b")


# -- caching, threads, logging ------------------------------------------------------------------


def test_probe_runs_once_for_many_questions(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {n: built(n, package) for n in ("a", "b", "c")})
    calls = []

    def probe() -> DeviceFacts:
        calls.append(1)
        return H200()

    reg = registry(package, probe=probe)
    for _ in range(3):
        reg.status()
        reg.is_available("a")
    assert len(calls) == 1


def test_concurrent_callers_import_the_kernel_once(root: Path) -> None:
    package = unique_name()
    counter = "import builtins\nbuiltins.KP_IMPORTS = getattr(builtins, 'KP_IMPORTS', 0) + 1\n"
    make_package(root, package, {"k": built("k", package)}, c_module=counter)
    reg = registry(package)
    import builtins

    before = getattr(builtins, "KP_IMPORTS", 0)
    barrier = threading.Barrier(8)
    results: list[object] = []

    def ask() -> None:
        barrier.wait()
        results.append(reg.load("k"))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8 and all(r is results[0] for r in results)
    imports: int = builtins.KP_IMPORTS  # type: ignore[attr-defined]
    assert imports - before == 1


def test_kernel_module_may_read_the_record_from_another_thread_while_loading(root: Path) -> None:
    package = unique_name()
    init = (
        "import threading\n"
        "from kernelpack_runtime import registry_for\n"
        "seen = []\n"
        "reader = threading.Thread(target=lambda: seen.append(registry_for(__name__.rpartition"
        "('.')[0]).record))\n"
        "reader.start()\n"
        "reader.join(timeout=10)\n"
        "assert seen, 'the record was not readable while the kernel loaded'\n"
    )
    make_package(root, package, {"k": built("k", package)}, kernel_init=init)
    assert registry(package).unavailable_reason("k") is None


def test_log_status_logs_once(root: Path, caplog: pytest.LogCaptureFixture) -> None:
    package = unique_name()
    make_package(
        root,
        package,
        {"a": built("a", package), "b": skipped("nvcc-missing", "nvcc not found")},
    )
    reg = registry(package)
    with caplog.at_level(logging.INFO):
        reg.log_status()
        reg.log_status()
    assert [r.getMessage() for r in caplog.records] == [
        f"{package} kernels: 1/2 available (a: available; b: skipped: nvcc not found)"
    ]


# -- op namespaces ------------------------------------------------------------------------------


def test_ops_namespace_comes_from_the_build_record(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package, namespace="custom_ns")})
    assert ops_namespace(f"{package}.k") == "custom_ns"


def test_ops_namespace_without_a_record_is_an_import_error_naming_the_module(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package)}, record=False)
    with pytest.raises(ImportError, match=rf"^{package}\.k: "):
        ops_namespace(f"{package}.k")
