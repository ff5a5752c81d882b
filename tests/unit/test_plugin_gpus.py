"""The pytest plugin's GPU pinning: `pytest -n N --kernels-gpus auto|K` and `@pytest.mark.gpus(n)`.

The xdist runs are real: a controller and its worker processes, each loading a stand-in
`libnvidia-ml.so.1` (tests/fakes/nvml.py) that describes the machine, so every process asks the
real NVML probe and applies `CUDA_VISIBLE_DEVICES` as it would on a GPU runner. Each worker
writes what it saw at session start (its `CUDA_VISIBLE_DEVICES`, its probe's devices, a
registry's `status()`) into `views/<worker>.json`.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from fakes.nvml import nvml_environment
from registry_support import built, make_package, unique_name

from kernelpack_runtime.testing.gpus import GpuLayout, parse_gpus_option, visible_entries

pytest_plugins = ["pytester"]

# Pytester forgets modules first imported during a test; torch cannot be imported twice.
with contextlib.suppress(ImportError):
    import torch  # noqa: F401

VIEWS_CONFTEST = """
import json, os
from pathlib import Path

PACKAGE = {package!r}

def pytest_sessionstart(session):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return
    from kernelpack_runtime.device import default_probe
    from kernelpack_runtime.registry import registry_for

    view = {{
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "devices": [d.index for d in default_probe().devices],
        "status": registry_for(PACKAGE).status() if PACKAGE else {{}},
    }}
    views = Path(__file__).parent / "views"
    views.mkdir(exist_ok=True)
    (views / f"{{worker}}.json").write_text(json.dumps(view))
"""

PROBE_CONFTEST = """
from kernelpack_runtime import set_default_probe
from kernelpack_runtime.testing.fakes import fake_probe, no_device_probe

def pytest_configure(config):
    config._kp_previous_probe = set_default_probe({probe})

def pytest_unconfigure(config):
    set_default_probe(config._kp_previous_probe)
"""


# -- the layout -------------------------------------------------------------------------------


def test_no_more_workers_than_gpus_gives_each_worker_a_block() -> None:
    layout = GpuLayout(("0", "1", "2", "3"), 2)
    assert [layout.held(w) for w in range(2)] == [("0", "1"), ("2", "3")]
    assert layout.summary() == "4 GPUs over 2 workers, 2 each"


def test_more_workers_than_gpus_take_them_round_robin() -> None:
    layout = GpuLayout(("0", "1"), 3)
    assert [layout.held(w) for w in range(3)] == [("0",), ("1",), ("0",)]
    assert layout.shared
    assert layout.summary() == (
        "2 GPUs over 3 workers, one each, round-robin (some workers share a GPU)"
    )


def test_gpus_that_do_not_divide_evenly_are_left_unused_and_said_so() -> None:
    layout = GpuLayout(tuple(str(i) for i in range(8)), 3)
    assert [layout.held(w) for w in range(3)] == [("0", "1"), ("2", "3"), ("4", "5")]
    assert layout.unused == ("6", "7")
    assert layout.summary() == "8 GPUs over 3 workers, 2 each (6,7 unused)"


def test_every_worker_holds_as_many_gpus_as_every_other() -> None:
    for gpus in range(1, 9):
        for workers in range(1, 12):
            layout = GpuLayout(tuple(str(i) for i in range(gpus)), workers)
            assert {len(layout.held(w)) for w in range(workers)} == {layout.per_worker}


def test_worker_entries_are_the_controllers_cuda_visible_devices_entries() -> None:
    assert visible_entries("3, GPU-ab12,1", 2) == ("3", "GPU-ab12")
    assert visible_entries(None, 3) == ("0", "1", "2")


def test_gpus_option_is_auto_or_a_positive_count() -> None:
    assert parse_gpus_option("auto") is None
    assert parse_gpus_option("4") == 4
    for bad in ("0", "-1", "two", ""):
        with pytest.raises(ValueError, match=f"--kernels-gpus {bad!r}: expected auto"):
            parse_gpus_option(bad)


# -- real xdist runs ---------------------------------------------------------------------------


@dataclass
class Machine:
    """A GPU machine described by compute capabilities, and runs of pytest on it."""

    pytester: pytest.Pytester
    monkeypatch: pytest.MonkeyPatch
    nvml_dir: Path

    def run(self, caps: str, *args: str, package: str = "") -> pytest.RunResult:
        for name, value in nvml_environment(self.nvml_dir, caps).items():
            self.monkeypatch.setenv(name, value)
        self.pytester.makeconftest(VIEWS_CONFTEST.format(package=package))
        return self.pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", *args)

    def views(self) -> dict[str, dict[str, object]]:
        return {
            path.stem: json.loads(path.read_text())
            for path in sorted((self.pytester.path / "views").glob("*.json"))
        }


@pytest.fixture
def machine(
    pytester: pytest.Pytester, fake_nvml_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Machine:
    pytest.importorskip("xdist")
    for name in ("KERNELPACK_REQUIRE", "CUDA_VISIBLE_DEVICES", "PYTEST_XDIST_AUTO_NUM_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    return Machine(pytester, monkeypatch, fake_nvml_dir)


def write_test(pytester: pytest.Pytester, body: str) -> None:
    pytester.makepyfile(test_it="import pytest\n\n" + body)


def test_each_worker_holds_its_own_gpu_and_its_registry_sees_only_it(
    machine: Machine, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(pytester.path))
    name = unique_name()
    make_package(pytester.path, name, {"k": built("k", name)})  # needs sm_90
    write_test(pytester, "def test_x(): pass\n")
    result = machine.run("8.0,9.0", "-n", "2", "--kernels-gpus", "auto", package=name)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "kernelpack: GPUs of the pytest-xdist workers: 2 GPUs over 2 workers, 1 each",
            "  gw0  CUDA_VISIBLE_DEVICES=0",
            "  gw1  CUDA_VISIBLE_DEVICES=1",
        ]
    )
    views = machine.views()
    assert [(v["visible"], v["devices"]) for v in views.values()] == [("0", [0]), ("1", [1])]
    gw0, gw1 = (view["status"] for view in views.values())
    assert isinstance(gw0, dict) and gw0["k"].startswith("arch-mismatch: ")
    assert gw1 == {"k": "available"}


def test_more_workers_than_gpus_share_them_round_robin(
    machine: Machine, pytester: pytest.Pytester
) -> None:
    write_test(pytester, "def test_x(): pass\n")
    result = machine.run("9.0,9.0", "-n", "3", "--kernels-gpus", "auto")
    result.stdout.fnmatch_lines(["kernelpack: GPUs of *: 2 GPUs over 3 workers, one each, round*"])
    views = machine.views()
    assert {w: (v["visible"], v["devices"]) for w, v in views.items()} == {
        "gw0": ("0", [0]),
        "gw1": ("1", [1]),
        "gw2": ("0", [0]),
    }


def test_a_worker_holding_two_gpus_runs_a_gpus_2_test(
    machine: Machine, pytester: pytest.Pytester
) -> None:
    write_test(
        pytester,
        "@pytest.mark.gpus(2)\ndef test_two(): pass\n\n"
        "@pytest.mark.gpus(3)\ndef test_three(): pass\n",
    )
    result = machine.run("9.0,9.0,9.0,9.0", "-n", "2", "--kernels-gpus", "auto")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED*needs 3 GPUs, this worker holds 2"
            " (--kernels-gpus: 4 GPUs over 2 workers, 2 each)"
        ]
    )
    views = machine.views()
    assert [(v["visible"], v["devices"]) for v in views.values()] == [
        ("0,1", [0, 1]),
        ("2,3", [2, 3]),
    ]


def test_kernels_require_fails_a_test_needing_more_gpus_than_its_worker_holds(
    machine: Machine, pytester: pytest.Pytester
) -> None:
    write_test(pytester, "@pytest.mark.gpus(2)\ndef test_two(): pass\n")
    result = machine.run("9.0,9.0", "-n", "2", "--kernels-gpus", "auto", "--kernels-require")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*required (--kernels-require*needs 2 GPUs, this worker holds 1*"])


def test_n_auto_starts_one_worker_per_gpu(machine: Machine, pytester: pytest.Pytester) -> None:
    write_test(pytester, "def test_x(): pass\n")
    result = machine.run("9.0,9.0,9.0", "-n", "auto", "--kernels-gpus", "auto")
    result.stdout.fnmatch_lines(["kernelpack: GPUs of *: 3 GPUs over 3 workers, 1 each"])
    assert sorted(machine.views()) == ["gw0", "gw1", "gw2"]


def test_a_count_pins_the_first_k_gpus(machine: Machine, pytester: pytest.Pytester) -> None:
    write_test(pytester, "def test_x(): pass\n")
    result = machine.run("9.0,9.0,9.0", "-n", "1", "--kernels-gpus", "2")
    result.stdout.fnmatch_lines(["kernelpack: GPUs of *: 2 GPUs over 1 worker, 2 each"])
    assert machine.views()["gw0"]["visible"] == "0,1"


def test_more_gpus_than_the_runner_has_is_a_usage_error(
    machine: Machine, pytester: pytest.Pytester
) -> None:
    write_test(pytester, "def test_x(): pass\n")
    result = machine.run("9.0,9.0", "-n", "2", "--kernels-gpus", "5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--kernels-gpus 5: this runner has 2 GPUs (0: Fake GPU 0*"])


def test_without_a_visible_gpu_the_workers_are_not_pinned(
    machine: Machine, pytester: pytest.Pytester
) -> None:
    write_test(pytester, "def test_x(): pass\n")
    result = machine.run("", "-n", "1", "--kernels-gpus", "auto")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "kernelpack: --kernels-gpus auto: no GPU visible (the NVIDIA driver reports no GPU);"
            " the workers are not pinned"
        ]
    )
    assert machine.views()["gw0"]["visible"] is None


# -- without workers ---------------------------------------------------------------------------


@pytest.fixture
def probe(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv("KERNELPACK_REQUIRE", raising=False)
    return pytester


def use_probe(pytester: pytest.Pytester, probe: str) -> None:
    pytester.makeconftest(PROBE_CONFTEST.format(probe=probe))


def test_without_xdist_it_pins_nothing_and_says_so(probe: pytest.Pytester) -> None:
    use_probe(probe, 'fake_probe("9.0", "9.0")')
    write_test(probe, "def test_x(): pass\n")
    result = probe.runpytest("--kernels-gpus", "auto", "-p", "no:xdist")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "kernelpack: --kernels-gpus auto: no pytest-xdist workers (-n N), nothing to pin; "
            "the tests see every visible GPU"
        ]
    )


def test_gpus_mark_skips_when_the_runner_has_fewer(probe: pytest.Pytester) -> None:
    use_probe(probe, 'fake_probe("9.0")')
    write_test(probe, "@pytest.mark.gpus(2)\ndef test_two(): pass\n")
    result = probe.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*test_it.py:3: needs 2 GPUs, this runner has 1"])


def test_gpus_mark_fails_when_required_and_the_runner_has_fewer(probe: pytest.Pytester) -> None:
    use_probe(probe, 'fake_probe("9.0")')
    write_test(probe, "@pytest.mark.gpus(2)\ndef test_two(): pass\n")
    result = probe.runpytest("--kernels-require")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*required (--kernels-require*needs 2 GPUs, this runner has 1"])


def test_gpus_mark_runs_when_the_runner_has_enough(probe: pytest.Pytester) -> None:
    use_probe(probe, 'fake_probe("9.0", "9.0")')
    write_test(probe, "@pytest.mark.gpus(2)\ndef test_two(): pass\n")
    probe.runpytest().assert_outcomes(passed=1)


def test_gpus_mark_without_any_gpu_says_why(probe: pytest.Pytester) -> None:
    use_probe(probe, 'no_device_probe("fake: no GPU here")')
    write_test(probe, "@pytest.mark.gpus(2)\n@pytest.mark.gpu\ndef test_two(): pass\n")
    result = probe.runpytest("-rs")
    result.stdout.fnmatch_lines(["SKIPPED*: needs 2 GPUs, this runner has 0 (fake: no GPU here)"])


def test_gpus_mark_needs_one_positive_count(probe: pytest.Pytester) -> None:
    use_probe(probe, 'fake_probe("9.0")')
    write_test(probe, "@pytest.mark.gpus('two')\ndef test_two(): pass\n")
    result = probe.runpytest()
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*@pytest.mark.gpus('two'): expected one number of GPUs*"])


def test_gpus_option_that_is_not_a_count_is_a_usage_error(probe: pytest.Pytester) -> None:
    write_test(probe, "def test_x(): pass\n")
    result = probe.runpytest("--kernels-gpus", "all")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--kernels-gpus 'all': expected auto or a number of GPUs*"])


def test_remote_workers_are_refused(probe: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    write_test(probe, "def test_x(): pass\n")
    result = probe.runpytest("--tx", "ssh=gpu-host", "--dist", "load", "--kernels-gpus", "auto")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--kernels-gpus pins local workers only*got --tx ssh=gpu-host"])


def test_gpus_marker_is_registered(probe: pytest.Pytester) -> None:
    result = probe.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.gpus(n):*"])
