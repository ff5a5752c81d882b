"""Bazel integration: Bazel manages a kernel package's Python layer; the image brings the
native modules. `defs.bzl` (shipped in the wheel) holds the macros, `generator` the files
`kernelpack bazel init` writes, `pytest_runner` what `py_gpu_test` runs, `bridge` the `.pth`
that shows a venv's packages to another interpreter."""
