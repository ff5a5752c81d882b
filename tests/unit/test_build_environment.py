"""The build's environment: every variable declared once, read once, and what reads it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kernelpack.backend import _editable_hook as hook
from kernelpack.errors import UsageError
from kernelpack.toolchain.environment import (
    EDITABLE_SKIP,
    EDITABLE_VERBOSE,
    VARIABLES,
    BuildEnvironment,
    replayed,
)


def test_each_field_names_its_variables_and_every_declared_name_is_in_the_table() -> None:
    fields = [f for f in dataclasses.fields(BuildEnvironment) if "variable" in f.metadata]
    assert len(fields) >= 15
    declared = {name for variable in VARIABLES for name in variable.names}
    for item in fields:
        assert set(item.metadata["variable"].names) <= declared, item.name


def test_reads_every_build_variable_into_typed_fields() -> None:
    environ = {
        "DEMO_KERNELS": "a, b",
        "KERNELPACK_KERNELS": "c",
        "KERNELPACK_REQUIRE": "yes",
        "KERNELPACK_JOBS": "3",
        "MAX_JOBS": " 2 ",
        "TORCH_CUDA_ARCH_LIST": "9.0a;10.0",
        "KERNELPACK_ARCH": "Native",
        "KERNELPACK_LAUNCHER": "none",
        "KERNELPACK_LOCK_TIMEOUT": "2.5",
        "CUDA_PATH": "/opt/cuda",
        "CXX": "g++-13",
        "NVCC_APPEND_FLAGS": "-G '-Xptxas=-v'",
        "KERNELPACK_CUTLASS_DIR": "/src/cutlass",
        "PATH": "/bin",
    }
    env = BuildEnvironment.from_environ(environ, "DEMO")
    assert env.kernels == (frozenset({"a", "b"}), "DEMO_KERNELS")
    assert env.require and env.jobs == 3 and env.max_jobs == 2
    assert env.torch_cuda_arch_list == "9.0a;10.0" and env.kernelpack_arch == "Native"
    assert env.launcher == "none" and env.lock_timeout == 2.5
    assert env.cuda_home == ("CUDA_PATH", Path("/opt/cuda"))
    assert (env.cxx, env.cc) == ("g++-13", None)
    assert env.nvcc_append_flags == ("-G", "-Xptxas=-v") and env.nvcc_prepend_flags == ()
    assert env.dep_dirs == (("KERNELPACK_CUTLASS_DIR", Path("/src/cutlass")),)
    assert env.path == "/bin"


def test_without_a_prefix_the_package_variables_are_not_read() -> None:
    env = BuildEnvironment.from_environ({"_KERNELS": "a", "KERNELPACK_KERNELS": "b"})
    assert env.kernels == (frozenset({"b"}), "KERNELPACK_KERNELS")


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("KERNELPACK_LOCK_TIMEOUT", "soon", "KERNELPACK_LOCK_TIMEOUT=soon is not a number"),
        ("NVCC_PREPEND_FLAGS", "-DX='1", "NVCC_PREPEND_FLAGS=-DX='1: No closing quotation"),
        ("KERNELPACK_JOBS", "0", "KERNELPACK_JOBS=0 is not a positive integer"),
        ("TORCH_CUDA_ARCH_LIST", "9.0;Hoppr", 'TORCH_CUDA_ARCH_LIST=9.0;Hoppr: "Hoppr" is not'),
        ("KERNELPACK_REQUIRE", "maybe", "KERNELPACK_REQUIRE=maybe is not a boolean"),
    ],
)
def test_a_bad_value_is_a_one_line_error_naming_the_variable(
    variable: str, value: str, message: str
) -> None:
    with pytest.raises(UsageError) as caught:
        BuildEnvironment.from_environ({variable: value})
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_children_inherit_the_environment_without_what_the_graph_already_says() -> None:
    environ = {
        "PATH": "/bin",
        "CCACHE_DIR": "/c",
        "MAKEFLAGS": "-j8",
        "NVCC_PREPEND_FLAGS": "-G",
        "NVCC_APPEND_FLAGS": "-lineinfo",
    }
    assert BuildEnvironment.from_environ(environ).child_environ() == {
        "PATH": "/bin",
        "CCACHE_DIR": "/c",
    }


def test_the_record_keeps_the_selection_variables_as_set() -> None:
    assert BuildEnvironment.from_environ({"KERNELPACK_JOBS": "2"}).recorded() is None
    environ = {"MAX_JOBS": "4", "TORCH_CUDA_ARCH_LIST": "8.0 8.6+PTX"}
    selection = BuildEnvironment.from_environ(environ).recorded()
    assert selection is not None
    assert (selection.max_jobs, selection.torch_cuda_arch_list) == (4, "8.0 8.6+PTX")
    assert selection.kernelpack_arch is None


def test_fingerprint_holds_what_changes_a_build_and_says_what_was_unset() -> None:
    environ = {
        "LLM_OPS_KERNELS": "rmsnorm",
        "TORCH_CUDA_ARCH_LIST": "9.0",
        "KERNELPACK_MYLIB_DIR": "/x",
        "MAX_JOBS": "1",
        "KERNELPACK_LAUNCHER": "ccache",
        "KERNELPACK_EDITABLE_VERBOSE": "1",
    }
    recorded = BuildEnvironment.from_environ(environ, "LLM_OPS").fingerprint()
    assert recorded["LLM_OPS_KERNELS"] == "rmsnorm" and recorded["TORCH_CUDA_ARCH_LIST"] == "9.0"
    assert recorded["KERNELPACK_MYLIB_DIR"] == "/x"
    assert recorded["CXX"] is None and recorded["NVCC_APPEND_FLAGS"] is None
    assert not {"MAX_JOBS", "KERNELPACK_LAUNCHER", "KERNELPACK_EDITABLE_VERBOSE"} & set(recorded)
    assert all(replayed(name, "LLM_OPS") for name in recorded)


def test_the_import_hooks_variables_are_declared() -> None:
    assert (EDITABLE_SKIP.names[0], EDITABLE_VERBOSE.names[0]) == (hook.SKIP, hook.VERBOSE)
