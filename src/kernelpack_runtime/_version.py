"""The release version of kernelpack and kernelpack-runtime, which are released together.

The one place it is written: both `pyproject.toml` files read it (hatch's dynamic version),
`kernelpack.__version__` and `kernelpack_runtime.__version__` are this value, the record's
`RUNTIME_REQUIREMENT` is derived from it, and a test ties kernelpack's exact pin of
kernelpack-runtime to it.
"""

__version__ = "0.1.0"
