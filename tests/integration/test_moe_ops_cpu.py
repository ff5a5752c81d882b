"""examples/moe_ops on a machine without a GPU: the CUTLASS sm90 package builds, installs,
imports and says why it cannot run.

The build is the real one: nineteen translation units, fifteen of them CUTLASS 3.x
grouped-GEMM instantiations (bf16 and FP8; about seven minutes on two cores), with the
CUTLASS headers of the `nvidia-cutlass` wheel (`depends = ["cutlass"]`). Without those
headers the module skips, with the reason. The FP8 quantisation helpers and every op's fake
are checked here too: they need no GPU.
"""

from __future__ import annotations

import importlib.util
import json
import re
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from builds import has_gpu, install_into, run_in

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # CUTLASS: minutes on 2 cores


@pytest.fixture(scope="module")
def wheel(example_wheel: Callable[[str], Path]) -> Path:
    if importlib.util.find_spec("cutlass_library") is None:
        pytest.skip("the CUTLASS headers are absent (pip install --no-deps nvidia-cutlass)")
    return example_wheel("moe_ops")


@pytest.fixture(scope="module")
def site(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_into(wheel, tmp_path_factory.mktemp("site"))


def test_wheel_is_tagged_for_the_stable_abi_and_holds_sm90a_code(wheel: Path) -> None:
    assert re.fullmatch(
        r"moe_ops-0\.1\.0\+cu\d+stable2\.10-cp\d+-abi3-manylinux_2_\d+_x86_64\.whl", wheel.name
    )
    archive = zipfile.ZipFile(wheel)
    assert {"moe_ops/moe/_C.abi3.so", "moe_ops/_kernelpack.json"} <= set(archive.namelist())
    record = json.loads(archive.read("moe_ops/_kernelpack.json"))
    assert "moe" in json.dumps(record) and "9.0a" in json.dumps(record)
    library = archive.read("moe_ops/moe/_C.abi3.so")
    # Stable ABI: no C++ torch symbol (mangled at::/c10:: names) is imported.
    assert b"_ZN3c10" not in library and b"_ZN2at" not in library
    assert b"sm_90a" in library


def test_installed_package_reports_no_device(site: Path) -> None:
    if has_gpu():
        pytest.skip("this machine has a GPU")
    status = json.loads(run_in(site, "import json, moe_ops; print(json.dumps(moe_ops.status()))"))
    assert set(status) == {"moe"}
    assert status["moe"].startswith("no-device"), status


def test_fakes_give_shapes_on_meta_and_requirements_are_exported(site: Path) -> None:
    out = run_in(
        site,
        """
        import json, torch
        from moe_ops import moe
        bf16 = torch.bfloat16
        x = torch.empty(100, 256, device="meta", dtype=bf16)
        w = torch.empty(8, 256, 512, device="meta", dtype=bf16)
        w_down = torch.empty(8, 256, 256, device="meta", dtype=bf16)
        offsets = torch.empty(8, device="meta", dtype=torch.int32)
        logits = torch.empty(100, 8, device="meta")
        shapes = [
            list(moe.grouped_mm(x, w, offsets).shape),
            list(moe.grouped_mm_silu_mul(x, w, offsets).shape),
            list(moe.moe_forward(x, logits, w, w_down, 2, gate_up_interleaved=True).shape),
        ]
        print(json.dumps([shapes, moe.ALIGNMENT, moe.MAX_TOP_K, moe.MAX_EXPERTS,
                          moe.unsupported_shape_reason((100, 256), (8, 256, 512)),
                          moe.unsupported_shape_reason((100, 250), (8, 250, 512)) is not None]))
        """,
    )
    assert json.loads(out) == [[[100, 512], [100, 256], [100, 256]], 8, 8, 1024, None, True]


def test_offsets_report_op_dispatches_without_a_device_and_reports_nothing(site: Path) -> None:
    out = run_in(
        site,
        """
        import json, torch
        from moe_ops import moe
        ops = getattr(torch.ops, moe.NAMESPACE)
        try:
            ops.check_offsets_errors(-1)
            refused = ""
        except RuntimeError as exc:
            refused = str(exc).splitlines()[0]
        print(json.dumps([ops.check_offsets_errors(0) is None, refused,
                          "check_offsets_errors" in moe.__all__]))
        """,
    )
    nothing, refused, exported = json.loads(out)
    assert nothing and exported
    assert "check_offsets_errors: device index -1 is outside [0, 64)" in refused


def test_fp8_quantisation_layouts_reasons_and_fakes_on_cpu(site: Path) -> None:
    # The FP8 helpers are torch ops: their layouts and scale rules hold on any device. An
    # e4m3 value keeps 3 mantissa bits, so each element is within half an ulp (2^-4 relative,
    # for normal values) of what it stands for; a wrong scale or layout errs by order 1.
    out = run_in(
        site,
        """
        import json, torch
        from moe_ops import moe
        torch.manual_seed(0)
        res = {}
        # Columns of very different size: one scale per column.
        w = torch.randn(3, 256, 384) * torch.logspace(-2, 1, 384)
        q, s = moe.quantize_fp8_weights(w, "rowwise")
        deq = q.float() * s[:, None, :]
        res["row"] = [list(q.shape), str(q.dtype), q.transpose(-2, -1).is_contiguous(),
                      list(s.shape), float((deq - w).norm() / w.norm()),
                      bool(torch.allclose(s, w.abs().amax(dim=1) / 448.0))]
        # One scale per 128 x 128 block of [N, K]: the block's amax / 448.
        qb, sb = moe.quantize_fp8_weights(w, "blockwise")
        amax = w.transpose(-2, -1).reshape(3, 3, 128, 2, 128).abs().amax(dim=(2, 4))
        deqb = qb.transpose(-2, -1).float().reshape(3, 3, 128, 2, 128) * sb[:, :, None, :, None]
        deqb = deqb.reshape(3, 384, 256).transpose(-2, -1)
        res["block"] = [list(sb.shape), bool(torch.allclose(sb, amax / 448.0)),
                        float((deqb - w).norm() / w.norm())]
        x = torch.randn(5, 256)
        x[2] = 0  # an all-zero row: scale 1, not a division by zero
        xq, xs = moe.quantize_fp8_activations(x, "rowwise")
        _, xsb = moe.quantize_fp8_activations(x, "blockwise")
        res["act"] = [list(xs.shape), float(xs[2]), list(xsb.shape),
                      float((xq.float() * xs[:, None] - x).norm() / x.norm())]
        errors = []
        for call in (lambda: moe.quantize_fp8_weights(w, "columnwise"),
                     lambda: moe.quantize_fp8_weights(torch.randn(2, 100, 128), "blockwise"),
                     lambda: moe.quantize_fp8_activations(torch.randn(4, 100), "blockwise"),
                     lambda: moe.grouped_mm_fp8(q, q, s, s, s, config="fastest")):
            try:
                call()
                errors.append(None)
            except ValueError as exc:
                errors.append(str(exc))
        res["errors"] = errors
        res["reasons"] = [
            moe.fp8_unsupported_shape_reason((16, 256), (4, 256, 512), "blockwise"),
            moe.fp8_unsupported_shape_reason((16, 48), (4, 48, 80)),
            moe.fp8_unsupported_shape_reason((16, 48), (4, 48, 80), "blockwise"),
            moe.fp8_unsupported_shape_reason((16, 24), (4, 24, 32)),
        ]
        meta = dict(device="meta")
        e4m3 = moe.FP8_DTYPE
        def k_major(e, k, n):
            return torch.empty(e, n, k, dtype=e4m3, **meta).transpose(-2, -1)
        xm = torch.empty(100, 256, dtype=e4m3, **meta)
        offsets = torch.empty(8, dtype=torch.int32, **meta)
        y = moe.grouped_mm_fp8(xm, k_major(8, 256, 512), torch.empty(100, **meta),
                               torch.empty(8, 512, **meta), offsets, config="pingpong")
        xb = torch.empty(100, 256, dtype=torch.bfloat16, **meta)
        logits = torch.empty(100, 8, **meta)
        f = moe.moe_forward_fp8(xb, logits, k_major(8, 256, 512), torch.empty(8, 512, **meta),
                                k_major(8, 256, 256), torch.empty(8, 256, **meta), 2,
                                config="cooperative")
        res["meta"] = [list(y.shape), str(y.dtype), list(f.shape), str(f.dtype)]
        print(json.dumps(res))
        """,
    )
    res = json.loads(out)
    shape, dtype, k_major, scale_shape, row_err, row_scales = res["row"]
    assert (shape, dtype, k_major, scale_shape) == (
        [3, 256, 384],
        "torch.float8_e4m3fn",
        True,
        [3, 384],
    )
    assert row_scales and 0 < row_err <= 2**-4
    block_scales, block_match, block_err = res["block"]
    assert block_scales == [3, 3, 2] and block_match and 0 < block_err <= 2**-4
    act_scales, zero_row_scale, act_block_scales, act_err = res["act"]
    assert act_scales == [5] and zero_row_scale == 1.0 and act_block_scales == [5, 2]
    assert 0 < act_err <= 2**-4
    assert res["errors"] == [
        "layout must be one of rowwise, blockwise, got 'columnwise'",
        "K = 100 and N = 128 must be multiples of 128",
        "K = 100 must be a multiple of 128 for block scales",
        "config must be one of auto, cooperative, pingpong, got 'fastest'",
    ]
    assert res["reasons"] == [
        None,
        None,
        "K = 48 must be a positive multiple of 128 (blockwise scales)",
        "K = 24 must be a positive multiple of 16 (rowwise scales)",
    ]
    assert res["meta"] == [[100, 512], "torch.bfloat16", [100, 256], "torch.bfloat16"]
