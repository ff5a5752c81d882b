"""The torch.ops namespace of a kernel, as its build record says (never hard-coded)."""

from __future__ import annotations

from kernelpack.runtime import registry_for

__all__ = ["ops_namespace"]


def ops_namespace(module_name: str) -> str:
    """The namespace the build gave kernel module `module_name` (e.g. ``"llm_ops.rmsnorm"``)."""
    package, _, kernel = module_name.rpartition(".")
    registry = registry_for(package)
    record = registry.record
    spec = record.kernels.get(kernel) if record is not None else None
    if spec is None or not spec.namespace:
        problem = registry.record_problem or f"the build record has no namespace for {kernel!r}"
        raise ImportError(f"{module_name}: {problem}")
    return spec.namespace
