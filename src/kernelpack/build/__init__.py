"""kernelpack.build."""
