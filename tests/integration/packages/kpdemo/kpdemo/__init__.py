"""kernelpack's integration-test package (one stable-ABI kernel, one classic kernel)."""
