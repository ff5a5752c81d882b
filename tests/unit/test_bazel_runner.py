"""kernelpack's pytest runner (the main of every `py_gpu_test`), run as Bazel runs it: a
subprocess from the runfiles folder with Bazel's test environment variables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelpack.bazel.pytest_runner import built_copy, pytest_args

TEST_WHERE = "import llm_ops\n\n\ndef test_where():\n    assert llm_ops.WHERE == 'built'\n"


@pytest.fixture
def runfiles(tmp_path: Path) -> Path:
    """A source copy of `llm_ops` (what Bazel stages) and a built copy (the image's)."""
    for copy, where in (("staged", "source"), ("site-packages", "built")):
        (tmp_path / copy / "llm_ops").mkdir(parents=True)
        (tmp_path / copy / "llm_ops" / "__init__.py").write_text(f"WHERE = {where!r}\n")
    (tmp_path / "site-packages" / "llm_ops" / "_kernelpack.json").write_text("{}")
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "test_where.py").write_text(TEST_WHERE)
    return tmp_path


def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root / "staged"), str(root / "site-packages")]),
        "TEST_TMPDIR": str(root / "tmp"),
        "XML_OUTPUT_FILE": str(root / "test.xml"),
    }
    return subprocess.run(
        [sys.executable, "-m", "kernelpack.bazel.pytest_runner", *args],
        cwd=root / "ws",
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_runner_imports_the_built_copy_when_asked(runfiles: Path) -> None:
    done = run(runfiles, "--prefer-built=llm_ops", "--", "test_where.py")
    assert done.returncode == 0, done.stdout + done.stderr


def test_runner_leaves_the_staged_sources_first_otherwise(runfiles: Path) -> None:
    done = run(runfiles, "--", "test_where.py")
    assert done.returncode == 1
    assert "assert 'source' == 'built'" in done.stdout


def test_runner_changes_nothing_when_no_copy_is_built(runfiles: Path) -> None:
    (runfiles / "site-packages" / "llm_ops" / "_kernelpack.json").unlink()
    done = run(runfiles, "--prefer-built=llm_ops", "--", "test_where.py")
    assert done.returncode == 1


def test_runner_writes_the_junit_xml_bazel_asks_for(runfiles: Path) -> None:
    run(runfiles, "--prefer-built=llm_ops", "--", "test_where.py")
    assert "test_where" in (runfiles / "test.xml").read_text()


def test_runner_passes_user_args_to_pytest(runfiles: Path) -> None:
    done = run(runfiles, "--", "test_where.py", "-k", "nothing_matches")
    assert done.returncode == 5


def test_built_copy_is_the_first_path_entry_with_a_build_record(runfiles: Path) -> None:
    entries = [str(runfiles / "staged"), str(runfiles / "site-packages")]
    assert built_copy("llm_ops", entries) == runfiles / "site-packages"
    assert built_copy("other", entries) is None


def test_pytest_args_follow_bazels_test_environment() -> None:
    environ = {"XML_OUTPUT_FILE": "/out/test.xml", "TESTBRIDGE_TEST_ONLY": "rmsnorm"}
    assert pytest_args(["t.py"], environ) == [
        "-p",
        "no:cacheprovider",
        "t.py",
        "--junitxml=/out/test.xml",
        "-k",
        "rmsnorm",
    ]
