"""kernelpack.bazel."""
