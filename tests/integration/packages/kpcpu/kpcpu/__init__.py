"""kernelpack's integration-test package: one CPU kernel, usable without a GPU."""

from kernelpack_runtime import Registry

status, is_available, unavailable_reason, load = Registry(__name__).api()
