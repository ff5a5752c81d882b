"""kernelpack.release."""
