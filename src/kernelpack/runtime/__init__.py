"""kernelpack.runtime."""
