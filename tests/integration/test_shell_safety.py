"""No manifest value reaches nvcc's own shell, measured with the real nvcc.

nvcc runs its host compiler through `sh -c`: a `-D` value holding `$(…)` runs a command even
when kernelpack passes it as one argument with no shell of its own. `check` and `build`
refuse such a manifest before nvcc runs; every character they allow reaches the compiler
intact.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import toolkits

from kernelpack.project._shell import unsafe

pytestmark = pytest.mark.integration

NVCC = toolkits.nvcc()
KERNELPACK = Path(sys.executable).parent / "kernelpack"
needs_nvcc = pytest.mark.skipif(NVCC is None, reason=toolkits.NO_TOOLKIT)


def _nvcc_preprocess(tmp_path: Path, *flags: str, source: str = "V\n") -> str:
    """`nvcc -E` of a one-line source, run with no shell of ours (argv as a list)."""
    assert NVCC is not None
    (tmp_path / "v.cu").write_text(source)
    result = subprocess.run(
        [NVCC, "-E", *flags, "v.cu"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@needs_nvcc
def test_nvcc_runs_a_define_value_through_its_own_shell(tmp_path: Path) -> None:
    # Why check refuses "$": kernelpack's own quoting cannot protect the value from nvcc.
    _nvcc_preprocess(tmp_path, "-DX=$(touch pwned)")
    assert (tmp_path / "pwned").exists()


@needs_nvcc
def test_every_character_check_allows_in_a_define_reaches_the_compiler(tmp_path: Path) -> None:
    value = "a b;c|d&e<f>g(h)i#j!k~l*m?n[o]p{q}r=s:t%u^v@w+x-y/z."
    assert unsafe(value, "define") is None
    out = _nvcc_preprocess(tmp_path, f"-DV={value}")
    assert value.replace(" ", "") in out.replace(" ", "")
    assert not any(p.name not in {"v.cu"} for p in tmp_path.iterdir())


@needs_nvcc
def test_every_character_check_allows_in_a_flag_reaches_the_host_compiler(
    tmp_path: Path,
) -> None:
    value = "a:b/c@d%e^f+g-h=i.j_k"
    assert unsafe(f"-DW={value}", "flag") is None
    out = _nvcc_preprocess(tmp_path, "-Xcompiler", f"-DW={value}", source="W\n")
    assert value in out.replace(" ", "")


@needs_nvcc
def test_every_character_check_allows_in_a_path_reaches_the_compiler(tmp_path: Path) -> None:
    folder = "inc-1_2+3@4=5%6~7^8.d"
    assert unsafe(folder, "path") is None
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "h.h").write_text("FOUND_IT\n")
    out = _nvcc_preprocess(tmp_path, f"-I{folder}", source='#include "h.h"\n')
    assert "FOUND_IT" in out


MANIFEST = """\
[k]
sources = ["csrc/k.cu"]
arch = "9.0a"
{extra}
"""

HOSTILE = {
    "define": 'defines = { X = "$(touch pwned)" }',
    "define-backquote": 'defines = { X = "`touch pwned`" }',
    "nvcc-flag": 'nvcc-flags = ["-DX=$(touch pwned)"]',
    "xcompiler": 'nvcc-flags = ["-Xcompiler", "-DY=$(touch pwned)"]',
    "xcompiler-semicolon": 'nvcc-flags = ["-Xcompiler", "-O2;touch pwned"]',
    "source-name": 'sources = ["csrc/k.cu", "csrc/`touch pwned`.cu"]',
}


@pytest.fixture
def hostile_project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "pkg" / "k" / "csrc").mkdir(parents=True)
    (root / "pkg" / "k" / "csrc" / "k.cu").write_text("__global__ void k() {}\n")
    (root / "pkg" / "k" / "csrc" / "`touch pwned`.cu").write_text("// x\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text(
        '[project]\nname = "pkg"\nversion = "0.1.0"\n\n[tool.kernelpack]\n'
    )
    return root


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@needs_nvcc
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_check_and_build_refuse_a_manifest_that_would_run_a_command(
    hostile_project: Path, case: str
) -> None:
    extra = HOSTILE[case]
    text = MANIFEST.format(extra=extra)
    if extra.startswith("sources"):
        text = text.replace('sources = ["csrc/k.cu"]\n', "")
    (hostile_project / "pkg" / "kernels.toml").write_text(text)
    before = _files(hostile_project.parent)
    for verb in (["check"], ["build", "--inplace"], ["build", "--wheel-dir", "dist"]):
        result = subprocess.run(
            [str(KERNELPACK), *verb, str(hostile_project)],
            cwd=hostile_project,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "KERNELPACK_LAUNCHER": "none"},
            check=False,
        )
        assert result.returncode == 2, (verb, result.stdout, result.stderr)
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert "sh -c" in result.stderr
        assert "Traceback" not in result.stderr
    assert _files(hostile_project.parent) == before  # no pwned, no build folder, no wheel
