"""The release channels, installed for real: pip and uv against `kernelpack index`'s site on a
loopback HTTP server, into fresh venvs that hold torch (tests/venvs.py).

Two releases are indexed: examples/llm_ops as built with the real nvcc (one stable-ABI
wheel), and kpsyn, small synthetic kernel wheels (tests/release_support.py) with variants
that fit the installed torch 2.14.1 and one that does not (`+cu130torch2.15.0`). The
dependencies (kernelpack-runtime built from this checkout, packaging) are served as the main
index, so each install line is the one users type: `--index-url <main>` plus the channel.
uv's NVIDIA detection is steered with its own `NV_VARIANT_PROVIDER_FORCE_*` variables where a
test needs a GPU this machine lacks (the device probe is the edge that is faked).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from release_support import kernel_wheel
from venvs import pip, pip_env, torch_venv

from kernelpack.cli import main
from kernelpack.release.simple import IndexFile, write_project, write_root

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]
UV = Path(sys.executable).with_name("uv")
CLASSIC = "cp311-cp311-manylinux_2_34_x86_64"
PIP_DOWNLOAD = (sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d")


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, llm_ops_wheel: Path
) -> Iterator[tuple[str, Path]]:
    """(base URL, folder) of a loopback server holding `deps/`, `llm/` and `syn/`."""
    root = tmp_path_factory.mktemp("served")
    _deps(root / "deps")
    assert main(["index", str(llm_ops_wheel), "--out", str(root / "llm")]) == 0
    dist = root / "kpsyn-dist"
    kernel_wheel(dist, "cu130stable2.10")
    kernel_wheel(dist, "cu130torch2.14.1", tag=CLASSIC)
    kernel_wheel(dist, "cu130torch2.15.0", tag=CLASSIC)
    kernel_wheel(dist, "cu128stable2.10")
    assert (
        main(["index", str(dist), "--out", str(root / "syn"), "--default", "cu130stable2.10"]) == 0
    )
    handler = functools.partial(_Quiet, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _deps(folder: Path) -> None:
    """The main index: kernelpack-runtime (built from this checkout) and packaging."""
    wheels = folder / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, REPO / "src"],
        check=True,
        capture_output=True,
    )
    version = importlib.metadata.version("packaging")
    subprocess.run(
        [*PIP_DOWNLOAD, wheels, f"packaging<={version}"],
        check=True,
        capture_output=True,
    )
    projects = []
    for wheel in wheels.glob("*.whl"):
        project = wheel.name.split("-")[0].replace("_", "-").lower()
        page = folder / "simple" / project
        page.mkdir(parents=True)
        shutil.copyfile(wheel, page / wheel.name)
        write_project(page, project, [IndexFile(wheel.name)])
        projects.append(project)
    write_root(folder / "simple", projects)


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A fresh venv holding torch 2.14.1 (CUDA 13.0) and what it requires; its python."""
    return torch_venv(tmp_path / "venv")


def _uv(python: Path, *args: str, env: dict[str, str] | None = None) -> None:
    result = subprocess.run(
        [UV, "pip", "install", "--no-cache", "--python", str(python), *args],
        capture_output=True,
        text=True,
        env={**pip_env(), **(env or {})},
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _install(installer: str, python: Path, *args: str) -> None:
    if installer == "pip":
        pip(python, "install", "-q", *args)
    else:
        _uv(python, *args)


def _version(python: Path, name: str) -> str:
    return subprocess.run(
        [python, "-c", f"import importlib.metadata as m; print(m.version({name!r}))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _variant(python: Path, name: str) -> str | None:
    code = (
        "import json, importlib.metadata as m;"
        f"t = m.distribution({name!r}).read_text('variant.json');"
        "print(json.dumps(t and list(json.loads(t)['variants'])[0]))"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def _status(python: Path, package: str, cwd: Path) -> dict[str, object]:
    result = subprocess.run(
        [python, "-m", "kernelpack_runtime", "status", package, "--json"],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_cuda_index_gives_the_build_that_fits_the_installed_torch(
    served: tuple[str, Path], venv: Path, installer: str
) -> None:
    url, _ = served
    _install(
        installer,
        venv,
        "--index-url",
        f"{url}/deps/simple",
        "--extra-index-url",
        f"{url}/syn/cu130/simple",
        "kpsyn",
    )
    # +cu130torch2.15.0 is newer but needs torch 2.15.0; 2.14.1 is installed
    assert _version(venv, "kpsyn") == "0.2.0+cu130torch2.14.1"
    assert pip(venv, "check").returncode == 0


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_llm_ops_installs_from_its_cuda_index_and_imports(
    served: tuple[str, Path], venv: Path, installer: str, tmp_path: Path
) -> None:
    url, _ = served
    _install(
        installer,
        venv,
        "--index-url",
        f"{url}/deps/simple",
        "--extra-index-url",
        f"{url}/llm/cu130/simple",
        "llm_ops",
    )
    assert _version(venv, "llm_ops") == "0.1.0+cu130stable2.10"
    assert pip(venv, "check").returncode == 0
    report = _status(venv, "llm_ops", tmp_path)
    assert report["version"] == "0.1.0+cu130stable2.10"
    assert {k: v["reason"]["code"] for k, v in report["kernels"].items()} == {  # type: ignore[attr-defined]
        "rmsnorm": "no-device",
        "silu_mul": "no-device",
    }


def test_pypi_files_install_with_the_plain_version(served: tuple[str, Path], venv: Path) -> None:
    url, root = served
    pip(
        venv,
        "install",
        "-q",
        "--index-url",
        f"{url}/deps/simple",
        "--find-links",
        root / "llm" / "pypi",
        "llm_ops",
    )
    assert _version(venv, "llm_ops") == "0.1.0"
    assert pip(venv, "check").returncode == 0


def test_uv_variants_install_the_null_variant_on_a_machine_without_a_gpu(
    served: tuple[str, Path], venv: Path, tmp_path: Path
) -> None:
    url, _ = served
    _uv(
        venv,
        "--preview-features",
        "wheel-variants",
        "--index-url",
        f"{url}/deps/simple",
        "--extra-index-url",
        f"{url}/llm/variants/simple",
        "llm_ops",
    )
    assert _version(venv, "llm_ops") == "0.1.0"
    assert _variant(venv, "llm_ops") == "null"
    report = _status(venv, "llm_ops", tmp_path)
    reasons = {k: v["reason"] for k, v in report["kernels"].items()}  # type: ignore[attr-defined]
    assert {r["code"] for r in reasons.values()} == {"not-built"}
    assert all("null wheel variant" in r["message"] for r in reasons.values())
    assert pip(venv, "check").returncode == 0


@pytest.mark.parametrize(
    ("sm", "driver", "label"),
    [
        ("9.0", "13.0", "cu130stable2.10"),
        ("9.0", "12.9", "cu128stable2.10"),
        ("8.0", "13.0", "null"),
    ],
)
def test_uv_variants_follow_the_detected_gpu_and_driver(
    served: tuple[str, Path], venv: Path, sm: str, driver: str, label: str
) -> None:
    url, _ = served
    force = {
        "NV_VARIANT_PROVIDER_FORCE_SM_ARCH": sm,
        "NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION": driver,
    }
    _uv(
        venv,
        "--preview-features",
        "wheel-variants",
        "--index-url",
        f"{url}/deps/simple",
        "--extra-index-url",
        f"{url}/syn/variants/simple",
        "kpsyn",
        env=force,
    )
    assert _variant(venv, "kpsyn") == label
    assert pip(venv, "check").returncode == 0


def test_pip_on_the_variant_index_gets_the_plain_default_wheel(
    served: tuple[str, Path], venv: Path
) -> None:
    url, _ = served
    pip(
        venv,
        "install",
        "-q",
        "--index-url",
        f"{url}/deps/simple",
        "--extra-index-url",
        f"{url}/syn/variants/simple",
        "kpsyn",
    )
    assert _version(venv, "kpsyn") == "0.2.0"
    assert _variant(venv, "kpsyn") is None
