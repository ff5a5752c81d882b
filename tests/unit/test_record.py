from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelpack_runtime.reason import Reason
from kernelpack_runtime.record import BuildRecord, KernelRecord, ToolchainRecord

RECORD_EXAMPLE = {
    "schema": 1,
    "package": "llm_ops",
    "version": "0.1.0+cu130stable2.10",
    "toolchain": {
        "nvcc": "13.0.88",
        "cuda": "13.0",
        "torch": "2.14.1",
        "torch_cuda": "13.0",
        "cxx11_abi": True,
        "python": "3.11",
        "machine": "x86_64",
    },
    "kernels": {
        "rmsnorm": {
            "status": "built",
            "abi": "stable",
            "stable_target": "2.10",
            "archs": ["9.0a"],
            "ptx": False,
            "library": "rmsnorm/_C.abi3.so",
            "sources_sha256": "ab" * 32,
            "namespace": "llm_ops_rmsnorm",
        },
        "flash_moe": {
            "status": "skipped",
            "reason": {"code": "arch-unsupported", "message": "nvcc 12.4 cannot build sm_100a"},
        },
    },
}


def test_record_example_round_trips_unchanged() -> None:
    record = BuildRecord.from_json(RECORD_EXAMPLE)
    assert record.to_json() == RECORD_EXAMPLE


def test_skipped_kernel_keeps_its_reason() -> None:
    record = BuildRecord.from_json(RECORD_EXAMPLE)
    skipped = record.kernels["flash_moe"]
    assert not skipped.built
    assert skipped.reason == Reason("arch-unsupported", "nvcc 12.4 cannot build sm_100a")


def test_write_is_atomic_and_readable(tmp_path: Path) -> None:
    record = BuildRecord(
        package="p",
        version="0.1.0+cu130stable2.10",
        toolchain=ToolchainRecord("13.0.88", "13.0", "2.14.1", "13.0", True, "3.11", "x86_64"),
        kernels={"k": KernelRecord(status="skipped", reason=Reason("not-selected", "not asked"))},
    )
    target = tmp_path / "_kernelpack.json"
    record.write(target)
    assert BuildRecord.read(target) == record
    assert [p.name for p in tmp_path.iterdir()] == ["_kernelpack.json"]


def test_other_schema_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "_kernelpack.json"
    target.write_text(json.dumps({**RECORD_EXAMPLE, "schema": 2}))
    with pytest.raises(ValueError, match="schema 2"):
        BuildRecord.read(target)


def test_unknown_reason_code_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown reason code"):
        Reason("no-such-code", "x")
