"""The compile engine: one ninja graph for all kernels of a plan, compiled, checked and
installed atomically (`engine`, `flags`, `graph`, `ninja`, `lock`, `install`, `modinit`)."""
