"""The names `depends` may hold, and the exact version each pinned name means.

`cutlass` is the CUTLASS of the installed `nvidia-cutlass` wheel, whatever its version.
`cutlass_X_Y` is CUTLASS X.Y exactly, as kernel-builder (Hugging Face) spells it in
`build.toml`: the release it names is kernel-builder's (`cutlass_3_9` is 3.9.2), and for the
names kernel-builder does not know, the newest `nvidia-cutlass` wheel of that minor on PyPI.
Where the headers come from (an override, a wheel, a verified source archive) is the
toolchain's business (`kernelpack.toolchain.deps`); this module only knows the names, so both
manifest readers can check them without touching the machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from packaging.version import Version

__all__ = [
    "BUILTIN_DEPS",
    "KERNEL_BUILDER_DEPS",
    "OTHER_BACKEND_DEPS",
    "PINNED_DEPS",
    "is_known",
    "is_pinned",
    "known_names",
]

#: Built-in `depends` names -> the Python package (wheel) that ships their headers.
BUILTIN_DEPS: Mapping[str, str] = MappingProxyType({"cutlass": "cutlass_library"})

#: `cutlass_X_Y` -> the CUTLASS release it means (git tag `v<version>` of NVIDIA/cutlass).
PINNED_DEPS: Mapping[str, Version] = MappingProxyType(
    {
        name: Version(version)
        for name, version in (
            ("cutlass_2_10", "2.10.0"),  # kernel-builder
            ("cutlass_3_3", "3.3.0"),
            ("cutlass_3_4", "3.4.1"),
            ("cutlass_3_5", "3.5.1"),  # kernel-builder
            ("cutlass_3_6", "3.6.0"),  # kernel-builder
            ("cutlass_3_7", "3.7.0"),
            ("cutlass_3_8", "3.8.0"),  # kernel-builder
            ("cutlass_3_9", "3.9.2"),  # kernel-builder
            ("cutlass_4_0", "4.0.0"),  # kernel-builder
            ("cutlass_4_2", "4.2.0"),
            ("cutlass_4_4", "4.4.2"),  # kernel-builder
            ("cutlass_4_5", "4.5.2"),  # kernel-builder
        )
    }
)

#: Every CUDA dependency name kernel-builder's `build.toml` may hold: `torch` (its headers,
#: always on the include path: nothing to add) and the pinned CUTLASS releases.
KERNEL_BUILDER_DEPS: frozenset[str] = frozenset({"torch", *PINNED_DEPS})

#: Names kernel-builder knows for the backends kernelpack does not build: valid there, unused.
OTHER_BACKEND_DEPS: frozenset[str] = frozenset({"sycl_tla", "metal-cpp"})


def is_pinned(name: str) -> bool:
    """Whether `name` is a built-in name of an exact release (`cutlass_4_0`)."""
    return name in PINNED_DEPS


def is_known(name: str, project_deps: Mapping[str, str] | None = None) -> bool:
    """Whether `depends` may hold `name`: a built-in (`cutlass`, `cutlass_X_Y` of
    `PINNED_DEPS`) or a `[tool.kernelpack.deps]` entry (`project_deps`)."""
    return name in BUILTIN_DEPS or name in PINNED_DEPS or name in (project_deps or {})


def known_names(project_deps: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Every name `depends` may hold, sorted (pinned releases by version), for messages."""
    pinned = sorted(PINNED_DEPS, key=lambda name: PINNED_DEPS[name])
    return (*sorted(BUILTIN_DEPS), *pinned, *sorted(project_deps or {}))
