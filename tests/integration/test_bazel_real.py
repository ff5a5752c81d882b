"""A real `bazel test` of a generated kernel package, offline.

Debian's bazel-bootstrap (Bazel 4.2.3) runs here only with local stand-in repositories:
`rules_cc`, `rules_java` and `remote_coverage_tools` (Bazel's own tools load them, nothing is
built with them) and `aspect_rules_py`, whose `py_venv_test` is Bazel's native `py_test`
run by the `python3` on the test's PATH. So rules_py itself is NOT exercised: what is real is
Bazel, the generated BUILD file, the vendored defs.bzl (tags, size, Linux constraint,
runner stub), kernelpack's pytest runner, the bridge and the tag filters.

The image is played by a venv ("system" Python, first on the test's PATH) holding the built
kernel package (a copy with `_kernelpack.json`) but neither pytest nor kernelpack: those live
in kernelpack's own venv, and only the bridge makes them visible, as in an image whose
packages sit in /venv while Bazel runs /usr/local/bin/python3.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelpack.bazel.bridge import Interpreter
from kernelpack.cli import main

BAZEL = shutil.which("bazel")


def _is_bazel_4() -> bool:
    if BAZEL is None:
        return False
    done = subprocess.run([BAZEL, "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip() in ("bazel no_version",) or done.stdout.startswith("bazel 4.")


pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not _is_bazel_4(),
        reason="needs Debian's bazel-bootstrap 4.2.3 (apt-get install bazel-bootstrap)",
    ),
]

STANDINS = {
    "rules_cc/cc/defs.bzl": "".join(
        f"{rule} = native.{rule}\n"
        for rule in (
            *("cc_binary", "cc_import", "cc_library", "cc_proto_library", "cc_test"),
            *("cc_toolchain", "cc_toolchain_suite", "fdo_prefetch_hints", "fdo_profile"),
            "objc_library",
        )
    ),
    "rules_java/java/defs.bzl": "".join(
        f"{rule} = native.{rule}\n"
        for rule in (
            *("java_binary", "java_import", "java_library", "java_lite_proto_library"),
            *("java_package_configuration", "java_plugin", "java_proto_library"),
            *("java_runtime", "java_test", "java_toolchain"),
        )
    ),
    "remote_coverage_tools/BUILD": (
        'package(default_visibility = ["//visibility:public"])\n\n'
        '[filegroup(name = n, srcs = ["noop.sh"]) '
        'for n in ["coverage_report_generator", "lcov_merger", "Main"]]\n'
    ),
    "remote_coverage_tools/noop.sh": "#!/bin/sh\nexit 0\n",
    "aspect_rules_py/py/defs.bzl": "py_library = native.py_library\n",
    "aspect_rules_py/py/unstable/defs.bzl": (
        "def py_venv_test(name, include_system_site_packages = False, **kwargs):\n"
        "    if not include_system_site_packages:\n"
        '        fail("stand-in: py_gpu_test must expose the system site-packages")\n'
        "    native.py_test(\n"
        '        name = name, python_version = "PY3", legacy_create_init = False, **kwargs)\n'
    ),
}

TEST_RMSNORM = """\
import pytest

import llm_ops


def test_imports_the_built_package():
    assert llm_ops.WHERE == "built"


@pytest.mark.gpu
def test_on_a_gpu():
    pass
"""

NEVER_BUILD = """\
load("//tools/kernelpack:defs.bzl", "py_gpu_test")

py_gpu_test(
    name = "test_never",
    srcs = ["test_never.py"],
    target_compatible_with = ["@platforms//os:windows"],
)
"""


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Stand-ins, the "system" Python with the built package, and the workspace."""
    root = tmp_path_factory.mktemp("bazel")
    workspace = root / "ws"
    for relative, text in STANDINS.items():
        _write(root / relative, text)
    for repo in ("rules_cc", "rules_java", "remote_coverage_tools", "aspect_rules_py"):
        (root / repo / "WORKSPACE").touch()
        for package in (root / repo).rglob("*.bzl"):
            (package.parent / "BUILD").touch()
    (root / "remote_coverage_tools" / "noop.sh").chmod(0o755)
    _write(
        workspace / "WORKSPACE",
        "".join(
            f'local_repository(name = "{repo}", path = "{root / repo}")\n'
            for repo in ("rules_cc", "rules_java", "remote_coverage_tools", "aspect_rules_py")
        ),
    )
    package = workspace / "llm_ops" / "llm_ops"
    _write(package / "__init__.py", "WHERE = 'source'\n")
    _write(package / "kernels.toml", '[rmsnorm]\nsources = ["csrc/a.cu"]\narch = ["9.0a"]\n')
    _write(package / "rmsnorm" / "__init__.py", "")
    _write(package / "rmsnorm" / "csrc" / "a.cu", "")
    _write(workspace / "llm_ops" / "tests" / "test_rmsnorm.py", TEST_RMSNORM)
    _write(workspace / "demo" / "BUILD.bazel", NEVER_BUILD)
    _write(workspace / "demo" / "test_never.py", TEST_RMSNORM)
    assert main(["bazel", "init", str(package)]) == 0

    system = root / "system"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(system)], check=True)
    site = Interpreter.probe(str(system / "bin" / "python")).purelib
    _write(site / "llm_ops" / "__init__.py", "WHERE = 'built'\n")
    _write(site / "llm_ops" / "_kernelpack.json", "{}\n")
    yield root
    subprocess.run(
        [str(BAZEL), f"--output_user_root={root / 'out'}", "shutdown"],
        cwd=workspace,
        capture_output=True,
        check=False,
    )


def bazel(tree: Path, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `bazel COMMAND ARGS` in the workspace; tests see the "system" Python first."""
    assert BAZEL is not None
    options = [f"--output_user_root={tree / 'out'}", "--max_idle_secs=60", command]
    if command == "test":
        system_path = f"{tree / 'system' / 'bin'}:/usr/bin:/bin"
        options += [f"--test_env=PATH={system_path}", "--test_output=errors"]
    return subprocess.run(
        [BAZEL, *options, *args],
        cwd=tree / "ws",
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def bridge(tree: Path, *args: str) -> int:
    return main(
        ["bridge", "--venv", sys.prefix, "--python", str(tree / "system" / "bin" / "python"), *args]
    )


def test_gpu_test_fails_when_the_system_python_lacks_the_venvs_packages(tree: Path) -> None:
    bridge(tree, "--remove")
    done = bazel(tree, "test", "//llm_ops:test_rmsnorm")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "No module named 'kernelpack'" in done.stdout + done.stderr


def test_gpu_test_passes_through_the_bridge_on_the_built_package(tree: Path) -> None:
    assert bridge(tree, "--process-pth") == 0
    done = bazel(tree, "test", "//llm_ops:test_rmsnorm")
    assert done.returncode == 0, done.stdout + done.stderr


def test_generated_gpu_test_carries_tags_size_and_linux_constraint(tree: Path) -> None:
    done = bazel(tree, "query", "--output=build", "//llm_ops:test_rmsnorm")
    assert 'tags = ["gpu", "torch"]' in done.stdout
    assert 'size = "large"' in done.stdout
    assert 'target_compatible_with = ["@platforms//os:linux"]' in done.stdout


def test_cpu_jobs_filtering_out_gpu_run_no_gpu_test(tree: Path) -> None:
    done = bazel(tree, "test", "//llm_ops/...", "--test_tag_filters=-gpu")
    assert done.returncode == 4  # "no test targets were found"
    assert "No test targets were found" in done.stderr


def test_incompatible_gpu_test_is_skipped_under_all_targets(tree: Path) -> None:
    bridge(tree, "--process-pth")
    done = bazel(tree, "test", "//demo/...")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SKIPPED" in done.stdout


def test_incompatible_gpu_test_named_explicitly_is_an_error(tree: Path) -> None:
    done = bazel(tree, "test", "//demo:test_never")
    assert done.returncode == 1
    assert "is incompatible and cannot be built, but was explicitly requested" in done.stderr
