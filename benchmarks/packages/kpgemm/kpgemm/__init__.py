"""One CUTLASS GEMM, built to measure compile caching (no op is registered)."""

from kernelpack_runtime import Registry

status, is_available, unavailable_reason, load = Registry(__name__).api()
