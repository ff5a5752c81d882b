"""benchmarks/corpus.py on a checkout of two fixture projects (no compiler runs).

`gamma` is an edition-5 project with a CUDA kernel and a Metal one (check only: the Metal
kernel is a skip with its reason); `beta` is a v4 `[torch-noarch]` project whose own tests
load it both ways kernels-community's tests do: `kernels.get_kernel` (resolved to the Hub
export through `LOCAL_KERNELS`) and `import beta` (the installed wheel).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from benchmark_modules import import_benchmark

pytestmark = pytest.mark.integration

pytest.importorskip("kernels")
pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus.py"

GAMMA = {
    "build.toml": """\
        [general]
        name = "gamma"
        version = 1
        edition = 5
        license = "MIT"
        backends = ["cuda", "metal"]

        [torch]
        src = ["torch-ext/torch_binding.cpp"]

        [kernel.gamma]
        backend = "cuda"
        depends = ["torch"]
        src = ["gamma_cuda/gamma.cu"]

        [kernel.gamma_metal]
        backend = "metal"
        depends = ["torch"]
        src = ["gamma_metal/gamma.mm"]
        """,
    "torch-ext/torch_binding.cpp": "// binding\n",
    "gamma_cuda/gamma.cu": "// kernel\n",
    "gamma_metal/gamma.mm": "// kernel\n",
    "torch-ext/gamma/__init__.py": "",
}

BETA = {
    "build.toml": """\
        [general]
        name = "beta"
        version = 1
        license = "Apache-2.0"
        backends = ["cpu", "cuda"]

        [torch-noarch]
        """,
    "torch-ext/beta/__init__.py": "from .ops import twice\n\n__all__ = ['twice']\n",
    "torch-ext/beta/ops.py": "def twice(x):\n    return x * 2\n",
    "tests/__init__.py": "",
    "tests/test_hub.py": """\
        import kernels
        import torch

        beta = kernels.get_kernel("kernels-community/beta", version=1)


        def test_twice_through_get_kernel():
            assert beta.twice(torch.ones(2)).tolist() == [2.0, 2.0]
        """,
    "tests/test_import.py": """\
        import pytest

        import beta


        def test_twice_of_the_installed_wheel():
            assert beta.twice(3) == 6


        @pytest.mark.skip(reason="a skip is counted")
        def test_skipped():
            pass
        """,
}


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus") / "checkout"
    _write(root / "gamma", GAMMA)
    _write(root / "beta", BETA)
    (root / "README.md").write_text("not a project\n")
    return root


def _corpus(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def test_check_part_records_format_backends_and_skips_of_every_project(
    checkout: Path, tmp_path: Path
) -> None:
    out = tmp_path / "corpus-here.json"
    _corpus(str(checkout), "--out", str(out), "--work", str(tmp_path / "work"))
    projects = json.loads(out.read_text())["projects"]
    assert sorted(projects) == ["beta", "gamma"]
    gamma, beta = projects["gamma"], projects["beta"]
    assert gamma["check"]["exit"] == 0 and beta["check"]["exit"] == 0
    assert (gamma["format"], beta["format"]) == ("edition 5", "v4")
    assert gamma["backends"] == ["cuda", "metal"] and beta["noarch"] is True
    assert [s.split(":")[0] for s in gamma["skips"]] == ["gamma_metal"]
    table = out.with_suffix(".md").read_text()
    assert "| gamma | edition 5 | cuda, metal | ok |" in table
    assert "metal (gamma_metal)" in table


def test_build_and_test_run_the_projects_own_tests_both_ways(
    checkout: Path, tmp_path: Path
) -> None:
    out = tmp_path / "corpus-here.json"
    work = tmp_path / "work"
    _corpus(str(checkout), "--test", "--only", "beta", "--out", str(out), "--work", str(work))
    beta = json.loads(out.read_text())["projects"]["beta"]
    assert beta["build"]["status"] == "built"
    assert beta["build"]["hub"]["variants"] == ["torch-cpu", "torch-cuda"]
    assert beta["test"]["mode"] == "get_kernel"
    assert (beta["test"]["passed"], beta["test"]["failed"], beta["test"]["skipped"]) == (2, 0, 1)


def test_a_later_step_adds_to_the_results_and_markdown_joins_runs(
    checkout: Path, tmp_path: Path
) -> None:
    out = tmp_path / "corpus-here.json"
    work = str(tmp_path / "work")
    _corpus(str(checkout), "--only", "gamma", "--out", str(out), "--work", work)
    _corpus(str(checkout), "--only", "beta", "--out", str(out), "--work", work)
    assert sorted(json.loads(out.read_text())["projects"]) == ["beta", "gamma"]
    other = tmp_path / "corpus-there.json"
    other.write_text(out.read_text())
    doc = tmp_path / "doc.md"
    doc.write_text(
        "intro\n<!-- corpus table: made\nby corpus.py -->\nold\n<!-- end corpus table -->\n"
    )
    table = _corpus("--markdown", str(out), str(other), "--into", str(doc)).stdout
    assert "build (here)" in table and "build (there)" in table
    assert table.count("| beta |") == 1
    text = doc.read_text()
    assert text.startswith("intro\n<!-- corpus table: made\nby corpus.py -->\n- here:")
    assert "old" not in text and text.endswith(table + "<!-- end corpus table -->\n")


def test_only_keeps_its_order_and_dependency_folders_reach_the_steps(
    checkout: Path, tmp_path: Path
) -> None:
    # A bounded run lists the heavy projects last; a pinned release's headers given as
    # KERNELPACK_<NAME>_DIR (a machine without network) must reach kernelpack's steps, while
    # other KERNELPACK_ settings of the caller do not.
    corpus = import_benchmark("corpus")
    chosen = corpus.projects(checkout, ["gamma", "beta"], [])
    assert [p.name for p in chosen] == ["gamma", "beta"]
    assert [p.name for p in corpus.projects(checkout, [], [])] == ["beta", "gamma"]
    env = corpus._environment(
        {
            "KERNELPACK_CUTLASS_4_0_DIR": "/headers",
            "KERNELPACK_KERNELS": "x",
            "LOCAL_KERNELS": "a=b",
            "PATH": "/bin",
        }
    )
    assert env == {"KERNELPACK_CUTLASS_4_0_DIR": "/headers", "PATH": "/bin"}
