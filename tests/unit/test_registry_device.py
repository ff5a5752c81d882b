"""The NVML device probe: `CUDA_VISIBLE_DEVICES` rules, and the ctypes calls against a stand-in
`libnvidia-ml.so.1` (this machine has no NVIDIA driver)."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelpack_runtime import device
from kernelpack_runtime.device import DeviceFacts, _Nvml, _visible_handles, nvml_probe


class FakeNvml(_Nvml):
    """Four GPUs with fixed UUIDs; handles are their indices."""

    UUIDS = ("GPU-aaaa-1", "GPU-aaab-2", "GPU-bbbb-3", "GPU-cccc-4")

    def __init__(self) -> None:
        pass

    def count(self) -> int:
        return len(self.UUIDS)

    def handle(self, index: int) -> ctypes.c_void_p:
        return ctypes.c_void_p(index)

    def uuid(self, handle: ctypes.c_void_p) -> str:
        return self.UUIDS[handle.value or 0]

    def handle_by_uuid(self, uuid: str) -> ctypes.c_void_p:
        if uuid == "MIG-1111":
            return ctypes.c_void_p(102)  # a MIG instance of GPU 2
        raise OSError("nvmlDeviceGetHandleByUUID: Not Found")

    def mig_parent(self, handle: ctypes.c_void_p) -> ctypes.c_void_p:
        return ctypes.c_void_p((handle.value or 0) - 100)


def visible(value: str | None) -> list[int]:
    return [index for index, _ in _visible_handles(FakeNvml(), value)]


def test_unset_cuda_visible_devices_shows_every_gpu() -> None:
    assert visible(None) == [0, 1, 2, 3]


def test_indices_are_taken_in_the_order_given() -> None:
    assert visible("2,0") == [2, 0]


def test_an_invalid_index_ends_the_list() -> None:
    assert visible("1,9,0") == [1]


def test_minus_one_hides_every_gpu() -> None:
    assert visible("-1") == []


def test_a_unique_uuid_prefix_selects_that_gpu() -> None:
    assert visible("GPU-bbbb") == [2]


def test_an_ambiguous_uuid_prefix_ends_the_list() -> None:
    assert visible("3,GPU-aaa") == [3]


def test_a_mig_uuid_is_resolved_through_nvml() -> None:
    assert visible("MIG-1111") == [-1]


def test_a_mig_device_is_asked_about_through_its_parent_gpu() -> None:
    ((_, handle),) = _visible_handles(FakeNvml(), "MIG-1111")
    assert handle.value == 2


def test_empty_cuda_visible_devices_means_no_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert nvml_probe() == DeviceFacts(problem="CUDA_VISIBLE_DEVICES is empty")


def test_set_default_probe_returns_the_previous_one() -> None:
    mine = DeviceFacts(problem="mine")
    previous = device.set_default_probe(lambda: mine)
    try:
        assert device.default_probe() is mine
    finally:
        device.set_default_probe(previous)
    assert device.default_probe() is not mine


PROBE = (
    "import json; from kernelpack_runtime.device import nvml_probe; f = nvml_probe(); "
    "print(json.dumps([[d.index, d.name, list(d.capability)] for d in f.devices]"
    " + [f.driver_cuda and list(f.driver_cuda), f.problem]))"
)


def run_probe(folder: Path, **env: str) -> list[object]:
    environ = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    environ.update({"LD_LIBRARY_PATH": str(folder), "FAKE_NVML_DRIVER": "13000"})
    environ.update(env)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=environ, capture_output=True, text=True, check=True
    )
    result: list[object] = json.loads(out.stdout)
    return result


def test_nvml_probe_reads_devices_and_driver_through_ctypes(fake_nvml_dir: Path) -> None:
    assert run_probe(fake_nvml_dir, FAKE_NVML_CAPS="9.0,8.6") == [
        [0, "Fake GPU 0", [9, 0]],
        [1, "Fake GPU 1", [8, 6]],
        [13, 0],
        None,
    ]


def test_nvml_probe_honours_cuda_visible_devices(fake_nvml_dir: Path) -> None:
    result = run_probe(fake_nvml_dir, FAKE_NVML_CAPS="9.0,8.6", CUDA_VISIBLE_DEVICES="1")
    assert result == [[1, "Fake GPU 1", [8, 6]], [13, 0], None]


def test_nvml_probe_reports_a_driver_without_gpus(fake_nvml_dir: Path) -> None:
    result = run_probe(fake_nvml_dir, FAKE_NVML_CAPS="", FAKE_NVML_DRIVER="12080")
    assert result == [[12, 8], "the NVIDIA driver reports no GPU"]


def test_nvml_probe_reports_a_driver_that_does_not_answer(fake_nvml_dir: Path) -> None:
    result = run_probe(fake_nvml_dir, FAKE_NVML_CAPS="9.0", FAKE_NVML_INIT_FAILS="1")
    assert result == [None, "the NVIDIA driver did not answer (nvmlInit_v2: Driver Not Loaded)"]


def test_nvml_probe_reports_a_library_without_nvml_as_no_device(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the stand-in libnvidia-ml.so.1")
    (tmp_path / "empty.c").write_text("int kp_not_nvml;\n")
    library = tmp_path / "libnvidia-ml.so.1"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(library), str(tmp_path / "empty.c")], check=True
    )
    result = run_probe(tmp_path)
    assert result[:1] == [None]
    assert str(result[1]).startswith("the NVIDIA driver did not answer (")
    assert "nvmlInit_v2" in str(result[1])


@pytest.mark.skipif(
    any(Path(p, "libnvidia-ml.so.1").exists() for p in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64")),
    reason="this machine has an NVIDIA driver",
)
def test_nvml_probe_without_a_driver_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    facts = nvml_probe()
    assert facts.devices == ()
    assert facts.problem == "no NVIDIA driver: libnvidia-ml.so.1 not found"


def test_facts_describe_devices_and_driver_in_one_line() -> None:
    facts = DeviceFacts(
        devices=(device.Device(0, "NVIDIA H200", (9, 0)), device.Device(1, "NVIDIA H200", (9, 0))),
        driver_cuda=(13, 0),
    )
    assert facts.describe() == "0: NVIDIA H200 (sm_90), 1: NVIDIA H200 (sm_90); driver CUDA 13.0"


def test_facts_describe_why_no_device_is_visible() -> None:
    assert DeviceFacts(problem="CUDA_VISIBLE_DEVICES is empty").describe() == (
        "none (CUDA_VISIBLE_DEVICES is empty)"
    )
