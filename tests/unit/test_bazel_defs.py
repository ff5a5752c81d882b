"""kernelpack's `defs.bzl`, evaluated by a Starlark interpreter (starlark-pyo3) against
recording fakes of the rules it loads (rules_py's `py_library` / `py_venv_test`) and of
Bazel's `native` module. rules_py itself is not exercised here (see docs/bazel.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import pytest
import starlark as sl

DEFS = resources.files("kernelpack.bazel").joinpath("defs.bzl").read_text(encoding="utf-8")
DEFS_LABEL = "//tools/kernelpack:defs.bzl"
GLOBBED = ["src/llm_ops/__init__.py", "src/llm_ops/rmsnorm/__init__.py"]


@dataclass
class Recorded:
    """What one BUILD file's evaluation asked of the rules and of `native`."""

    rules: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    globs: list[dict[str, Any]] = field(default_factory=list)

    def only(self, kind: str) -> dict[str, Any]:
        found = [kwargs for rule, kwargs in self.rules if rule == kind]
        assert len(found) == 1, self.rules
        return found[0]


def evaluate(build: str, *, package: str = "pkg/sub") -> Recorded:
    """Evaluate `build` (a BUILD file loading defs.bzl) in Bazel package `package`."""
    recorded = Recorded()
    dialect = sl.Dialect.extended()
    starlark_globals = sl.Globals.extended_by([sl.LibraryExtension.StructType])

    def rule(kind: str) -> Any:
        def call(**kwargs: Any) -> None:
            recorded.rules.append((kind, kwargs))

        return call

    def glob(include: list[str], exclude: list[str] | None = None, **kwargs: Any) -> list[str]:
        recorded.globs.append({"include": include, "exclude": exclude or [], **kwargs})
        return list(GLOBBED)

    def rules_module(*names: str) -> sl.FrozenModule:
        module = sl.Module()
        for name in names:
            module.add_callable(name, rule(name))
        return module.freeze()

    loaded = {
        "@aspect_rules_py//py:defs.bzl": rules_module("py_library"),
        "@aspect_rules_py//py/unstable:defs.bzl": rules_module("py_venv_test"),
    }
    defs = sl.Module()
    defs.add_callable("_glob", glob)
    defs.add_callable("_genrule", rule("genrule"))
    defs.add_callable("_package_name", lambda: package)
    prelude = "native = struct(glob = _glob, genrule = _genrule, package_name = _package_name)"
    sl.eval(defs, sl.parse("prelude.bzl", prelude, dialect), starlark_globals)
    loader = sl.FileLoader(lambda label: loaded[label])
    sl.eval(defs, sl.parse("defs.bzl", DEFS, dialect), starlark_globals, loader)
    loaded[DEFS_LABEL] = defs.freeze()
    sl.eval(sl.Module(), sl.parse("BUILD.bazel", build, dialect), starlark_globals, loader)
    return recorded


def gpu_test(attrs: str = "") -> Recorded:
    return evaluate(
        f'load("{DEFS_LABEL}", "py_gpu_test")\n'
        f'py_gpu_test(name = "test_rmsnorm", srcs = ["tests/test_rmsnorm.py"]{attrs})\n'
    )


def library(attrs: str = "") -> Recorded:
    return evaluate(
        f'load("{DEFS_LABEL}", "kernel_py_library")\n'
        f'kernel_py_library(name = "llm_ops", package = "src/llm_ops"{attrs})\n'
    )


def test_py_gpu_test_wraps_the_venv_test_with_system_site_packages() -> None:
    test = gpu_test().only("py_venv_test")
    assert test["name"] == "test_rmsnorm"
    assert test["include_system_site_packages"] is True


def test_py_gpu_test_adds_gpu_and_torch_tags() -> None:
    assert gpu_test().only("py_venv_test")["tags"] == ["gpu", "torch"]


def test_py_gpu_test_keeps_user_tags_first_without_duplicates() -> None:
    tags = gpu_test(', tags = ["torch", "exclusive", "torch"]').only("py_venv_test")["tags"]
    assert tags == ["torch", "exclusive", "gpu"]


def test_py_gpu_test_is_linux_only() -> None:
    test = gpu_test().only("py_venv_test")
    assert test["target_compatible_with"] == ["@platforms//os:linux"]


def test_py_gpu_test_merges_user_constraints_with_linux() -> None:
    constraints = '["@platforms//cpu:x86_64", "@platforms//os:linux"]'
    test = gpu_test(f", target_compatible_with = {constraints}").only("py_venv_test")
    assert test["target_compatible_with"] == ["@platforms//cpu:x86_64", "@platforms//os:linux"]


def test_py_gpu_test_defaults_to_size_large() -> None:
    assert gpu_test().only("py_venv_test")["size"] == "large"


def test_py_gpu_test_size_can_be_overridden() -> None:
    assert gpu_test(', size = "enormous"').only("py_venv_test")["size"] == "enormous"


def test_py_gpu_test_main_is_kernelpacks_pytest_runner() -> None:
    recorded = gpu_test()
    main = recorded.only("genrule")
    test = recorded.only("py_venv_test")
    assert main["outs"] == [test["main"]]
    assert "from kernelpack.bazel.pytest_runner import main" in main["cmd"]
    assert test["srcs"] == ["tests/test_rmsnorm.py", test["main"]]


def test_py_gpu_test_runner_stub_is_as_restricted_as_the_test() -> None:
    main = gpu_test().only("genrule")
    assert main["target_compatible_with"] == ["@platforms//os:linux"]
    assert main["tags"] == ["manual"]


def test_py_gpu_test_hands_the_runner_workspace_paths_then_user_args() -> None:
    test = gpu_test(', args = ["-x"]').only("py_venv_test")
    assert test["args"] == ["--", "pkg/sub/tests/test_rmsnorm.py", "-x"]


def test_py_gpu_test_accepts_labels_of_its_own_package() -> None:
    recorded = evaluate(
        f'load("{DEFS_LABEL}", "py_gpu_test")\n'
        'py_gpu_test(name = "t", srcs = [":a_test.py", "//pkg/sub:b_test.py"])\n'
    )
    args = recorded.only("py_venv_test")["args"]
    assert args == ["--", "pkg/sub/a_test.py", "pkg/sub/b_test.py"]


def test_py_gpu_test_refuses_sources_of_another_package() -> None:
    with pytest.raises(sl.StarlarkError, match="srcs must be files of this package"):
        evaluate(
            f'load("{DEFS_LABEL}", "py_gpu_test")\npy_gpu_test(name = "t", srcs = ["//x:t.py"])\n'
        )


def test_py_gpu_test_prefer_built_becomes_a_runner_option() -> None:
    test = gpu_test(', prefer_built = ["llm_ops"]').only("py_venv_test")
    assert test["args"] == ["--prefer-built=llm_ops", "--", "pkg/sub/tests/test_rmsnorm.py"]


def test_py_gpu_test_passes_other_attributes_through() -> None:
    attrs = (
        ', deps = [":llm_ops"], data = ["tests/conftest.py"], env = {"KERNELPACK_REQUIRE": "1"}'
        ', timeout = "eternal", shard_count = 2, visibility = ["//visibility:public"]'
    )
    test = gpu_test(attrs).only("py_venv_test")
    assert test["deps"] == [":llm_ops"]
    assert test["data"] == ["tests/conftest.py"]
    assert test["env"] == {"KERNELPACK_REQUIRE": "1"}
    assert (test["timeout"], test["shard_count"]) == ("eternal", 2)
    assert test["visibility"] == ["//visibility:public"]


def test_py_gpu_test_refuses_a_main_of_its_own() -> None:
    with pytest.raises(sl.StarlarkError, match="main is kernelpack's pytest runner"):
        gpu_test(', main = "x.py"')


def test_kernel_py_library_globs_python_without_tests_or_csrc() -> None:
    recorded = library()
    assert recorded.globs == [
        {
            "include": ["src/llm_ops/**/*.py"],
            "exclude": [
                "src/llm_ops/**/csrc/**",
                "src/llm_ops/**/tests/**",
                "src/llm_ops/**/test_*.py",
                "src/llm_ops/**/*_test.py",
                "src/llm_ops/**/conftest.py",
            ],
        }
    ]
    assert recorded.only("py_library")["srcs"] == GLOBBED


def test_kernel_py_library_imports_the_folder_holding_the_package() -> None:
    assert library().only("py_library")["imports"] == ["src"]


def test_kernel_py_library_of_a_top_level_package_imports_its_build_folder() -> None:
    recorded = evaluate(
        f'load("{DEFS_LABEL}", "kernel_py_library")\n'
        'kernel_py_library(name = "llm_ops", package = "llm_ops")\n'
    )
    assert recorded.only("py_library")["imports"] == ["."]


def test_kernel_py_library_passes_deps_and_visibility_through() -> None:
    lib = library(', deps = ["@pypi//numpy"], visibility = ["//visibility:public"]')
    assert lib.only("py_library")["deps"] == ["@pypi//numpy"]
    assert lib.only("py_library")["visibility"] == ["//visibility:public"]


def test_kernel_py_library_with_explicit_srcs_does_not_glob() -> None:
    recorded = library(', srcs = ["src/llm_ops/__init__.py"], imports = ["src"]')
    assert recorded.globs == []
    assert recorded.only("py_library")["srcs"] == ["src/llm_ops/__init__.py"]
