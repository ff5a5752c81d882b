"""`kernelpack export --hub`, loaded by Hugging Face's real `kernels` package (no stand-in).

Real compiles with the host C++ compiler (CPU kernels, stable-ABI headers: a few seconds
each): the `kpcpu` test package (kernels.toml) and kernel-builder's
`relu-torch-stable-abi` example (build.toml; its CPU kernel). Each export is loaded with
`kernels.get_local_kernel` / `LOCAL_KERNELS`, its digests are checked with `kernels`' own
`Digest.hash_variant`, two exports load side by side, and the example's own tests run, with
`get_kernel` resolved to the export, in a venv holding a CPU-only torch (there `kernels`
picks the CPU variant by itself).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelpack.cli import main

pytestmark = pytest.mark.integration

kernels = pytest.importorskip("kernels")
from kernels._rust import Backend, Digest, DigestAlgorithm, Metadata  # noqa: E402

HERE = Path(__file__).resolve().parent
KPCPU = HERE / "packages" / "kpcpu"
RELU_STABLE = HERE.parent / "foreign" / "hf-kernels" / "examples" / "relu-torch-stable-abi"
STABLE_CPU = f"torch-stable-abi210-cpu-{os.uname().machine}-linux"
RELU_CPU = f"torch-stable-abi211-cpu-{os.uname().machine}-linux"


def _env(ccache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELPACK_", "LOCAL_"))}
    env.update(CCACHE_DIR=str(ccache), HF_HUB_OFFLINE="1")
    return env


def _export(source: Path, base: Path, ccache: Path, **env: str) -> Path:
    root = base / source.name
    if not root.exists():
        shutil.copytree(source, root)
    out = base / "hub"
    code = subprocess.run(
        [sys.executable, "-m", "kernelpack", "export", "--hub", str(out), str(root)],
        env={**_env(ccache), **env},
        capture_output=True,
        text=True,
    )
    assert code.returncode == 0, code.stderr[-2000:]
    return out


@pytest.fixture(scope="session")
def ccache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "hub-ccache"


@pytest.fixture(scope="session")
def kpcpu_hub(tmp_path_factory: pytest.TempPathFactory, ccache: Path) -> Path:
    return _export(KPCPU, tmp_path_factory.mktemp("kpcpu"), ccache)


@pytest.fixture(scope="session")
def relu_hub(tmp_path_factory: pytest.TempPathFactory, ccache: Path) -> Path:
    # The CPU library only: the CUDA one would need nvcc's minutes and cannot run here.
    return _export(
        RELU_STABLE, tmp_path_factory.mktemp("relu"), ccache, KERNELPACK_KERNELS="_ops_cpu"
    )


def _run(code: str, env: dict[str, str], python: str = sys.executable) -> dict[str, object]:
    done = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _python_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELPACK_", "LOCAL_"))}
    env["HF_HUB_OFFLINE"] = "1"
    return env


@pytest.mark.parametrize(("hub", "variant"), [("kpcpu_hub", STABLE_CPU), ("relu_hub", RELU_CPU)])
def test_export_writes_the_variant_with_metadata_kernels_validates(
    hub: str, variant: str, request: pytest.FixtureRequest
) -> None:
    out: Path = request.getfixturevalue(hub)
    assert [p.name for p in (out / "build").iterdir()] == [variant]
    folder = out / "build" / variant
    metadata = Metadata.read_from_file(folder / "metadata.json")  # kernels' own parser
    assert metadata.id.isidentifier() and metadata.id.startswith("_")
    assert metadata.backend.backend_type == Backend.CPU
    assert metadata.license in ("MIT", "Apache-2.0")
    digest = metadata.digest
    assert digest is not None
    computed = Digest.hash_variant(DigestAlgorithm.SHA256, folder)
    digest.validate(computed)  # raises on any missing, unknown or changed file
    assert digest.files == computed.files
    python_name = metadata.name.python_name
    assert (folder / python_name / "__init__.py").is_file()  # the compat folder
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]


def test_kernels_toml_export_loads_with_get_local_kernel_and_its_cpu_op_runs(
    kpcpu_hub: Path,
) -> None:
    code = f"""
import json, torch, kernels
from pathlib import Path
m = kernels.get_local_kernel(Path({str(kpcpu_hub)!r}), backend="cpu")
negate = m.load("negate")
x = torch.arange(4.0)
negate.negate_(x)
print(json.dumps({{"name": m.__name__, "status": m.status(), "x": x.tolist(),
                  "ns": negate.NAMESPACE}}))
"""
    result = _run(code, _python_env())
    assert result["status"] == {"negate": "available"}
    assert result["x"] == [-0.0, -1.0, -2.0, -3.0]
    assert result["ns"] == result["name"]  # ops under torch.ops.<id>


def test_build_toml_export_loads_through_local_kernels_and_relu_runs(relu_hub: Path) -> None:
    code = """
import json, torch, kernels
relu = kernels.get_kernel("kernels-test/relu-torch-stable-abi", version=1, backend="cpu")
x = torch.randn(1000)
print(json.dumps({"same": bool(torch.equal(relu.relu(x), torch.relu(x))),
                  "name": relu.__name__, "ops": str(relu.ops)}))
"""
    env = {**_python_env(), "LOCAL_KERNELS": f"kernels-test/relu-torch-stable-abi={relu_hub}"}
    result = _run(code, env)
    assert result["same"] is True
    assert f"torch.ops.{result['name']}" in str(result["ops"])


def test_two_exports_of_different_sources_load_side_by_side(
    kpcpu_hub: Path, tmp_path: Path, ccache: Path
) -> None:
    source = tmp_path / "kpcpu"
    shutil.copytree(KPCPU, source)
    cpp = source / "kpcpu" / "negate" / "csrc" / "negate.cpp"
    cpp.write_text(cpp.read_text() + "\n// a later version\n")
    second = _export(source, tmp_path, ccache)
    code = f"""
import json, torch, kernels
from pathlib import Path
a = kernels.get_local_kernel(Path({str(kpcpu_hub)!r}), backend="cpu")
b = kernels.get_local_kernel(Path({str(second)!r}), backend="cpu")
x, y = torch.ones(2), torch.ones(2)
a.load("negate").negate_(x)
b.load("negate").negate_(y)
print(json.dumps({{"ids": [a.__name__, b.__name__], "x": x.tolist(), "y": y.tolist()}}))
"""
    result = _run(code, _python_env())
    ids = result["ids"]
    assert isinstance(ids, list) and len(set(ids)) == 2
    assert result["x"] == result["y"] == [-1.0, -1.0]


def test_kernel_builder_examples_own_tests_pass_against_the_export(
    relu_hub: Path, cpu_torch_venv: Path, tmp_path: Path
) -> None:
    tests = tmp_path / "tests"
    shutil.copytree(RELU_STABLE / "tests", tests)
    env = {
        **_python_env(),
        "LOCAL_KERNELS": f"kernels-test/relu-torch-stable-abi={relu_hub}",
        "PYTHONPATH": "",
    }
    done = subprocess.run(
        [cpu_torch_venv, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "3 passed" in done.stdout


# -- bad input: one line, exit 2, nothing written ---------------------------------------------


def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    # "kernelpack export: using …" (which file was found), then the one error line
    errors = [line for line in lines if "error" in line]
    assert len(errors) == 1 and not [line for line in lines if "Traceback" in line]
    return errors[0]


def test_an_export_folder_with_other_content_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "README.md").write_text("mine\n")
    err = _one_line_exit_2(["export", "--hub", str(out), str(KPCPU)], capsys)
    assert "exists with other content (README.md)" in err
    assert [p.name for p in out.iterdir()] == ["README.md"]


def test_a_package_name_that_is_no_identifier_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "bad-name"
    shutil.copytree(KPCPU / "kpcpu", root / "kp-cpu")
    out = tmp_path / "out"
    err = _one_line_exit_2(["export", "--hub", str(out), str(root / "kp-cpu")], capsys)
    assert "not a Python identifier" in err
    assert not out.exists()


def test_a_variant_this_machine_cannot_build_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "kpcpu"
    shutil.copytree(KPCPU, root)
    manifest = root / "kpcpu" / "kernels.toml"
    other = "aarch64" if os.uname().machine == "x86_64" else "x86_64"
    manifest.write_text(manifest.read_text() + f'platforms = ["{other}"]\n')
    out = tmp_path / "out"
    err = _one_line_exit_2(["export", "--hub", str(out), str(root)], capsys)
    assert "no Hub variant can be built on this machine" in err and "platform-excluded" in err
    assert not out.exists()
