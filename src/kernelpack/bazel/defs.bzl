"""Bazel macros for the Python layer of a CUDA kernel package.

Bazel never compiles the CUDA here. The image builds the native modules (`<pkg>.<kernel>._C`)
and installs the package into its Python; Bazel manages the Python sources and runs the GPU
tests with that Python's site-packages visible. See kernelpack's docs/bazel.md.

`kernelpack bazel init` copies this file into the workspace (default
`tools/kernelpack/defs.bzl`) and `kernelpack bazel init --check` keeps the copy honest.

rules_py 1.x: `py_venv_test` (from `@aspect_rules_py//py/unstable:defs.bzl`) takes
`include_system_site_packages = True`, as used below.

rules_py 2.x removed `py_venv_test`. Replace the second `load` with
`load("@aspect_rules_py//py:defs.bzl", "py_test")` and, in `py_gpu_test`, call
`py_test(..., expose_venv = True, isolated = False, include_system_site_packages = True)`
instead of `py_venv_test(...)`: `expose_venv` gives the test its own venv target, which takes
`include_system_site_packages`; `isolated = False` keeps the interpreter from running with `-I`.
"""

load("@aspect_rules_py//py:defs.bzl", "py_library")
load("@aspect_rules_py//py/unstable:defs.bzl", "py_venv_test")

# Tags every GPU test carries: `bazel test --test_tag_filters=gpu` on GPU runners,
# `--test_tag_filters=-gpu` everywhere else.
GPU_TEST_TAGS = ["gpu", "torch"]

# GPU tests run only on Linux: `bazel test //...` skips them elsewhere, and naming one
# explicitly on another platform is an error.
LINUX = "@platforms//os:linux"

# What a kernel package's Python layer leaves out: its native sources and its tests.
KERNEL_PY_EXCLUDES = [
    "**/csrc/**",
    "**/tests/**",
    "**/test_*.py",
    "**/*_test.py",
    "**/conftest.py",
]

# The test's main: kernelpack's pytest runner, imported from the kernelpack installed in the
# test's Python (the image's site-packages), so its version always matches the runtime's.
_RUNNER_MAIN = "from kernelpack.bazel.pytest_runner import main; raise SystemExit(main())"

def _merged(values, extra):
    """`values` followed by the items of `extra` it lacks; order kept, no duplicates."""
    merged = []
    for value in values + extra:
        if value not in merged:
            merged.append(value)
    return merged

def _workspace_path(src):
    """The workspace-relative path of `src`, a file of the calling package."""
    package = native.package_name()
    if src.startswith("//"):
        label_package, _, file_name = src[2:].partition(":")
        if label_package != package or not file_name:
            fail("py_gpu_test: srcs must be files of this package, got %r" % src)
        src = file_name
    elif src.startswith(":"):
        src = src[1:]
    elif src.startswith("@"):
        fail("py_gpu_test: srcs must be files of this package, got %r" % src)
    return package + "/" + src if package else src

def py_gpu_test(
        name,
        srcs,
        deps = [],
        args = [],
        tags = [],
        target_compatible_with = [],
        size = "large",
        prefer_built = [],
        **kwargs):
    """A pytest test that needs a GPU and the image's native modules.

    A `py_venv_test` with the system site-packages exposed (where the image installed torch,
    the CUDA libraries and the built kernel package), tagged `gpu` and `torch` (added to
    `tags`, no duplicates), Linux only (added to `target_compatible_with`), `size = "large"`
    unless given, whose main is kernelpack's pytest runner (`kernelpack.bazel.pytest_runner`).

    Args:
        name: Target name.
        srcs: The test files (files of this package); pytest runs them in this order.
        deps: Python dependencies (typically the kernel package's `kernel_py_library`).
        args: Extra pytest arguments, after the test files.
        tags: Tags; `gpu` and `torch` are added.
        target_compatible_with: Constraints; `@platforms//os:linux` is added.
        size: Test size; GPU tests are heavyweight, hence `large`.
        prefer_built: Import names of packages whose built copy (the one holding
            `_kernelpack.json`, i.e. the image's) is imported instead of the sources Bazel
            staged, which have no native modules.
        **kwargs: Passed to `py_venv_test` unchanged (`data`, `env`, `timeout`, `shard_count`...).
    """
    if "main" in kwargs:
        fail("py_gpu_test: main is kernelpack's pytest runner; list the test files in srcs")
    if type(target_compatible_with) == "list":
        compatible = _merged(target_compatible_with, [LINUX])
    else:
        compatible = target_compatible_with + [LINUX]
    main = name + ".kernelpack_main.py"
    native.genrule(
        name = name + ".kernelpack_main",
        outs = [main],
        cmd = "echo '%s' > $@" % _RUNNER_MAIN,
        tags = ["manual"],
        target_compatible_with = compatible,
        testonly = True,
        visibility = ["//visibility:private"],
    )
    runner_args = ["--prefer-built=" + package for package in prefer_built]
    py_venv_test(
        name = name,
        srcs = srcs + [main],
        main = main,
        deps = deps,
        args = runner_args + ["--"] + [_workspace_path(src) for src in srcs] + args,
        include_system_site_packages = True,
        tags = _merged(tags, GPU_TEST_TAGS),
        target_compatible_with = compatible,
        size = size,
        **kwargs
    )

def kernel_py_library(name, package, srcs = None, imports = None, **kwargs):
    """The Python layer of a kernel package: its `.py` files without tests and `csrc/`.

    Bazel sees only Python; the native modules come from the image at run time.

    Args:
        name: Target name (usually the package's import name).
        package: The package folder, relative to this BUILD file (e.g. `src/llm_ops`).
        srcs: The sources; default: every `.py` under `package` less `KERNEL_PY_EXCLUDES`.
        imports: Import roots; default: the folder holding `package`.
        **kwargs: Passed to `py_library` unchanged (`deps`, `data`, `visibility`...).
    """
    if srcs == None:
        srcs = native.glob(
            [package + "/**/*.py"],
            exclude = [package + "/" + pattern for pattern in KERNEL_PY_EXCLUDES],
        )
    if imports == None:
        parent = package.rpartition("/")[0]
        imports = [parent if parent else "."]
    py_library(
        name = name,
        srcs = srcs,
        imports = imports,
        **kwargs
    )
