"""benchmarks/gpu_machine.py: the clocks a benchmark records, read from nvidia-smi (a fake
one on PATH: the device probe is the edge)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import ModuleType

import pytest
from benchmark_modules import import_benchmark


@pytest.fixture(scope="module")
def gpu_machine() -> ModuleType:
    return import_benchmark("gpu_machine")


def _fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str) -> Path:
    args = tmp_path / "args"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$@" > "{args}"\necho "{line}"\n')
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return args


def test_clocks_are_numbers_where_reported_and_text_where_not(
    gpu_machine: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = _fake_smi(tmp_path, monkeypatch, "1980, 2619, 1980, 2619, [N/A], [N/A], 700.00")
    values = gpu_machine.clocks()
    assert values == {
        "clocks.sm": 1980.0,
        "clocks.mem": 2619.0,
        "clocks.max.sm": 1980.0,
        "clocks.max.mem": 2619.0,
        "clocks.applications.graphics": "[N/A]",
        "clocks.applications.memory": "[N/A]",
        "power.limit": 700.0,
    }
    # One query of exactly those fields, without units (so the values parse).
    assert args.read_text().split() == [
        "--query-gpu=" + ",".join(gpu_machine.CLOCK_FIELDS),
        "--format=csv,noheader,nounits",
    ]
    line = gpu_machine.clock_line(values)
    assert "SM 1980 MHz (max 1980)" in line and "power limit 700 W" in line
    assert "application [N/A] / [N/A] MHz" in line


def test_no_clocks_when_nvidia_smi_answers_otherwise(
    gpu_machine: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_smi(tmp_path, monkeypatch, "1980, 2619")  # fewer fields than asked
    assert gpu_machine.clocks() is None
    assert gpu_machine.clock_line(None) == "clocks: not reported"
