"""scripts/gpu_devices.py: the check of where scripts/gpu-check's GPU tests ran."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).parents[2] / "scripts" / "gpu_devices.py"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_devices", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _log(folder: Path, *records: tuple[str, str, str, str | None]) -> Path:
    folder.mkdir()
    for test, worker, visible, uuid in records:
        with (folder / f"{worker}.jsonl").open("a") as log:
            record = {"test": test, "worker": worker, "cuda_visible_devices": visible}
            log.write(json.dumps({**record, "device": 0, "uuid": uuid}) + "\n")
    return folder


def _run(script: ModuleType, tmp_path: Path, many: Path) -> tuple[int, dict[str, object]]:
    gpus = tmp_path / "gpus.csv"
    gpus.write_text("0, GPU-aaa, NVIDIA H200\n1, GPU-bbb, NVIDIA H200\n")
    one = _log(tmp_path / "one", ("t1", "main", "0", "aaa"), ("t2", "main", "0", "aaa"))
    out = tmp_path / "multi-gpu.json"
    argv = ["--gpus", str(gpus), "--one", str(one), "--many", str(many), "--workers", "2"]
    argv += ["--wall-one", "10", "--wall-many", "5", "--out", str(out)]
    return script.main(argv), json.loads(out.read_text())


def test_each_test_on_its_workers_gpu_passes_with_the_speedup(
    script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    many = _log(tmp_path / "many", ("t1", "gw0", "0", "aaa"), ("t2", "gw1", "1", "bbb"))
    code, summary = _run(script, tmp_path, many)
    assert code == 0
    assert summary["problems"] == []
    assert summary["speedup"] == 2.0
    assert summary["tests_per_gpu"] == {"one_gpu": {"0": 2}, "sharded": {"0": 1, "1": 1}}


def test_a_test_off_its_workers_gpu_fails_the_check(
    script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    many = _log(tmp_path / "many", ("t1", "gw0", "0", "aaa"), ("t2", "gw1", "1", "aaa"))
    code, summary = _run(script, tmp_path, many)
    assert code == 1
    assert summary["problems"] == [
        "sharded: t2: ran on GPU aaa, worker gw1 holds CUDA_VISIBLE_DEVICES=1",
        "sharded: tests ran on 1 GPUs, 2 expected",
    ]
