"""A library of several kernels with archs of their own (a kernel-builder project): the
record keeps each kernel's archs, and the status says which of them run on the GPU found."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from registry_support import build_record, built, make_package, unique_name

from kernelpack_runtime import Registry
from kernelpack_runtime.arch import Arch
from kernelpack_runtime.record import FILENAME, BuildRecord, BuiltKernel, InvalidRecord
from kernelpack_runtime.status import PackageStatus
from kernelpack_runtime.testing.fakes import fake_probe, no_device_probe


def _library(package: str) -> BuiltKernel:
    entry = built("_ops", package, archs=("8.0", "9.0a"))
    parts = {"hopper": (Arch.parse("9.0a"),), "ampere": (Arch.parse("8.0"),)}
    return dataclasses.replace(entry, parts=parts)


def test_each_kernels_archs_round_trip_through_the_record(tmp_path: Path) -> None:
    record = build_record("pkg", {"_ops": _library("pkg")})
    record.write(tmp_path / FILENAME)
    data = json.loads((tmp_path / FILENAME).read_text())
    assert data["kernels"]["_ops"]["parts"] == {"hopper": ["9.0a"], "ampere": ["8.0"]}
    entry = BuildRecord.read(tmp_path / FILENAME).kernels["_ops"]
    assert isinstance(entry, BuiltKernel)
    assert entry.parts == {"hopper": (Arch.parse("9.0a"),), "ampere": (Arch.parse("8.0"),)}


def test_a_kernel_without_parts_writes_no_parts_key(tmp_path: Path) -> None:
    build_record("pkg", {"k": built("k", "pkg")}).write(tmp_path / FILENAME)
    assert "parts" not in json.loads((tmp_path / FILENAME).read_text())["kernels"]["k"]


def test_a_bad_arch_in_a_part_makes_the_record_invalid(tmp_path: Path) -> None:
    build_record("pkg", {"_ops": _library("pkg")}).write(tmp_path / FILENAME)
    data = json.loads((tmp_path / FILENAME).read_text())
    data["kernels"]["_ops"]["parts"]["hopper"] = ["9.5"]
    (tmp_path / FILENAME).write_text(json.dumps(data))
    with pytest.raises(InvalidRecord, match="parts"):
        BuildRecord.read(tmp_path / FILENAME)


@pytest.mark.parametrize(
    ("gpu", "line"),
    [
        ("9.0", "runs here: hopper; not on this GPU: ampere"),
        ("8.6", "runs here: ampere; not on this GPU: hopper"),
    ],
)
def test_status_says_which_kernels_of_the_library_run_on_the_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpu: str, line: str
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    name = unique_name()
    make_package(tmp_path, name, {"_ops": _library(name)})
    report = PackageStatus.of(Registry(name, probe=fake_probe(gpu)))
    (kernel,) = report.kernels
    assert kernel.archs == ("8.0", "9.0a")  # the union
    assert kernel.parts_line() == line
    parts = kernel.to_json()["parts"]
    assert parts["hopper"] == {"archs": ["9.0a"], "runs_here": gpu == "9.0"}


def test_without_a_gpu_status_names_no_part_as_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    name = unique_name()
    make_package(tmp_path, name, {"_ops": _library(name)})
    (kernel,) = PackageStatus.of(Registry(name, probe=no_device_probe())).kernels
    assert kernel.parts_line() is None
    assert kernel.to_json()["parts"]["ampere"]["runs_here"] is None
