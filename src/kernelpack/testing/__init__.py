"""kernelpack.testing."""
