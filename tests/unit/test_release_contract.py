"""`kernelpack contract`: a kernel package's host-side contract, and the changes between two.

The packages here are real Python packages with a build record; their ops are defined with
`torch.library` from Python, so torch's dispatcher holds real schemas without a compile.
"""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

import pytest

from kernelpack.cli import main
from kernelpack.release.contract import Change, Contract, KernelContract, collect, compare
from kernelpack_runtime import registry
from kernelpack_runtime.arch import Arch
from kernelpack_runtime.reason import Reason
from kernelpack_runtime.record import BuildRecord, BuiltKernel, SkippedKernel, ToolchainRecord

pytest.importorskip("torch")

KERNEL = '''\
"""A kernel module as kernelpack packages write them."""
from __future__ import annotations

import torch
from os.path import join

__all__ = ["ALIGNMENT", "DTYPES", "MAX_HIDDEN", "NAMESPACE", "scale", "unsupported_shape_reason"]

ALIGNMENT = 16
MAX_HIDDEN = 8192
DTYPES = (torch.float32, torch.bfloat16)
NAMESPACE = "{ns}"
_PRIVATE = 1
lower = 2

torch.library.define(f"{{NAMESPACE}}::scale", "(Tensor x, float alpha) -> Tensor")
torch.library.define(
    f"{{NAMESPACE}}::scale.out", "(Tensor x, float alpha, *, Tensor(a!) out) -> Tensor(a!)"
)


def unsupported_shape_reason(shape: tuple[int, ...], dtype: torch.dtype) -> str | None:
    return None


def scale(x: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    return x * alpha


def _helper() -> None:
    pass
'''


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh package (unique name and op namespace) with a built and a skipped kernel."""
    name = f"kpc_{uuid.uuid4().hex[:12]}"
    folder = tmp_path / name
    (folder / "scale").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "scale" / "__init__.py").write_text(KERNEL.format(ns=f"{name}_scale"))
    toolchain = ToolchainRecord("13.0.88", "13.0", "2.14.1", "13.0", True, "3.11", "x86_64")
    BuildRecord(
        package=name,
        version="0.1.0+cu130stable2.10",
        toolchain=toolchain,
        kernels={
            "scale": BuiltKernel(
                abi="stable",
                archs=(Arch.parse("9.0a"),),
                library="scale/_C.abi3.so",
                namespace=f"{name}_scale",
            ),
            "moe": SkippedKernel(Reason("arch-unsupported", "nvcc cannot build sm_100a")),
        },
    ).write(folder / "_kernelpack.json")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_collects_public_uppercase_constants_as_json(package: str) -> None:
    kernel = collect(package).kernels["scale"]
    assert kernel.constants == {
        "ALIGNMENT": 16,
        "DTYPES": ["torch.float32", "torch.bfloat16"],
        "MAX_HIDDEN": 8192,
        "NAMESPACE": f"{package}_scale",
    }


def test_collects_public_function_signatures_without_quoted_annotations(package: str) -> None:
    kernel = collect(package).kernels["scale"]
    assert kernel.functions == {
        "scale": "(x: torch.Tensor, alpha: float = 1.0) -> torch.Tensor",
        "unsupported_shape_reason": ("(shape: tuple[int, ...], dtype: torch.dtype) -> str | None"),
    }


def test_collects_op_schemas_of_every_overload_from_the_dispatcher(package: str) -> None:
    kernel = collect(package).kernels["scale"]
    assert kernel.namespace == f"{package}_scale"
    assert kernel.ops == {
        "scale": "scale(Tensor x, float alpha) -> Tensor",
        "scale.out": "scale.out(Tensor x, float alpha, *, Tensor(a!) out) -> Tensor(a!)",
    }


def test_skipped_kernel_is_reported_not_collected(package: str) -> None:
    assert collect(package).kernels["moe"].error == "not built: nvcc cannot build sm_100a"


def test_without_all_only_functions_defined_in_the_module_count(
    package: str, tmp_path: Path
) -> None:
    module = tmp_path / package / "scale" / "__init__.py"
    module.write_text(module.read_text().replace("__all__ = [", "_all = ["))
    functions = collect(package).kernels["scale"].functions
    assert sorted(functions) == ["scale", "unsupported_shape_reason"]  # not os.path.join


def _contract(**kernel: object) -> Contract:
    base: dict[str, object] = {
        "namespace": "p_k",
        "constants": {"MAX_HIDDEN": 8192},
        "functions": {"f": "(x: int) -> int"},
        "ops": {"f": "f(Tensor x) -> Tensor"},
    }
    base.update(kernel)
    return Contract("p", "0.1.0", {"k": KernelContract.from_json(base)})


def test_only_additions_are_not_breaking() -> None:
    new = _contract(constants={"MAX_HIDDEN": 8192, "ALIGNMENT": 16})
    (change,) = compare(_contract(), new)
    assert change == Change("k", "constant", "ALIGNMENT", "added", new=16)
    assert not change.breaking


@pytest.mark.parametrize(
    ("new", "line"),
    [
        (
            _contract(constants={"MAX_HIDDEN": 4096}),
            "changed constant k.MAX_HIDDEN: was 8192; now 4096",
        ),
        (_contract(functions={}), "removed function k.f: (x: int) -> int"),
        (
            _contract(ops={"f": "f(Tensor x, int n) -> Tensor"}),
            "changed op k.f: was f(Tensor x) -> Tensor; now f(Tensor x, int n) -> Tensor",
        ),
        (_contract(namespace="p_k2"), "changed namespace k: was p_k; now p_k2"),
    ],
    ids=["constant", "function", "schema", "namespace"],
)
def test_changes_and_removals_are_breaking(new: Contract, line: str) -> None:
    (change,) = compare(_contract(), new)
    assert change.breaking
    assert str(change) == line


def test_removed_kernel_is_breaking_and_added_kernel_is_not() -> None:
    old = _contract()
    new = Contract("p", "0.2.0", {"k2": old.kernels["k"]})
    changes = {str(c): c.breaking for c in compare(old, new)}
    assert changes == {"removed kernel k": True, "added kernel k2": False}


def test_cli_writes_the_contract_and_finds_no_change_against_itself(
    package: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "contract.json"
    assert main(["contract", package, "--out", str(out)]) == 1  # moe was not built
    saved = json.loads(out.read_text())
    assert saved["kernels"]["scale"]["constants"]["MAX_HIDDEN"] == 8192
    capsys.readouterr()
    assert main(["contract", package, "--against", str(out)]) == 1
    assert "no contract changes (0.1.0+cu130stable2.10" in capsys.readouterr().out


def _saved(package: str, tmp_path: Path, edit: str) -> Path:
    data = collect(package).to_json()
    del data["kernels"]["moe"]
    kernel = data["kernels"]["scale"]
    if edit == "older-limit":
        kernel["constants"]["MAX_HIDDEN"] = 16384
    elif edit == "fewer-items":
        del kernel["constants"]["ALIGNMENT"]
    path = tmp_path / f"{edit}.json"
    path.write_text(json.dumps(data))
    return path


def _build_only_scale(package: str, tmp_path: Path) -> None:
    record_path = tmp_path / package / "_kernelpack.json"
    record = BuildRecord.read(record_path)
    kernels = {"scale": record.kernels["scale"]}
    BuildRecord(record.package, record.version, record.toolchain, kernels).write(record_path)
    # The next `kernelpack contract` is a new process, with a new registry that reads the new
    # record: forget this process's registry of the package, as that process never had one.
    registry._registries.pop(package, None)


def test_cli_against_exits_1_and_names_each_change_callers_must_absorb(
    package: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = _saved(package, tmp_path, "older-limit")
    _build_only_scale(package, tmp_path)
    assert main(["contract", package, "--against", str(old)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "changed constant scale.MAX_HIDDEN: was 16384; now 8192"
    assert out[-1].startswith("1 of 1 change(s) callers must absorb")


def test_cli_against_exits_0_when_the_new_build_only_adds(
    package: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = _saved(package, tmp_path, "fewer-items")
    _build_only_scale(package, tmp_path)
    assert main(["contract", package, "--against", str(old), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["breaking"] is False
    assert [(c["kind"], c["name"], c["change"]) for c in report["changes"]] == [
        ("constant", "ALIGNMENT", "added")
    ]


def test_cli_bad_against_file_is_bad_input(
    package: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(textwrap.dedent('{"schema": 7}'))
    assert main(["contract", package, "--against", str(bad)]) == 2
    assert "not a kernelpack contract" in capsys.readouterr().err


def test_cli_unknown_package_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["contract", "no_such_kernel_package_xyz"]) == 2
    assert "no such package" in capsys.readouterr().err
