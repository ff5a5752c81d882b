"""Hostile and broken manifests: nothing reaches nvcc's shell, every problem is one line (all
of them, in file order), exit 2, fast, and never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from fakes.projects import sources

from kernelpack.errors import ManifestError, ManifestErrors
from kernelpack.project._toml import read_toml
from kernelpack.project.manifest import ANY_PLATFORM, KernelSpec, load
from kernelpack.project.settings import Settings
from kernelpack_runtime.arch import Arch

KERNELPACK = Path(sys.executable).parent / "kernelpack"

GOOD = """\
[k]
sources = ["csrc/k.cu"]
arch = "9.0a"
"""


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return sources(tmp_path / "pkg", ["k/csrc/k.cu"], "// k\n")


def _write(package: Path, text: str) -> Path:
    manifest = package / "kernels.toml"
    manifest.write_text(textwrap.dedent(text), encoding="utf-8")
    return manifest


def _problems(package: Path, text: str, **kwargs: object) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        load(_write(package, text), **kwargs)  # type: ignore[arg-type]
    lines = caught.value.lines(1000)
    assert all("\n" not in line and "\r" not in line for line in lines)
    return lines


def _check(package: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KERNELPACK), "check", str(package), *args],
        cwd=package.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# --- every error, in file order ----------------------------------------------------------


def test_every_problem_is_reported_one_line_each_in_file_order(package: Path) -> None:
    lines = _problems(
        package,
        """\
        [k]
        sources = ["csrc/k.cu"]
        arch = "9.5"
        cxx-std = 14
        abii = "stable"

        [k2]
        sources = ["csrc/none.cu"]
        arch = "9.0a"
        defines = { "A-B" = "1", C = "$(id)" }
        """,
    )
    assert [line.split(": ", 2)[1] for line in lines] == [
        "[k].arch",
        "[k].cxx-std",
        "[k].abii",
        "[k2].sources",
        "[k2].defines.A-B",
        "[k2].defines.C",
    ]


def test_check_prints_every_problem_and_exits_2(package: Path) -> None:
    _write(package, GOOD.replace('"9.0a"', '"9.5"') + 'cxx-std = 14\nptx = "yes"\n')
    result = _check(package)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 3, result.stderr
    assert all(line.startswith("kernelpack check: error: pkg/kernels.toml: [k].") for line in lines)
    assert "Traceback" not in result.stderr


def test_check_caps_the_list_with_a_count(package: Path) -> None:
    tables = "".join(f'[k{i}]\nsources = []\narch = "9.0a"\n' for i in range(25))
    _write(package, tables)
    lines = _check(package).stderr.splitlines()
    assert len(lines) == 21
    assert lines[0].startswith("kernelpack check: error: pkg/kernels.toml: [k0].sources: is empty")
    assert lines[-1] == "kernelpack check: error: … and 5 more"


def test_build_names_the_first_problem_and_counts_the_rest(package: Path) -> None:
    with pytest.raises(ManifestErrors) as caught:
        load(_write(package, GOOD + "cxx-std = 14\nptx = 1\n"))
    assert len(caught.value.errors) == 2
    assert "\n" not in str(caught.value)
    assert str(caught.value).endswith("(and 1 more; kernelpack check lists them)")


def test_one_problem_reads_exactly_as_before(package: Path) -> None:
    with pytest.raises(ManifestError) as caught:
        load(_write(package, GOOD + "cxx-std = 14\n"))
    assert str(caught.value) == (
        "pkg/kernels.toml: [k].cxx-std: got an integer (14); expected one of 17, 20, 23"
    )


def test_each_bad_unknown_key_is_its_own_problem(package: Path) -> None:
    lines = _problems(package, GOOD + "abii = 1\nsorces = 2\n")
    assert [line.split(": ")[1] for line in lines] == ["[k].abii", "[k].sorces"]


def test_a_bad_kernel_name_is_one_problem_not_a_cascade(package: Path) -> None:
    lines = _problems(package, GOOD.replace("[k]", '["a b"]'))
    assert len(lines) == 1
    assert "not a Python identifier" in lines[0]


# --- nothing reaches nvcc's shell --------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ('defines = { X = "$(touch pwned)" }', '[k].defines.X: "$(touch pwned)" holds "$"'),
        ('defines = { X = "`touch pwned`" }', "holds a backquote"),
        ('defines = { X = "a\\"b" }', "holds a double quote"),
        ("defines = { X = 'a\\b' }", "holds a backslash"),
        ('defines = { X = "it\'s" }', "holds a single quote"),
        ('defines = { X = "a,b" }', "nvcc splits -D and -I values at commas"),
        ('nvcc-flags = ["-DX=$(touch pwned)"]', '[k].nvcc-flags: "-DX=$(touch pwned)" holds "$"'),
        ('nvcc-flags = ["-Xcompiler", "-DY=$(touch pwned)"]', 'holds "$"'),
        ('nvcc-flags = ["-Xcompiler", "-O3;id"]', 'holds ";"'),
        ('cxx-flags = ["-O3 -g"]', "holds a space"),
        ('nvcc-flags = ["-Xcompiler", "-DY=(1)"]', 'holds "("'),
        ('include-dirs = ["csrc/x y"]', '[k].include-dirs: "csrc/x y" holds a space'),
        ('include-dirs = ["a:b"]', 'holds ":"'),
        ('include-dirs = ["a,b"]', "at commas"),
        ('include-dirs = ["$HOME"]', 'holds "$"'),
    ],
)
def test_shell_characters_are_rejected_naming_the_character_and_why(
    package: Path, extra: str, fragment: str
) -> None:
    (line,) = _problems(package, GOOD + extra + "\n")
    assert fragment in line
    assert "sh -c" in line or "dependency files" in line or "commas" in line


def test_a_source_path_with_a_backquote_is_rejected(package: Path) -> None:
    (line,) = _problems(package, GOOD.replace("csrc/k.cu", "csrc/`id`.cu"))
    assert "[k].sources" in line
    assert "holds a backquote" in line


def test_a_file_a_glob_finds_is_checked_too(package: Path) -> None:
    (package / "k" / "csrc" / "$(id).cu").write_text("// x\n")
    (line,) = _problems(package, GOOD.replace("csrc/k.cu", "csrc/*.cu"))
    assert 'matches "csrc/$(id).cu", which holds "$"' in line


def test_a_dependency_folder_with_shell_characters_is_rejected(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    with pytest.raises(ManifestError, match=r"\[tool.kernelpack.deps\].mylib: .* holds"):
        Settings.from_table({"deps": {"mylib": "third party/`id`"}}, pyproject)


@pytest.mark.parametrize(
    "extra",
    [
        'defines = { BLOCK = "(1 << 7)", T = "float", N = 128, ON = true, S = "a b" }',
        'nvcc-flags = ["--use_fast_math", "-Xcompiler=-Wall,-Wextra", "-DFOO=1", "-lineinfo"]',
        'cxx-flags = ["-O3", "-march=x86-64-v3", "-Wl,--as-needed"]',
    ],
)
def test_ordinary_values_are_still_accepted(package: Path, extra: str) -> None:
    (spec,) = load(_write(package, GOOD + extra + "\n")).kernels
    assert spec.name == "k"


def test_ordinary_file_names_are_still_accepted(package: Path) -> None:
    name = "csrc/a-b_c+d@e=1%2~.cu"
    (package / "k" / name).write_text("// x\n")
    (spec,) = load(_write(package, GOOD.replace("csrc/k.cu", name))).kernels
    assert spec.sources == (package / "k" / name,)


# --- newlines and control characters: one line, escaped ----------------------------------


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (GOOD + 'defines = { X = "a\\nb" }\n', '[k].defines.X: "a\\nb" holds a control'),
        (GOOD + 'description = "two\\nlines"\n', '"two\\nlines" holds a control character (\\n)'),
        (GOOD + 'nvcc-flags = ["-O3\\r"]\n', "(\\r)"),
        (GOOD.replace("csrc/k.cu", "csrc/k\\u0000.cu"), "(\\x00)"),
        (GOOD + '"bad\\nkey" = 1\n', "[k].bad\\nkey: unknown key"),
        (GOOD.replace("[k]", '["k\\nl"]'), "[k\\nl]: the kernel name"),
        (GOOD + 'ops = "a\\u2028b"\n', '[k].ops: "a\\u2028b" holds a control character'),
    ],
)
def test_a_control_character_gives_one_escaped_line(
    package: Path, text: str, fragment: str
) -> None:
    lines = _problems(package, text)
    assert any(fragment in line for line in lines), lines


# --- inputs built to crash or stall the reader: one line, exit 2, under a second ----------


def _huge_int() -> str:
    return GOOD + "cxx-std = " + "9" * 5000 + "\n"


def _deep_arrays() -> str:
    return GOOD + "x = " + "[" * 600 + "]" * 600 + "\n"


def _deep_tables() -> str:
    return GOOD + "x = " + "{a = " * 600 + "1" + "}" * 600 + "\n"


def _million_sources() -> str:
    return '[k]\narch = "9.0a"\nsources = [' + ", ".join(['"a.cu"'] * 1_000_000) + "]\n"


def _many_sources() -> str:
    entries = ", ".join(f'"s{i}.cu"' for i in range(20_000))
    return '[k]\narch = "9.0a"\nsources = [' + entries + "]\n"


def _many_kernels() -> str:
    return "".join(f'[k{i}]\nsources = ["a.cu"]\n' for i in range(5000))


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (_huge_int, "invalid TOML: exceeds the limit (4300 digits)"),
        (_deep_arrays, "nest too deeply"),
        (_deep_tables, "nest too deeply"),
        (_million_sources, "is 7.6 MiB; expected a TOML file of at most 1 MiB"),
        (_many_sources, "[k].sources: holds 20000 items; expected at most 10000"),
        (_many_kernels, "declares 5000 kernels; expected at most 1000"),
    ],
    ids=["int-4300-digits", "nested-arrays", "nested-tables", "1M-sources", "20k", "kernels"],
)
def test_input_built_to_crash_or_stall_is_one_fast_line(
    package: Path, make: object, fragment: str
) -> None:
    assert callable(make)
    (package / "kernels.toml").write_text(make(), encoding="utf-8")
    start = time.process_time()  # CPU time: the machine running the tests may be busy
    with pytest.raises(ManifestError) as caught:
        load(package / "kernels.toml")
    assert time.process_time() - start < 1.0
    assert fragment in str(caught.value)
    result = _check(package)
    assert (result.returncode, result.stdout, len(result.stderr.splitlines())) == (2, "", 1)
    assert fragment in result.stderr


def test_a_fifo_named_kernels_toml_is_an_error_not_a_hang(package: Path) -> None:
    os.mkfifo(package / "kernels.toml")
    with pytest.raises(ManifestError, match="is not a regular file"):
        load(package / "kernels.toml")


# --- whatever reader makes a KernelSpec: the same rule ------------------------------------


def _spec(tmp_path: Path, **values: object) -> KernelSpec:
    folder = tmp_path / "pkg" / "k"
    arguments: dict[str, object] = {
        "name": "k",
        "folder": folder,
        "namespace": "pkg_k",
        "sources": (folder / "csrc" / "k.cu",),
        "arch": {ANY_PLATFORM: (Arch.parse("9.0a"),)},
    }
    return KernelSpec(**{**arguments, **values})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ({"defines": {"X": "$(touch pwned)"}}, '[k].defines.X: "$(touch pwned)" holds "$"'),
        ({"defines": {"A-B": "1"}}, '[k].defines: "A-B" is not an identifier'),
        ({"nvcc_flags": ("-Xcompiler", "-DY=`id`")}, "[k].nvcc-flags: "),
        ({"cxx_flags": ("-O3\n",)}, "holds a control character"),
        ({"include_dirs": (Path("/elsewhere/a b"),)}, "[k].include-dirs: "),
        ({"namespace": "a;b"}, "[k].ops: "),
        ({"libraries": ("m; id",)}, "[k].libraries: "),
    ],
)
def test_a_kernel_spec_from_any_reader_refuses_shell_characters(
    tmp_path: Path, values: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ManifestError) as caught:
        _spec(tmp_path, **values)
    assert fragment in str(caught.value)


def test_a_kernel_spec_with_sources_outside_its_folder_is_fine(tmp_path: Path) -> None:
    # A build.toml project keeps its sources outside the package: paths may climb.
    spec = _spec(tmp_path, sources=(tmp_path / "csrc" / "relu.cu",))
    assert spec.sources == (tmp_path / "csrc" / "relu.cu",)


def test_a_folder_named_with_a_newline_is_one_line(tmp_path: Path) -> None:
    odd = tmp_path / "a\nb"
    odd.mkdir()
    for target in (odd / "nowhere", odd):
        result = subprocess.run(
            [str(KERNELPACK), "check", str(target)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 2
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert "a\\nb" in result.stderr


@pytest.mark.parametrize(
    ("header", "fragment"),
    [
        ('["a b"]', "(a space may not be in a name)"),
        ('["x$y"]', '("$" may not be in a name)'),
        ('["a:b"]', '(":" may not be in a name)'),
        ('["it\'s"]', '("\'" may not be in a name)'),
        ('["1x"]', '("1" may not start a name)'),
    ],
)
def test_a_kernel_name_error_names_the_character(package: Path, header: str, fragment: str) -> None:
    (line,) = _problems(package, GOOD.replace("[k]", header))
    assert f"the kernel name is not a Python identifier {fragment}" in line


def test_the_size_limit_is_the_manifests_only(tmp_path: Path) -> None:
    # A uv.lock of a large project passes 1 MiB; only kernels.toml is held to it.
    lock = tmp_path / "uv.lock"
    lock.write_text(
        "".join(f'[[package]]\nname = "p{i}"\nversion = "1.0"\n' for i in range(60_000))
    )
    assert lock.stat().st_size > 1024 * 1024
    assert len(read_toml(lock)["package"]) == 60_000
