"""examples/llm_ops on a machine without a GPU: it builds, installs, imports and says why not.

Builds the real package with the real nvcc into a stable-ABI wheel (once per session), installs
it into a private folder and checks it from fresh interpreters.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest
from builds import has_gpu, install_into, run_in

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def wheel(llm_ops_wheel: Path) -> Path:
    return llm_ops_wheel


@pytest.fixture(scope="module")
def site(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_into(wheel, tmp_path_factory.mktemp("site"))


def test_wheel_is_tagged_for_the_stable_abi(wheel: Path) -> None:
    assert re.fullmatch(
        r"llm_ops-0\.1\.0\+cu\d+stable2\.10-cp\d+-abi3-manylinux_2_\d+_x86_64\.whl", wheel.name
    )


def test_wheel_holds_both_kernels_and_the_build_record(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"llm_ops/rmsnorm/_C.abi3.so", "llm_ops/silu_mul/_C.abi3.so"} <= names
    assert "llm_ops/_kernelpack.json" in names


def test_installed_package_reports_no_device_for_each_kernel(site: Path) -> None:
    if has_gpu():
        pytest.skip("this machine has a GPU")
    status = json.loads(run_in(site, "import json, llm_ops; print(json.dumps(llm_ops.status()))"))
    assert set(status) == {"rmsnorm", "silu_mul"}
    assert all(value.startswith("no-device") for value in status.values()), status


def test_cpu_tensors_are_refused_with_the_ops_own_message(site: Path) -> None:
    # The refusal path of a stable kernel (STD_TORCH_CHECK through torch's C shim) on a
    # machine without a GPU: each op is registered for CPU too, and refuses there.
    out = run_in(
        site,
        """
        import json, torch
        from llm_ops import rmsnorm, silu_mul
        x, w = torch.ones(2, 8), torch.ones(8)
        calls = [
            lambda: rmsnorm.rms_norm(x, w),
            lambda: rmsnorm.rms_norm(x, w, residual=x),
            lambda: silu_mul.silu_mul(x),
            lambda: getattr(torch.ops, rmsnorm.NAMESPACE).forward(x.double(), w.double(), 1e-6),
        ]
        got = []
        for call in calls:
            try:
                call()
                got.append(None)
            except Exception as exc:
                got.append([type(exc).__name__, str(exc).splitlines()[0]])
        print(json.dumps(got))
        """,
    )
    got = json.loads(out)
    assert [kind for kind, _ in got] == ["RuntimeError"] * 4, got
    assert "rmsnorm: x must be a CUDA tensor" in got[0][1]
    assert "rmsnorm: x must be a CUDA tensor" in got[1][1]
    assert "silu_mul: x must be a CUDA tensor" in got[2][1]
    assert "rmsnorm: x must be a CUDA tensor" in got[3][1]


def test_rmsnorm_fakes_give_shapes_and_dtypes_on_meta(site: Path) -> None:
    out = run_in(
        site,
        """
        import json, torch
        from llm_ops import rmsnorm
        x = torch.empty(3, 5, 72, device="meta", dtype=torch.bfloat16, requires_grad=True)
        r = torch.empty(3, 5, 72, device="meta", dtype=torch.bfloat16)
        w = torch.empty(72, device="meta", dtype=torch.bfloat16, requires_grad=True)
        y = rmsnorm.rms_norm(x, w)
        y2, h = rmsnorm.rms_norm(x, w, residual=r)
        (y.sum() + y2.sum() + h.sum()).backward()
        print(json.dumps([[list(t.shape), str(t.dtype), t.device.type]
                          for t in (y, y2, h, x.grad, w.grad)]))
        """,
    )
    bf16 = "torch.bfloat16"
    assert json.loads(out) == [
        [[3, 5, 72], bf16, "meta"],
        [[3, 5, 72], bf16, "meta"],
        [[3, 5, 72], bf16, "meta"],
        [[3, 5, 72], bf16, "meta"],
        [[72], bf16, "meta"],
    ]


def test_silu_mul_fakes_give_shapes_and_dtypes_on_meta(site: Path) -> None:
    out = run_in(
        site,
        """
        import json, torch
        from llm_ops import silu_mul
        x = torch.empty(4, 7, 2 * 11, device="meta", dtype=torch.float16, requires_grad=True)
        out = silu_mul.silu_mul(x)
        out.sum().backward()
        print(json.dumps([[list(t.shape), str(t.dtype)] for t in (out, x.grad)]))
        """,
    )
    assert json.loads(out) == [[[4, 7, 11], "torch.float16"], [[4, 7, 22], "torch.float16"]]


def test_requirements_are_exported(site: Path) -> None:
    out = run_in(
        site,
        """
        import json, torch
        from llm_ops import rmsnorm, silu_mul
        print(json.dumps([
            rmsnorm.MAX_HIDDEN, rmsnorm.ALIGNMENT,
            rmsnorm.unsupported_shape_reason((2, 4096), torch.bfloat16),
            rmsnorm.unsupported_shape_reason((2, rmsnorm.MAX_HIDDEN + 1), torch.bfloat16)
            is not None,
            silu_mul.unsupported_shape_reason((2, 7), torch.bfloat16) is not None,
        ]))
        """,
    )
    assert json.loads(out) == [16384, 16, None, True, True]
