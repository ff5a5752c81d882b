"""The Bazel files of a kernel package, computed from its folder, and their freshness.

`generate()` returns every file `kernelpack bazel init` owns, with its whole wanted content:

- `<project root>/BUILD.bazel`: a `kernel_py_library` of the package's Python sources (no
  tests, no `csrc/`) and one `py_gpu_test` per test file that uses the `gpu` or `kernel`
  marker; `# gazelle:ignore` (this file is generated here, not by gazelle) and
  `# gazelle:exclude` for every `csrc` folder;
- `<workspace>/.bazelignore`: its lines plus every `csrc` folder it lacks;
- `<workspace>/<rules dir>/defs.bzl` (a copy of kernelpack's) and its `BUILD.bazel`.

Contents depend only on the tree (sorted, relative paths), so generating twice is
byte-identical and `diff()` is the freshness check CI runs.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath

from kernelpack.bazel.markers import is_gpu_test_file
from kernelpack.errors import UsageError
from kernelpack.project.filekinds import BUILD_OUTPUT_DIRS, CACHE_DIRS, NATIVE_DIRS
from kernelpack.project.locate import Project
from kernelpack.syntax import starlark
from kernelpack_runtime._files import write_text_atomic

__all__ = [
    "DEFAULT_RULES_DIR",
    "WORKSPACE_FILES",
    "GeneratedFile",
    "defs_bzl",
    "diff",
    "find_workspace",
    "generate",
    "write",
]

#: Where `kernelpack bazel init` puts its copy of `defs.bzl`, relative to the workspace.
DEFAULT_RULES_DIR = "tools/kernelpack"

#: Files that mark a Bazel workspace root.
WORKSPACE_FILES = ("MODULE.bazel", "REPO.bazel", "WORKSPACE.bazel", "WORKSPACE")

# Not the Python layer: caches, native code, and build outputs (at any depth here: a Bazel
# package's Python sources never sit in a folder Bazel's own outputs could shadow).
_SKIPPED_DIRS = CACHE_DIRS | NATIVE_DIRS | BUILD_OUTPUT_DIRS
_BUILD_FILES = ("BUILD.bazel", "BUILD")


@dataclass(frozen=True)
class GeneratedFile:
    """One file `kernelpack bazel init` owns: where it goes and everything it should hold."""

    path: Path
    content: str
    shown: str
    """The path as messages and diffs show it: relative to the workspace."""

    def current(self) -> str | None:
        """What the file holds now; None when it does not exist."""
        try:
            return self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None


def defs_bzl() -> str:
    """kernelpack's `defs.bzl`, as shipped in the wheel."""
    return resources.files("kernelpack.bazel").joinpath("defs.bzl").read_text(encoding="utf-8")


def find_workspace(start: Path) -> Path | None:
    """The nearest folder at or above `start` holding a workspace file, or None."""
    for folder in (start, *start.parents):
        if any((folder / name).is_file() for name in WORKSPACE_FILES):
            return folder
    return None


def generate(
    project: Project,
    workspace: Path,
    *,
    rules_dir: str = DEFAULT_RULES_DIR,
    deps: Sequence[str] = (),
) -> tuple[GeneratedFile, ...]:
    """Every file `kernelpack bazel init` owns for `project`, with its wanted content."""
    root = project.root.resolve()
    workspace = workspace.resolve()
    if not root.is_relative_to(workspace):
        raise UsageError(f"{root}: the project is not inside the Bazel workspace {workspace}")
    rules = PurePosixPath(rules_dir)
    if rules.is_absolute() or ".." in rules.parts or not rules.parts:
        raise UsageError(f"--rules-dir {rules_dir}: expected a folder relative to the workspace")
    csrc_dirs, tests = _scan(root)
    build_file = root / "BUILD.bazel"
    ignore_file = workspace / ".bazelignore"
    package_rel = _posix(project.package_dir.resolve(), root)
    return (
        GeneratedFile(
            build_file,
            _build_file(
                project.package,
                package_rel,
                command_path=_posix(project.package_dir.resolve(), workspace),
                rules_label=f"//{rules}:defs.bzl",
                csrc_dirs=[_posix(d, root) for d in csrc_dirs],
                tests=[
                    (_posix(t, root), [_posix(c, root) for c in _conftests(t, root)]) for t in tests
                ],
                deps=deps,
            ),
            _posix(build_file, workspace),
        ),
        GeneratedFile(
            ignore_file,
            _bazelignore(_read(ignore_file), [_posix(d, workspace) for d in csrc_dirs]),
            ".bazelignore",
        ),
        GeneratedFile(workspace / rules / "defs.bzl", defs_bzl(), f"{rules}/defs.bzl"),
        GeneratedFile(workspace / rules / "BUILD.bazel", _RULES_BUILD, f"{rules}/BUILD.bazel"),
    )


def diff(file: GeneratedFile) -> str:
    """A unified diff from what `file.path` holds to what it should hold; "" when fresh."""
    current = file.current()
    if current == file.content:
        return ""
    return "".join(
        difflib.unified_diff(
            (current or "").splitlines(keepends=True),
            file.content.splitlines(keepends=True),
            fromfile="/dev/null" if current is None else f"a/{file.shown}",
            tofile=f"b/{file.shown}",
        )
    )


def write(file: GeneratedFile) -> bool:
    """Write `file` if it is stale (atomically); return whether it changed."""
    if file.current() == file.content:
        return False
    write_text_atomic(file.path, file.content)
    return True


_RULES_BUILD = """\
# Generated by `kernelpack bazel init`: defs.bzl is a copy of kernelpack's
# kernelpack/bazel/defs.bzl; `kernelpack bazel init --check` fails when it is stale.

exports_files(["defs.bzl"])
"""


def _scan(root: Path) -> tuple[list[Path], list[Path]]:
    """The `csrc` folders and the GPU test files of the Bazel package rooted at `root`."""
    csrc_dirs: list[Path] = []
    tests: list[Path] = []
    for folder, dirnames, filenames in os.walk(root):
        here = Path(folder)
        keep = []
        for name in sorted(dirnames):
            sub = here / name
            if name in NATIVE_DIRS:
                csrc_dirs.append(sub)
            if _skipped(name, sub):
                continue
            keep.append(name)
        dirnames[:] = keep
        for name in sorted(filenames):
            if _is_test_name(name) and is_gpu_test_file(here / name):
                tests.append(here / name)
    return sorted(csrc_dirs), sorted(tests)


def _skipped(name: str, folder: Path) -> bool:
    """Folders that are not this Bazel package's sources."""
    return (
        name in _SKIPPED_DIRS
        or name.startswith((".", "bazel-"))
        or name.endswith(".egg-info")
        or (folder / "pyvenv.cfg").is_file()
        or any((folder / build).is_file() for build in _BUILD_FILES)
    )


def _is_test_name(name: str) -> bool:
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def _conftests(test: Path, root: Path) -> list[Path]:
    """The `conftest.py` files pytest loads for `test`, from `root` down."""
    found = []
    folder = test.parent
    while folder.is_relative_to(root):
        if (folder / "conftest.py").is_file():
            found.append(folder / "conftest.py")
        if folder == root:
            break
        folder = folder.parent
    return sorted(found)


def _posix(path: Path, base: Path) -> str:
    rel = path.relative_to(base).as_posix()
    return rel if rel != "." else ""


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def _bazelignore(current: str, csrc_dirs: Iterable[str]) -> str:
    """`current` plus the `csrc_dirs` it lacks, one per line."""
    lines = current.splitlines()
    present = {line.strip().rstrip("/") for line in lines}
    missing = [d for d in csrc_dirs if d not in present]
    if not missing:
        return current
    return "".join(f"{line}\n" for line in [*lines, *missing])


def _label_order(label: str) -> tuple[int, str]:
    """buildifier's order for labels in a list: `:local`, then `//repo`, then `@external`."""
    if label.startswith(":"):
        return (0, label)
    if label.startswith("//"):
        return (1, label)
    return (2, label)


def _call(rule: str, attrs: Sequence[tuple[str, str]]) -> str:
    body = "".join(f"    {key} = {value},\n" for key, value in attrs)
    return f"{rule}(\n{body})\n"


def _test_names(tests: Sequence[str]) -> list[str]:
    """Target names: the file stem, or the whole path when two stems collide."""
    stems = [PurePosixPath(t).stem for t in tests]
    return [
        stem
        if stems.count(stem) == 1
        else str(PurePosixPath(t).with_suffix("")).replace("/", "_").replace("-", "_")
        for t, stem in zip(tests, stems, strict=True)
    ]


def _build_file(
    package: str,
    package_rel: str,
    *,
    command_path: str,
    rules_label: str,
    csrc_dirs: Sequence[str],
    tests: Sequence[tuple[str, Sequence[str]]],
    deps: Sequence[str],
) -> str:
    header = [
        starlark.comment(
            f"Generated by `kernelpack bazel init {command_path or '.'}`; do not edit.",
            what="the package folder",
        ),
        "# CI keeps it fresh with `kernelpack bazel init --check`.",
        "# gazelle:ignore",
        *(starlark.comment(f"gazelle:exclude {d}", what="a csrc folder") for d in csrc_dirs),
    ]
    symbols = ["kernel_py_library"] + (["py_gpu_test"] if tests else [])
    loads = ", ".join(starlark.string(s) for s in symbols)
    label = starlark.string(rules_label, what="--rules-dir")
    parts = ["\n".join(header) + "\n", f"load({label}, {loads})\n"]
    library: list[tuple[str, str]] = [
        ("name", starlark.string(package, what="the package name")),
        ("package", starlark.string(package_rel, what="the package folder")),
        ("visibility", '["//visibility:public"]'),
    ]
    if deps:
        ordered = sorted(set(deps), key=_label_order)
        library.append(("deps", starlark.string_list(ordered, what="--dep")))
    parts.append(_call("kernel_py_library", library))
    for name, (test, conftests) in zip(_test_names([t for t, _ in tests]), tests, strict=True):
        attrs = [
            ("name", starlark.string(name, what="a test target name")),
            ("srcs", starlark.string_list([test], what="a test file")),
        ]
        if conftests:
            attrs.append(("data", starlark.string_list(conftests, what="a conftest file")))
        attrs.append(("prefer_built", starlark.string_list([package], what="the package name")))
        attrs.append(("deps", starlark.string_list([f":{package}"], what="the package name")))
        parts.append(_call("py_gpu_test", attrs))
    return "\n".join(parts)
