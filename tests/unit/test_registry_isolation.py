"""The runtime stays light: no build machinery, no CUDA initialisation, torch read from disk."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from registry_support import built, make_package, skipped, unique_name

from kernelpack_runtime.torchinfo import _assignments

#: The builder distribution (`kernelpack`, any module of it) never loads at run time.
BUILDER = "kernelpack"
FORBIDDEN = ("ninja", "setuptools", "filelock", "rich", "wheel", "torch.utils.cpp_extension")


def run_python(code: str, cwd: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_importing_a_package_and_asking_status_loads_no_build_machinery(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    package = unique_name()
    make_package(
        tmp_path,
        package,
        {"a": built("a", package), "b": skipped("nvcc-missing", "no nvcc")},
    )
    code = (
        # torch's own import runs `ldconfig -p`: only what kernelpack runs counts.
        "import json, subprocess, sys, torch\n"
        "calls = []\n"
        "real_popen = subprocess.Popen.__init__\n"
        "def spy(self, args, *a, **k):\n"
        "    calls.append(str(args))\n"
        "    return real_popen(self, args, *a, **k)\n"
        "subprocess.Popen.__init__ = spy\n"
        # A GPU the kernel runs on, so that every check runs and the kernel is loaded.
        "from kernelpack_runtime import set_default_probe\n"
        "from kernelpack_runtime.testing.fakes import fake_probe\n"
        "set_default_probe(fake_probe('9.0'))\n"
        f"import {package} as pkg\n"
        "status = pkg.status(); pkg.unavailable_reason('a'); pkg.is_available('b')\n"
        f"bad = [m for m in {FORBIDDEN!r} if m in sys.modules]\n"
        f"bad += sorted(m for m in sys.modules if m.split('.')[0] == {BUILDER!r})\n"
        "cuda = torch.cuda.is_initialized()\n"
        "print(json.dumps({'a': status['a'], 'bad': bad, 'calls': calls, 'cuda': cuda}))\n"
    )
    result = run_python(code, tmp_path)
    assert result == {"a": "available", "bad": [], "calls": [], "cuda": False}


@pytest.mark.skipif(
    any(Path(p, "libnvidia-ml.so.1").exists() for p in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64")),
    reason="this machine has an NVIDIA driver",
)
def test_status_on_a_machine_without_gpu_does_not_import_torch(tmp_path: Path) -> None:
    package = unique_name()
    make_package(tmp_path, package, {"a": built("a", package)})
    code = (
        "import json, sys\n"
        f"import {package} as pkg\n"
        "status = pkg.status()\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'status': status}))\n"
    )
    assert run_python(code, tmp_path) == {
        "torch": False,
        "status": {
            "a": "no-device: no CUDA device visible: no NVIDIA driver: libnvidia-ml.so.1 not found"
        },
    }


def test_torch_version_is_read_from_its_version_file() -> None:
    torch = pytest.importorskip("torch")
    code = (
        "import json, sys\n"
        "from kernelpack_runtime.torchinfo import read_torch\n"
        "facts = read_torch()\n"
        "print(json.dumps({'v': facts.version, 'cuda': facts.cuda, "
        "'imported': 'torch' in sys.modules}))\n"
    )
    result = run_python(code, Path.cwd())
    assert result == {"v": torch.__version__, "cuda": torch.version.cuda, "imported": False}


def test_version_file_assignments_are_read_literally() -> None:
    source = (
        "from typing import Optional\n"
        "__version__ = '2.13.0+cpu'\n"
        "cuda: Optional[str] = None\n"
        "git_version = compute()\n"
    )
    assert _assignments(source) == {"__version__": "2.13.0+cpu", "cuda": None}


def test_a_torch_that_fails_to_import_makes_kernels_load_failed(tmp_path: Path) -> None:
    package = unique_name()
    make_package(tmp_path, package, {"a": built("a", package)})
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text("__version__ = '2.14.1+cu130'\ncuda = '13.0'\n")
    (tmp_path / "torch" / "__init__.py").write_text(
        "raise ImportError('libcudart.so.13: cannot open shared object file')\n"
    )
    code = (
        "import json\n"
        "from kernelpack_runtime import Registry\n"
        "from kernelpack_runtime.testing.fakes import fake_probe\n"
        f"reason = Registry({package!r}, probe=fake_probe('9.0')).unavailable_reason('a')\n"
        "print(json.dumps(reason.to_json()))\n"
    )
    assert run_python(code, tmp_path) == {
        "code": "load-failed",
        "message": "libcudart.so.13: cannot open shared object file; built for torch 2.14.1 "
        "(CUDA 13.0), running torch 2.14.1+cu130 (CUDA 13.0)",
    }
