"""buildifier (npm's @bazel/buildifier) finds nothing to reformat or warn about in
kernelpack's `defs.bzl` or in the files `kernelpack bazel init` generates.

Skipped when buildifier is absent: install it with `npm install -g @bazel/buildifier`
(it works offline from the npm registry), or point BUILDIFIER at the binary."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kernelpack.bazel.generator import generate, write
from kernelpack.project.locate import locate

BUILDIFIER = os.environ.get("BUILDIFIER") or shutil.which("buildifier")

pytestmark = pytest.mark.skipif(
    BUILDIFIER is None,
    reason="buildifier not installed (npm install -g @bazel/buildifier, or set BUILDIFIER)",
)


def buildifier(*files: Path) -> subprocess.CompletedProcess[str]:
    assert BUILDIFIER is not None
    return subprocess.run(
        [BUILDIFIER, "--mode=check", "--lint=warn", "--warnings=all", *map(str, files)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_defs_bzl_is_buildifier_clean(tmp_path: Path) -> None:
    defs = tmp_path / "defs.bzl"
    defs.write_text(
        (Path(__file__).parents[2] / "src/kernelpack/bazel/defs.bzl").read_text(encoding="utf-8")
    )
    done = buildifier(defs)
    assert done.returncode == 0, done.stdout + done.stderr


def test_generated_build_files_are_buildifier_clean(tmp_path: Path) -> None:
    (tmp_path / "MODULE.bazel").touch()
    package = tmp_path / "llm_ops" / "llm_ops"
    (package / "rmsnorm" / "csrc").mkdir(parents=True)
    (package / "kernels.toml").write_text('[rmsnorm]\nsources = ["csrc/a.cu"]\narch = ["9.0a"]\n')
    (package / "rmsnorm" / "csrc" / "a.cu").touch()
    (package / "__init__.py").touch()
    tests = tmp_path / "llm_ops" / "tests"
    tests.mkdir()
    (tests / "conftest.py").touch()
    for name in ("test_a.py", "test_b.py"):
        (tests / name).write_text("import pytest\n\npytestmark = pytest.mark.gpu\n")
    deps = ["@pypi//numpy", "//lib/mocks", ":local"]
    files = generate(locate(package), tmp_path, deps=deps)
    for file in files:
        write(file)
    done = buildifier(*(f.path for f in files if f.path.name.endswith(("BUILD.bazel", ".bzl"))))
    assert done.returncode == 0, done.stdout + done.stderr
