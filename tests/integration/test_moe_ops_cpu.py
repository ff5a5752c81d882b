"""examples/moe_ops on a machine without a GPU: the CUTLASS sm90 package builds, installs,
imports and says why it cannot run.

The build is the real one: ten translation units, eight of them CUTLASS 3.x grouped-GEMM
instantiations (minutes on two cores), with the CUTLASS headers of the `nvidia-cutlass`
wheel (`depends = ["cutlass"]`). Without those headers the module skips, with the reason.
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
