"""A `[torch-noarch]` kernel-builder project (Python only): its Hub export loads through the
real `kernels` package with every public name, and its wheel ships what kernel-builder ships.

The fixture is written here: a v4 `build.toml` (no edition) whose package, like einops, has a
module of the package's own name (`kp_noarch/kp_noarch.py`), a `pyext` data file read at
import (`tables/scales.json`), a file of no listed extension (`NOTES.txt`), and
`python-depends` for every backend and for CUDA. No compiler runs; `kernels` checks that a
variant's `python-depends` import, so the load gets a one-line `einops` on its path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from email.parser import HeaderParser
from pathlib import Path

import pytest

from kernelpack.cli import main

pytestmark = pytest.mark.integration

kernels = pytest.importorskip("kernels")
from kernels._rust import Digest, DigestAlgorithm, Metadata  # noqa: E402

BUILD_TOML = """\
[general]
name = "kp-noarch"
version = 2
license = "Apache-2.0"
backends = ["cpu", "cuda", "rocm"]
python-depends = ["einops"]

[general.cuda]
python-depends = ["nvidia-cutlass-dsl"]

[torch-noarch]
pyext = ["py", "json"]
cuda-capabilities = ["9.0"]
"""

INIT = """\
from ._ops import add_op_namespace_prefix, ops
from .kp_noarch import double, scale
from .layers import Halve

__all__ = ["Halve", "add_op_namespace_prefix", "double", "ops", "scale"]
"""

MODULE = """\
import json
from pathlib import Path

import torch

_TABLE = json.loads((Path(__file__).parent / "tables" / "scales.json").read_text())


def scale(x: torch.Tensor) -> torch.Tensor:
    return x * _TABLE["factor"]


def double(x: torch.Tensor) -> torch.Tensor:
    return x + x
"""

LAYERS = """\
import torch


class Halve(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / 2
"""

LOAD = """\
import json, torch, kernels
m = kernels.get_kernel("kernels-test/kp-noarch", version=2, backend="cpu")
x = torch.arange(4.0)
print(json.dumps({
    "missing": [n for n in m.__all__ if not hasattr(m, n)],
    "scale": m.scale(x).tolist(),
    "double": m.double(x).tolist(),
    "halve": m.Halve()(x).tolist(),
    "prefix": m.add_op_namespace_prefix("f"),
    "name": m.__name__,
}))
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("noarch") / "kp-noarch"
    package = root / "torch-ext" / "kp_noarch"
    (package / "tables").mkdir(parents=True)
    (root / "build.toml").write_text(BUILD_TOML)
    (package / "__init__.py").write_text(INIT)
    (package / "kp_noarch.py").write_text(MODULE)
    (package / "layers.py").write_text(LAYERS)
    (package / "tables" / "scales.json").write_text(json.dumps({"factor": 3}))
    (package / "NOTES.txt").write_text("not a listed extension\n")
    return root


@pytest.fixture(scope="module")
def hub(project: Path) -> Path:
    out = project.parent / "hub"
    assert main(["export", "--hub", str(out), str(project)]) == 0
    return out


@pytest.fixture(scope="module")
def wheel(project: Path) -> Path:
    out = project.parent / "dist"
    assert main(["build", str(project), "--wheel-dir", str(out)]) == 0
    (found,) = out.glob("*.whl")
    return found


def _stub_einops(folder: Path) -> Path:
    (folder / "einops").mkdir(parents=True, exist_ok=True)
    (folder / "einops" / "__init__.py").write_text("")
    return folder


def test_noarch_export_writes_one_variant_per_listed_backend(hub: Path) -> None:
    assert sorted(p.name for p in (hub / "build").iterdir()) == [
        "torch-cpu",
        "torch-cuda",
        "torch-rocm",
    ]


def test_noarch_metadata_carries_the_backends_python_depends_and_declared_archs(
    hub: Path,
) -> None:
    cpu = Metadata.read_from_file(hub / "build" / "torch-cpu" / "metadata.json")
    cuda = json.loads((hub / "build" / "torch-cuda" / "metadata.json").read_text())
    Metadata.read_from_file(hub / "build" / "torch-cuda" / "metadata.json")  # kernels parses it
    assert cpu.python_depends == ["einops"]
    assert cuda["python-depends"] == ["einops", "nvidia-cutlass-dsl"]
    assert cuda["backend"] == {"type": "cuda", "archs": ["9.0"]}


def test_noarch_variant_digest_is_what_kernels_computes(hub: Path) -> None:
    folder = hub / "build" / "torch-cpu"
    digest = Metadata.read_from_file(folder / "metadata.json").digest
    assert digest is not None
    computed = Digest.hash_variant(DigestAlgorithm.SHA256, folder)
    digest.validate(computed)  # raises on any missing, unknown or changed file
    assert digest.files == computed.files


def test_noarch_export_has_no_compat_folder_shadowing_the_packages_own_module(hub: Path) -> None:
    folder = hub / "build" / "torch-cpu"
    assert (folder / "kp_noarch.py").is_file()
    assert not (folder / "kp_noarch").exists()


def test_noarch_export_copies_every_package_file_as_kernel_builder_does(hub: Path) -> None:
    folder = hub / "build" / "torch-cpu"
    assert (folder / "tables" / "scales.json").is_file()
    assert (folder / "NOTES.txt").is_file()


def test_noarch_export_loads_through_real_kernels_with_every_public_name(
    hub: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELPACK_", "LOCAL_"))}
    env.update(
        HF_HUB_OFFLINE="1",
        LOCAL_KERNELS=f"kernels-test/kp-noarch={hub}",
        PYTHONPATH=os.pathsep.join([str(_stub_einops(tmp_path / "site")), *sys.path]),
    )
    done = subprocess.run(
        [sys.executable, "-c", LOAD], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["missing"] == []
    assert result["scale"] == [0.0, 3.0, 6.0, 9.0]  # the pyext data file was read
    assert result["double"] == [0.0, 2.0, 4.0, 6.0]
    assert result["halve"] == [0.0, 0.5, 1.0, 1.5]
    assert result["prefix"] == f"{result['name']}::f"


def test_noarch_wheel_ships_the_pyext_data_file_and_no_other(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "kp_noarch/tables/scales.json" in names
    assert "kp_noarch/kp_noarch.py" in names
    assert "kp_noarch/NOTES.txt" not in names


def test_noarch_wheel_metadata_requires_the_python_depends(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = HeaderParser().parsestr(archive.read(name).decode())
    requires = metadata.get_all("Requires-Dist") or []
    assert "einops" in requires
    assert "nvidia-cutlass-dsl" in requires
