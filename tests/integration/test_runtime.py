"""The registry against really built packages (real nvcc, CPU machine).

`packages/kpdemo` (a stable-ABI kernel `scale`, a classic kernel `addone`) is built once per
session with `kernelpack build --inplace`, and so is `kprival`, whose `scale` kernel registers
its ops in kpdemo's namespace `kpdemo_scale`. Every question is asked in a fresh interpreter, so
the libraries each test loads (and the ops they register) stay out of this process. Where a GPU
is needed to get past `no-device`, the device probe reports a fake NVIDIA H200 (sm_90, driver
CUDA 13.0): the only fake here; the `.so` files are real and really dlopened.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from buildlog import compiles
from builds import BuiltPackage, copy_built

pytestmark = pytest.mark.integration

DEMO = Path(__file__).parent / "packages" / "kpdemo"
SRC = Path(__file__).resolve().parents[2] / "src"

FAKE_H200 = (
    "from kernelpack_runtime import set_default_probe\n"
    "from kernelpack_runtime.testing.fakes import fake_probe\n"
    "set_default_probe(fake_probe('9.0', driver_cuda='{driver}', name='{name}'))\n"
)

ASK = """
import json
from kernelpack_runtime import Registry
registry = Registry({package!r})
out = {{}}
for name in {kernels!r}:
    reason = registry.unavailable_reason(name)
    out[name] = None if reason is None else [reason.code, reason.message]
print(json.dumps(out))
"""


def _clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KPDEMO_", "KPRIVAL_", "KERNELPACK_", "CUDA_VISIBLE"))
    }
    env.update(extra)
    return env


def _build(root: Path, *options: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "kernelpack", "build", str(root), "--inplace", *options],
        env=_clean_env(),
        check=True,
        capture_output=True,
    )


def python(
    code: str,
    *paths: Path,
    interpreter: str = sys.executable,
    env: dict[str, str] | None = None,
) -> Any:
    """Run `code` in a fresh interpreter with `paths` importable; its last line, as JSON."""
    environ = _clean_env(**(env or {}))
    environ["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in paths), str(SRC)])
    out = subprocess.run(
        [interpreter, "-c", code], env=environ, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def ask(
    root: Path,
    package: str,
    kernels: tuple[str, ...],
    *,
    gpu: str | None = "9.0",
    driver: str = "13.0",
    name: str = "NVIDIA H200",
    before: str = "",
) -> dict[str, list[str] | None]:
    prelude = ""
    if gpu is not None:
        prelude = FAKE_H200.format(driver=driver, name=name).replace("'9.0'", repr(gpu))
    code = prelude + before + ASK.format(package=package, kernels=list(kernels))
    result: dict[str, list[str] | None] = python(code, root)
    return result


@pytest.fixture(scope="session")
def demo(built_package: BuiltPackage) -> Path:
    """kpdemo, built in place once a run (shared through conftest.py)."""
    return built_package("kpdemo")[0]


@pytest.fixture(scope="session")
def rival(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kprival: kpdemo's `scale` kernel, registering its ops in kpdemo's namespace."""
    root = tmp_path_factory.mktemp("runtime") / "kprival"
    (root / "kprival" / "scale").mkdir(parents=True)
    shutil.copytree(DEMO / "kpdemo" / "scale" / "csrc", root / "kprival" / "scale" / "csrc")
    shutil.copy(DEMO / "kpdemo" / "scale" / "__init__.py", root / "kprival" / "scale")
    (root / "kprival" / "__init__.py").write_text('"""Collides with kpdemo."""\n')
    (root / "kprival" / "kernels.toml").write_text(
        '[scale]\nabi = "stable"\nops = "kpdemo_scale"\n'
        'sources = ["csrc/scale.cu"]\ninclude-dirs = ["csrc"]\n'
    )
    (root / "pyproject.toml").write_text(
        '[project]\nname = "kprival"\nversion = "0.1.0"\n\n[tool.kernelpack]\narch = ["9.0a"]\n'
    )
    _build(root)
    return root


@pytest.fixture
def demo_copy(demo: Path, tmp_path: Path) -> Path:
    """A private copy of the built kpdemo, free to be damaged."""
    return copy_built(demo, tmp_path / "kpdemo")


def _rewrite_record(root: Path, package: str, **toolchain: str) -> None:
    path = root / package / "_kernelpack.json"
    data = json.loads(path.read_text())
    data["toolchain"].update(toolchain)
    path.write_text(json.dumps(data))


def _has_nvidia_driver() -> bool:
    from kernelpack_runtime.device import nvml_probe

    return nvml_probe().problem != "no NVIDIA driver: libnvidia-ml.so.1 not found"


# -- the device ---------------------------------------------------------------------------------


NO_DRIVER = "no CUDA device visible: no NVIDIA driver: libnvidia-ml.so.1 not found"


@pytest.mark.skipif(_has_nvidia_driver(), reason="this machine has an NVIDIA driver")
def test_really_built_package_is_no_device_on_this_gpu_less_machine(demo: Path) -> None:
    assert ask(demo, "kpdemo", ("scale", "addone"), gpu=None) == {
        "scale": [
            "no-device",
            "no CUDA device visible: no NVIDIA driver: libnvidia-ml.so.1 not found",
        ],
        "addone": [
            "no-device",
            "no CUDA device visible: no NVIDIA driver: libnvidia-ml.so.1 not found",
        ],
    }


def test_both_abis_load_and_register_their_ops_on_an_h200(demo: Path) -> None:
    code = (
        FAKE_H200.format(driver="13.0", name="NVIDIA H200")
        + "import json, torch\nfrom kernelpack_runtime import Registry\n"
        "r = Registry('kpdemo')\n"
        "scale, addone = r.load('scale'), r.load('addone')\n"
        "print(json.dumps({'status': r.status(), 'same': r.load('scale') is scale,\n"
        "  'ops': [callable(torch.ops.kpdemo_scale.scale),\n"
        "          callable(torch.ops.kpdemo_addone.addone)],\n"
        "  'cuda_initialised': torch.cuda.is_initialized()}))\n"
    )
    assert python(code, demo) == {
        "status": {"scale": "available", "addone": "available"},
        "same": True,
        "ops": [True, True],
        "cuda_initialised": False,
    }


def test_kernel_the_build_skipped_is_not_built_with_the_builds_reason(demo_copy: Path) -> None:
    _build(demo_copy, "--kernels", "scale")
    code = (
        FAKE_H200.format(driver="13.0", name="NVIDIA H200")
        + "import json\nfrom kernelpack_runtime import Registry\nr = Registry('kpdemo')\n"
        "reason = r.unavailable_reason('addone')\n"
        "print(json.dumps([r.status(), reason.to_json()]))\n"
    )
    status, reason = python(code, demo_copy)
    assert status == {"scale": "available", "addone": "skipped: not in --kernels (scale)"}
    assert reason == {
        "code": "not-built",
        "message": "skipped at build time (not-selected): not in --kernels (scale)",
        "cause": {"code": "not-selected", "message": "not in --kernels (scale)"},
    }


def test_sm_80_device_is_arch_mismatch_for_sm_90a_kernels(demo: Path) -> None:
    result = ask(demo, "kpdemo", ("scale",), gpu="8.0", name="NVIDIA A100")
    assert result == {
        "scale": [
            "arch-mismatch",
            "device 0 (NVIDIA A100) is sm_80; scale was built for sm_90a; "
            'rebuild with arch "8.0" (or its "a"/"f" form) added',
        ]
    }


def test_driver_older_than_the_builds_cuda_is_driver_too_old(demo: Path) -> None:
    result = ask(demo, "kpdemo", ("scale",), driver="12.8")
    assert result["scale"] is not None
    assert result["scale"][0] == "driver-too-old"


def test_disabled_kernel_is_not_loaded(demo: Path) -> None:
    before = "import os\nos.environ['KPDEMO_DISABLE'] = 'addone'\n"
    result = ask(demo, "kpdemo", ("scale", "addone"), before=before)
    assert result["scale"] is None
    assert result["addone"] == [
        "disabled",
        "disabled by KPDEMO_DISABLE=addone; remove 'addone' from it to use the kernel",
    ]


# -- torch --------------------------------------------------------------------------------------


def test_classic_build_recorded_for_another_torch_is_torch_mismatch(demo_copy: Path) -> None:
    _rewrite_record(demo_copy, "kpdemo", torch="2.13.0")
    result = ask(demo_copy, "kpdemo", ("scale", "addone"))
    assert result["scale"] is None  # stable ABI, target 2.10: any newer torch will do
    assert result["addone"] == [
        "torch-mismatch",
        "built for torch 2.13.0, running 2.14.1; "
        "install torch==2.13.0 or rebuild against this torch",
    ]


def test_cpu_only_torch_is_no_cuda_torch(demo: Path, cpu_torch_venv: Path) -> None:
    code = FAKE_H200.format(driver="13.0", name="NVIDIA H200") + textwrap.dedent(
        """
        import json
        import torch
        from kernelpack import KernelUnavailableError
        from kernelpack_runtime import Registry
        registry = Registry("kpdemo")
        try:
            registry.load("scale")
            raised = None
        except KernelUnavailableError as exc:
            raised = [exc.kernel, exc.reason.code]
        print(json.dumps({"torch": torch.__version__, "status": registry.status(),
                          "raised": raised}))
        """
    )
    result = python(code, demo, interpreter=str(cpu_torch_venv))
    assert result["torch"].startswith("2.13.0")
    message = f"torch {result['torch']} is a CPU-only build; install a CUDA 13.0 build of torch"
    assert result["status"] == {
        "scale": f"no-cuda-torch: {message}",
        "addone": f"no-cuda-torch: {message}",
    }
    assert result["raised"] == ["scale", "no-cuda-torch"]


# -- loading ------------------------------------------------------------------------------------


def test_truncated_so_is_load_failed_without_crashing(demo_copy: Path) -> None:
    # dlopen maps a truncated library and dies of SIGBUS touching it: checked beforehand.
    library = demo_copy / "kpdemo" / "scale" / "_C.abi3.so"
    with library.open("r+b") as fh:
        fh.truncate(4096)
    result = ask(demo_copy, "kpdemo", ("scale", "addone"))
    assert result["addone"] is None
    assert result["scale"] is not None
    code, message = result["scale"]
    assert code == "load-failed"
    assert message.startswith(f"{library} is truncated (4096 bytes; its ELF headers need ")
    assert message.endswith(
        "built for torch 2.14.1 (CUDA 13.0), running torch 2.14.1+cu130 (CUDA 13.0)"
    )


def test_corrupted_so_is_load_failed_with_the_dlopen_error(demo_copy: Path) -> None:
    library = next((demo_copy / "kpdemo" / "addone").glob("_C*.so"))
    data = bytearray(library.read_bytes())
    data[:4] = b"\0ELF"
    library.write_bytes(bytes(data))
    # The recorded digest catches it before dlopen; unchecked, dlopen's own error is the reason.
    verified = ask(demo_copy, "kpdemo", ("addone",))
    assert verified["addone"] is not None
    assert verified["addone"][0] == "library-modified"
    assert str(library) in verified["addone"][1]
    unverified = "import os\nos.environ['KERNELPACK_VERIFY'] = '0'\n"
    result = ask(demo_copy, "kpdemo", ("addone",), before=unverified)
    assert result["addone"] is not None
    assert result["addone"][0] == "load-failed"
    assert f"{library}: invalid ELF header; built for torch 2.14.1" in result["addone"][1]


def test_missing_so_is_load_failed(demo_copy: Path) -> None:
    (demo_copy / "kpdemo" / "scale" / "_C.abi3.so").unlink()
    result = ask(demo_copy, "kpdemo", ("scale",))
    assert result["scale"] is not None
    assert result["scale"][0] == "load-failed"
    assert "_C.abi3.so is missing" in result["scale"][1]


def test_second_library_in_one_namespace_is_namespace_collision(demo: Path, rival: Path) -> None:
    code = FAKE_H200.format(driver="13.0", name="NVIDIA H200") + textwrap.dedent(
        """
        import json, sys
        from kernelpack_runtime import Registry
        first = Registry("kpdemo").unavailable_reason("scale")
        second = Registry("kprival").unavailable_reason("scale")
        print(json.dumps({"first": first and first.code, "second": [second.code, second.message],
                          "rival_loaded": "kprival.scale" in sys.modules}))
        """
    )
    result = python(code, demo, rival)
    assert result["first"] is None
    assert result["rival_loaded"] is False
    code_, message = result["second"]
    assert code_ == "namespace-collision"
    assert message.startswith(
        "torch.ops.kpdemo_scale already holds kpdemo_scale::scale from another library "
        "(registered at "
    )


def test_importing_the_rival_directly_aborts_the_process(demo: Path, rival: Path) -> None:
    # Why the registry checks the namespace before the dlopen: torch's registration throws
    # from a static initialiser, and nothing can catch that.
    environ = _clean_env(PYTHONPATH=os.pathsep.join([str(demo), str(rival), str(SRC)]))
    out = subprocess.run(
        [sys.executable, "-c", "import kpdemo.scale, kprival.scale"],
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == -6  # SIGABRT
    assert "with the same name and overload name multiple times" in out.stderr


def test_the_first_library_loaded_owns_the_namespace(demo: Path, rival: Path) -> None:
    result = python(
        FAKE_H200.format(driver="13.0", name="NVIDIA H200")
        + "import json\nfrom kernelpack_runtime import Registry\n"
        "print(json.dumps([Registry(p).status()['scale'][:19] for p in ('kprival', 'kpdemo')]))\n",
        demo,
        rival,
    )
    assert result == ["available", "namespace-collision"]


# -- the command line ---------------------------------------------------------------------------


@pytest.mark.skipif(_has_nvidia_driver(), reason="this machine has an NVIDIA driver")
def test_status_command_reports_the_really_built_package(demo: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "kernelpack", "status", str(demo / "kpdemo"), "--json"],
        env=_clean_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(out.stdout)
    assert report["package"] == "kpdemo"
    assert report["version"] == "0.3.0+cu130torch2.14.1"
    assert report["kernels"]["scale"]["archs"] == ["9.0a"]
    assert report["kernels"]["scale"]["abi"] == "stable"
    assert report["kernels"]["addone"]["abi"] == "torch"
    assert {k["reason"]["code"] for k in report["kernels"].values()} == {"no-device"}


# -- where a library's ops really go (kernel-builder's stock registration) -------------------------

#: kernel-builder's stock binding: ops registered in `TORCH_EXTENSION_NAME`, which kernelpack
#: defines as `_C` (the module name), not in the kernel's own namespace.
STOCK_BINDING = """\
#include <torch/csrc/stable/library.h>

#define STABLE_TORCH_LIBRARY_EXPAND(NAME, MODULE) STABLE_TORCH_LIBRARY(NAME, MODULE)

STABLE_TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) { ops.def("relu(Tensor x) -> Tensor"); }
"""


def _stock_package(root: Path, name: str) -> Path:
    (root / name / "relu" / "csrc").mkdir(parents=True)
    (root / name / "__init__.py").write_text('"""Registers its ops the kernel-builder way."""\n')
    (root / name / "relu" / "__init__.py").write_text("from . import _C  # noqa: F401\n")
    (root / name / "relu" / "csrc" / "relu.cu").write_text(STOCK_BINDING)
    (root / name / "kernels.toml").write_text(
        '[relu]\nabi = "stable"\nsources = ["csrc/relu.cu"]\n'
    )
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "0.1.0"\n\n[tool.kernelpack]\narch = ["9.0a"]\n'
    )
    _build(root)
    return root


@pytest.fixture(scope="session")
@compiles("two packages registering torch.ops._C")
def stock_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two packages whose `relu` libraries both register `torch.ops._C` (built for real)."""
    base = tmp_path_factory.mktemp("stock")
    return _stock_package(base / "one", "kpcone"), _stock_package(base / "two", "kpctwo")


def test_a_library_registering_in_another_namespace_is_load_failed_naming_it(
    stock_pair: tuple[Path, Path],
) -> None:
    one, _ = stock_pair
    result = ask(one, "kpcone", ("relu",))
    assert result["relu"] is not None
    code, message = result["relu"]
    assert code == "load-failed"
    assert message.startswith(
        "kpcone.relu: its library registered its ops in torch.ops._C (_C::relu), not in "
        "torch.ops.kpcone_relu, the namespace the build record names"
    )


def test_importing_two_stock_libraries_directly_aborts_the_process(
    stock_pair: tuple[Path, Path],
) -> None:
    # What the registry prevents: both libraries own `_C`; the second one's static
    # initialiser throws during dlopen.
    environ = _clean_env(PYTHONPATH=os.pathsep.join([*(str(p) for p in stock_pair), str(SRC)]))
    out = subprocess.run(
        [sys.executable, "-c", "import torch, kpcone.relu, kpctwo.relu"],
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode < 0, out.stderr[-2000:]


@pytest.mark.parametrize("recorded", [True, False], ids=["namespace-recorded", "none-recorded"])
def test_a_second_owner_of_the_c_namespace_is_a_collision_before_it_loads(
    stock_pair: tuple[Path, Path], tmp_path: Path, recorded: bool
) -> None:
    one, two = stock_pair
    if not recorded:
        copy = tmp_path / "two"
        shutil.copytree(two, copy, symlinks=True)
        path = copy / "kpctwo" / "_kernelpack.json"
        data = json.loads(path.read_text())
        data["kernels"]["relu"]["namespace"] = None
        path.write_text(json.dumps(data))
        two = copy
    code = FAKE_H200.format(driver="13.0", name="NVIDIA H200") + textwrap.dedent(
        """
        import json, sys
        from kernelpack_runtime import Registry
        first = Registry("kpcone").unavailable_reason("relu")
        second = Registry("kpctwo").unavailable_reason("relu")
        print(json.dumps({"first": first.code, "second": [second.code, second.message],
                          "loaded": "kpctwo.relu._C" in sys.modules}))
        """
    )
    result = python(code, one, two)
    assert result["first"] == "load-failed"
    assert result["loaded"] is False
    code_, message = result["second"]
    assert code_ == "namespace-collision"
    assert message.startswith("torch.ops._C already holds _C::relu from another library")
