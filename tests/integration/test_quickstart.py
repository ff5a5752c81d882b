"""docs/quickstart.md, run as written: every line of its fenced `bash` blocks, in order, in
one shell, from an empty folder (one real compile, then the edited file's).

The shell's `python` and `pip` are a fresh venv's that sees this interpreter's packages
(torch, kernelpack) through a `.pth`, so the editable install and the wheel go into that venv
alone; compiles go through the session's ccache.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from buildlog import compiles
from venvs import overlay_venv

pytestmark = pytest.mark.integration

QUICKSTART = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"
BLOCK = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)
# Marks each block's start in the shell's output, so the output can be told apart per block.
MARK = "@@quickstart block {}@@"


def _blocks() -> list[str]:
    return BLOCK.findall(QUICKSTART.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
@compiles("the docs/quickstart.md walk-through")
def walkthrough(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    """The output of each block, and the folder the walk-through ran in."""
    if not _blocks():
        pytest.fail(f"{QUICKSTART}: no bash blocks")
    base = tmp_path_factory.mktemp("quickstart")
    venv = overlay_venv(base / "venv")
    work = base / "work"
    work.mkdir()
    script = ["set -euo pipefail"]
    for index, block in enumerate(_blocks()):
        script.append(f"echo {shlex.quote(MARK.format(index))} >&2")
        script.append(block)
    path = [str(venv / "bin"), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
    drop = ("KERNELPACK_", "MY_OPS_", "VIRTUAL_ENV", "MAX_JOBS", "TORCH_CUDA_ARCH_LIST")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(
        PATH=os.pathsep.join(path),
        VIRTUAL_ENV=str(venv),
        CCACHE_DIR=str(tmp_path_factory.getbasetemp() / "kp-ccache"),
        PIP_NO_INPUT="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:]
    parts = re.split(r"^@@quickstart block \d+@@\n", done.stdout, flags=re.MULTILINE)
    return parts[1:], work


def _block(walkthrough: tuple[list[str], Path], command: str) -> str:
    """The output of the block that holds `command`."""
    outputs, _ = walkthrough
    for block, output in zip(_blocks(), outputs, strict=True):
        if command in block:
            return output
    raise AssertionError(f"docs/quickstart.md runs no {command!r}")


def test_every_documented_command_runs(walkthrough: tuple[list[str], Path]) -> None:
    outputs, _ = walkthrough
    assert len(outputs) == len(_blocks())


def test_new_writes_the_package_with_its_gitignore_and_pinned_backend(
    walkthrough: tuple[list[str], Path],
) -> None:
    _, work = walkthrough
    root = work / "my-ops"
    assert (root / ".gitignore").is_file()
    assert 'requires = ["kernelpack>=' in (root / "pyproject.toml").read_text()


def test_build_names_the_toolkit_and_launcher_first_and_links_the_database_for_clangd(
    walkthrough: tuple[list[str], Path],
) -> None:
    output = _block(walkthrough, "kernelpack build --inplace")
    first, second = output.splitlines()[:2]
    assert first.startswith("kernelpack: CUDA toolkit ")
    assert second.startswith(("kernelpack: launcher ", "kernelpack: no compiler"))
    assert "for clangd" in output
    link = walkthrough[1] / "my-ops" / "build" / "compile_commands.json"
    assert os.readlink(link) == "kernelpack/compile_commands.json"


def test_the_edited_kernel_is_rebuilt_by_the_import_with_two_lines(
    walkthrough: tuple[list[str], Path],
) -> None:
    output = _block(walkthrough, "import my_ops; print(my_ops.status())")
    lines = output.splitlines()
    assert "kernelpack: rebuilding scale (1 file)…" in lines
    assert any(re.fullmatch(r"kernelpack: rebuilt scale \(1 file, [\d.]+ s\)", ln) for ln in lines)


def test_the_wheel_installs_and_imports_outside_the_source_tree(
    walkthrough: tuple[list[str], Path],
) -> None:
    wheels = list((walkthrough[1] / "my-ops" / "dist").glob("my_ops-*.whl"))
    assert len(wheels) == 1
    output = _block(walkthrough, "pip install dist/my_ops-*.whl")
    (line,) = [ln for ln in output.splitlines() if "'scale'" in ln]
    assert "site-packages/my_ops/__init__.py" in line
