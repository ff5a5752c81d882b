"""The editable install's pieces that need no compiler: recorded settings, the stamp check,
and the messages the finder prints or raises."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest

from kernelpack.backend import _editable_hook as hook
from kernelpack.backend import editable
from kernelpack.builder.ninja import Step
from kernelpack.project.locate import locate
from kernelpack.toolchain.environment import BuildEnvironment

EXAMPLE = Path(__file__).parents[2] / "examples" / "llm_ops"


def _finder(build_dir: Path) -> hook.EditableFinder:
    return hook.EditableFinder("kpx", "/root", str(build_dir), "python", "ninja", {})


def test_settings_record_the_selection_variables_and_that_others_were_unset() -> None:
    project = locate(EXAMPLE)
    environ = {
        "LLM_OPS_KERNELS": "rmsnorm",
        "KERNELPACK_REQUIRE": "1",
        "TORCH_CUDA_ARCH_LIST": "9.0",
        "KERNELPACK_EDITABLE_VERBOSE": "1",
        "MAX_JOBS": "1",
        "HOME": "/root",
    }
    environment = BuildEnvironment.from_environ(environ, project.env_prefix)
    settings = editable.settings_for(environment, {"kernels": frozenset({"b", "a"})})
    assert settings["options"] == {"kernels": ["a", "b"]}
    env = settings["env"]
    assert env["LLM_OPS_KERNELS"] == "rmsnorm" and env["KERNELPACK_REQUIRE"] == "1"
    assert env["TORCH_CUDA_ARCH_LIST"] == "9.0" and env["NVCC_APPEND_FLAGS"] is None
    assert not {"KERNELPACK_EDITABLE_VERBOSE", "MAX_JOBS", "HOME"} & set(env)


def test_rebuild_environment_is_the_install_time_selection_whatever_the_shell_sets() -> None:
    project = locate(EXAMPLE)
    environment = BuildEnvironment.from_environ({"TORCH_CUDA_ARCH_LIST": "9.0"}, project.env_prefix)
    settings = editable.settings_for(environment, {})
    shell = {
        "LLM_OPS_KERNELS": "silu_mul",
        "TORCH_CUDA_ARCH_LIST": "8.0",
        "NVCC_APPEND_FLAGS": "-G",
        "MAX_JOBS": "1",
        "KERNELPACK_EDITABLE_SKIP": "/x",
    }
    env = editable._environment(project, settings, shell)
    assert env == {"TORCH_CUDA_ARCH_LIST": "9.0", "MAX_JOBS": "1", "KERNELPACK_EDITABLE_SKIP": "/x"}


def test_missing_stamp_means_stale(tmp_path: Path) -> None:
    assert _finder(tmp_path).stale()


def test_unchanged_stamp_without_a_graph_is_fresh_and_a_touched_file_is_stale(
    tmp_path: Path,
) -> None:
    watched = tmp_path / "kernels.toml"
    watched.write_text("[k]\n")
    gone = tmp_path / "not-there"
    stamp = {"files": editable.snapshot([watched, gone]), "graph": False}
    (tmp_path / hook.STAMP).write_text(json.dumps(stamp))
    finder = _finder(tmp_path)
    assert not finder.stale()
    info = watched.stat()
    os.utime(watched, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000))
    assert finder.stale()


def test_a_file_that_appears_where_none_was_is_stale(tmp_path: Path) -> None:
    gone = tmp_path / "pyproject.toml"
    (tmp_path / hook.STAMP).write_text(
        json.dumps({"files": editable.snapshot([gone]), "graph": False})
    )
    gone.write_text("")
    assert _finder(tmp_path).stale()


def test_finder_checks_only_the_first_import_of_its_own_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    finder = _finder(tmp_path)
    calls: list[str] = []
    monkeypatch.setattr(finder, "stale", lambda: calls.append("stale") or False)
    assert finder.find_spec("other") is None
    assert finder.find_spec("kpx.sub") is None
    assert finder.find_spec("kpx") is None
    assert finder.find_spec("kpx") is None
    assert calls == ["stale"]


def test_skip_variable_turns_the_check_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    finder = _finder(tmp_path)
    monkeypatch.setenv(hook.SKIP, os.pathsep.join(["/elsewhere", "/root"]))
    monkeypatch.setattr(finder, "stale", lambda: pytest.fail("checked"))
    assert finder.find_spec("kpx") is None


def test_failure_message_carries_the_error_and_the_compiler_lines() -> None:
    outcome = {
        "ok": False,
        "error": "kernel 'k': csrc/k.cu failed to compile: k.cu(3): error: boom",
        "compiler": ["k.cu(3): error: boom", "  int x = ;"],
    }
    assert hook._failure("kpx", outcome, "") == (
        "kernelpack: rebuilding kpx failed: kernel 'k': csrc/k.cu failed to compile: "
        "k.cu(3): error: boom\n  k.cu(3): error: boom\n    int x = ;\n"
        "(KERNELPACK_EDITABLE_VERBOSE=1 shows the whole build as it runs)"
    )


def test_starting_line_names_the_kernels_and_counts_their_compiles() -> None:
    steps = [
        Step("nvcc", "obj/rmsnorm/csrc/rmsnorm.cu.o", 0.0),
        Step("c++", "obj/rmsnorm/csrc/binding.cpp.o", 0.0),
        Step("nvcc", "obj/silu/csrc/silu.cu.o", 0.0),
        Step("link", "lib/rmsnorm/_C.abi3.so", 0.0),
    ]
    assert editable.starting_line(steps) == "kernelpack: rebuilding rmsnorm, silu (3 files)…"
    assert editable.starting_line(steps[2:3]) == "kernelpack: rebuilding silu (1 file)…"


def _fake_rebuild(tmp_path: Path, stderr: str, stdout: str) -> str:
    """An interpreter stand-in that prints what a rebuild prints, whatever it is asked."""
    script = tmp_path / "python"
    script.write_text(
        f"#!/bin/sh\nprintf %s {shlex.quote(stderr)} >&2\necho {shlex.quote(stdout)}\n"
    )
    script.chmod(0o755)
    return str(script)


def test_rebuild_shows_its_starting_line_and_then_the_result(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(hook.VERBOSE, raising=False)
    python = _fake_rebuild(
        tmp_path,
        "kernelpack: rebuilding k (1 file)…\ncompiler chatter\n",
        json.dumps({"ok": True, "compiled": {"k": 1}}),
    )
    hook.EditableFinder("kpx", "/root", str(tmp_path), python, "ninja", {}).rebuild()
    lines = capfd.readouterr().err.splitlines()
    assert lines[0] == "kernelpack: rebuilding k (1 file)…"
    assert re.fullmatch(r"kernelpack: rebuilt k \(1 file, \d+\.\d s\)", lines[1])
    assert len(lines) == 2


def test_rebuild_that_compiled_nothing_prints_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(hook.VERBOSE, raising=False)
    python = _fake_rebuild(tmp_path, "", json.dumps({"ok": True, "compiled": {}}))
    hook.EditableFinder("kpx", "/root", str(tmp_path), python, "ninja", {}).rebuild()
    assert capfd.readouterr().err == ""


def test_failure_without_kernelpack_says_to_install_without_isolation() -> None:
    message = hook._failure("kpx", None, "ModuleNotFoundError: No module named 'kernelpack'")
    assert "--no-build-isolation" in message


def test_first_error_lines_start_at_the_first_error_and_skip_ninja() -> None:
    output = "\n".join(
        [
            "FAILED: obj/k/k.cu.o",
            "k.cu(1): warning: w",
            "k.cu(3): error: boom",
            "  int x = ;",
            "ninja: build stopped: subcommand failed.",
        ]
    )
    assert editable._first_error_lines(output) == ["k.cu(3): error: boom", "  int x = ;"]


def test_hook_file_is_the_standalone_finder_ending_in_its_install_call() -> None:
    project = locate(EXAMPLE)
    files = editable.hook_files(project, {"options": {}, "env": {}})
    assert files["_llm_ops_editable_hook.pth"] == "import _llm_ops_editable_hook\n"
    text = files["_llm_ops_editable_hook.py"]
    installed: list[dict[str, object]] = []
    code = text.replace("\ninstall(**", "\n_installed.append(dict(**") + ")"
    exec(compile(code, "hook", "exec"), {"_installed": installed})  # the module, run as is
    (facts,) = installed
    assert facts["package"] == "llm_ops" and facts["root"] == str(project.root)
