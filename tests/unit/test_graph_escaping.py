"""build.ninja: every word reaches the compiler exactly as given, escaped once for ninja and
once for the shell ninja runs it with, read back by the real ninja (`ninja -t commands`)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import ninja
import pytest

from kernelpack.builder.flags import KernelFlags
from kernelpack.builder.graph import FILENAME, ROOT_LINK, GraphKernel, Pools, link_root, render
from kernelpack.errors import UsageError

NINJA = Path(ninja.BIN_DIR) / "ninja"

# Folders kernelpack does not choose (the user's checkout, the toolkit): ninja's `$`, `:`
# and space, and the shell's quotes, must all survive.
ODD = "we ird$dir:x 'q\"`b`"


def _flags(include: Path) -> KernelFlags:
    return KernelFlags(
        defines=("-DKERNELPACK_NAMESPACE=pkg_k", "-DBLOCK=(1 << 7)", "-DX=a;b|c&d"),
        include_dirs=(str(include),),
        nvcc=("-O3", "-Xcompiler", "-fPIC"),
        cxx=("-O3",),
        cc=("-O2",),
        ldflags=(f"-L{include}",),
        heavy=False,
    )


def _commands(tmp_path: Path, **overrides: object) -> list[list[str]]:
    root = tmp_path / ODD
    package = root / "pkg"
    build = root / "build"
    (package / "k").mkdir(parents=True)
    source = package / "k" / "k.cu"
    source.write_text("// k\n")
    kernel = GraphKernel(
        name="k",
        sources=(source, package / "k" / "b.cpp"),
        flags=_flags(tmp_path / f"outside {ODD}" / "inc"),
        library="lib/k/_C.abi3.so",
        package_dir=package,
    )
    arguments: dict[str, object] = {
        "build_dir": build,
        "root": root,
        "nvcc": tmp_path / ODD / "bin" / "nvcc",
        "cxx": "c++",
        "cc": "cc",
        "launcher": None,
        "pools": Pools(heavy=1, light=2),
        "nvcc_prepend": ("-DPRE=$HOME",),
    }
    arguments.update(overrides)
    text = render([kernel], **arguments)  # type: ignore[arg-type]
    build.mkdir()
    (build / FILENAME).write_text(text)
    out = subprocess.run(
        [str(NINJA), "-C", str(build), "-t", "commands"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [shlex.split(line) for line in out.splitlines()]


def test_every_word_reaches_the_compiler_unchanged(tmp_path: Path) -> None:
    commands = _commands(tmp_path)
    nvcc = next(c for c in commands if c[0].endswith("nvcc"))
    assert nvcc[0] == str(tmp_path / ODD / "bin" / "nvcc")
    assert "-DPRE=$HOME" in nvcc
    assert "-DBLOCK=(1 << 7)" in nvcc
    assert "-DX=a;b|c&d" in nvcc
    assert f"-I{tmp_path / f'outside {ODD}' / 'inc'}" in nvcc
    assert nvcc[nvcc.index("-c") + 1] == "../pkg/k/k.cu"
    link = next(c for c in commands if c[0] == "c++" and "-shared" in c)
    assert f"-L{tmp_path / f'outside {ODD}' / 'inc'}" in link


def test_a_launcher_path_is_escaped_too(tmp_path: Path) -> None:
    launcher = tmp_path / ODD / "bin" / "sccache"
    commands = _commands(tmp_path, launcher=launcher)
    assert all(c[0] == str(launcher) for c in commands if "-c" in c)


def test_a_newline_in_a_folder_is_one_line_error_not_an_assertion(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="newline"):
        _commands(tmp_path, nvcc=tmp_path / "bad\nfolder" / "nvcc")


def test_compiles_name_files_relative_to_the_project_and_seed_by_object(tmp_path: Path) -> None:
    commands = _commands(tmp_path)
    nvcc = next(c for c in commands if c[0].endswith("nvcc"))
    # The root as the build folder spells it is mapped away: `__FILE__` is `pkg/k/k.cu`.
    assert nvcc[nvcc.index("-ffile-prefix-map=../=") - 1] == "-Xcompiler"
    assert "-frandom-seed=obj/k/k/k.cu.o" in nvcc
    assert "-objtemp" in nvcc
    assert nvcc[nvcc.index("-Xcudafe") + 1] == "--orig_src_path_name=pkg/k/k.cu"
    assert nvcc[nvcc.index("-Xcicc") + 1] == "--orig_src_path_name=pkg/k/k.cu"
    cxx = next(c for c in commands if c[0] == "c++" and "-c" in c)
    assert "-ffile-prefix-map=../=" in cxx
    assert "-frandom-seed=obj/k/k/b.cpp.o" in cxx
    # No absolute path of the clone reaches a command line (the cache keys stay the same).
    assert not any(str(tmp_path / ODD) in word for word in nvcc[1:] + cxx[1:])


def test_through_sccache_nvcc_sources_are_spelled_below_the_working_folder(
    tmp_path: Path,
) -> None:
    # sccache hands nvcc a relative source as its absolute path, which __FILE__ would then
    # hold: the source is spelled below /proc/self/cwd/.root (the same in every clone) and
    # that prefix is mapped away; still no absolute path of the clone on a command line.
    commands = _commands(tmp_path, launcher=tmp_path / "bin" / "sccache")
    nvcc = next(c for c in commands if len(c) > 1 and c[1].endswith("nvcc"))
    assert nvcc[nvcc.index("-c") + 1] == "/proc/self/cwd/.root/pkg/k/k.cu"
    assert nvcc[nvcc.index("-ffile-prefix-map=/proc/self/cwd/.root/=") - 1] == "-Xcompiler"
    cxx = next(c for c in commands if len(c) > 1 and c[1] == "c++")
    assert cxx[cxx.index("-c") + 1] == "../pkg/k/b.cpp"
    assert not any(str(tmp_path / ODD) in word for word in nvcc[2:] + cxx[2:])


def test_the_root_link_resolves_from_the_build_folder(tmp_path: Path) -> None:
    root = tmp_path / ODD
    build = root / "build" / "kernelpack"
    build.mkdir(parents=True)
    (root / "pkg").mkdir()
    (root / "pkg" / "k.cu").write_text("x")
    link_root(build, root)
    link_root(build, root)  # again: left as it is
    assert os.readlink(build / ROOT_LINK) == "../.."
    assert (build / ROOT_LINK / "pkg" / "k.cu").read_text() == "x"
    assert [p.name for p in build.iterdir()] == [ROOT_LINK]  # no temporary left
