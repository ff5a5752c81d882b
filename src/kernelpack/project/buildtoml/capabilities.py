"""kernel-builder's CUDA capabilities: its default set per CUDA release and its "loose
intersection" of a kernel's `cuda-capabilities` with the set it builds for.

From kernel-builder's CMake templates (`preamble.cmake`, `utils.cmake`): a kernel without
`cuda-capabilities` is built for the default set (with PTX of its last entry); a kernel with
them is built, for each arch of the default set, for the highest of its own capabilities
that is not above that arch and has the same major (or asks for PTX, which runs on later
majors). An `X.Ya`/`X.Yf` capability is kept whole when `X.Y` is in the set (and takes that
arch's place). So `"11.8"`, which no GPU has, matches nothing and is dropped, never an error.
"""

from __future__ import annotations

from collections.abc import Sequence

from packaging.version import Version

__all__ = ["default_capabilities", "loose_intersection", "without_ptx"]

_CUDA_13 = ("7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "11.0", "12.0", "12.1+PTX")
_CUDA_12_8 = ("7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.1", "12.0+PTX")
_OLDER = ("7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0+PTX")
_PTX = "+PTX"


def default_capabilities(cuda: Version | None) -> tuple[str, ...]:
    """The capabilities kernel-builder builds a kernel for when it lists none (`+PTX`: also
    that arch's PTX); `cuda` None: the newest set."""
    if cuda is None or cuda.release >= (13, 0):
        return _CUDA_13
    if cuda.release >= (12, 8):
        return _CUDA_12_8
    return _OLDER


def without_ptx(capabilities: Sequence[str]) -> tuple[str, ...]:
    """The archs of `capabilities` without their `+PTX` suffixes, sorted, no repeats."""
    return tuple(sorted({c.removesuffix(_PTX) for c in capabilities}, key=_key))


def loose_intersection(kernel: Sequence[str], targets: Sequence[str]) -> tuple[str, ...]:
    """The capabilities a kernel listing `kernel` is built for, when the project is built
    for `targets` (suffix-free archs): a subset of `kernel`, `+PTX` kept where asked."""
    ptx = {c.removesuffix(_PTX) for c in kernel if c.endswith(_PTX)}
    wanted = list(dict.fromkeys(c.removesuffix(_PTX) for c in kernel))
    remaining = list(targets)
    chosen: list[str] = []
    for capability in list(wanted):
        if capability[-1] in "af":
            wanted.remove(capability)
            base = capability[:-1]
            if base in targets:
                if base in remaining:
                    remaining.remove(base)
                chosen.append(capability)
    wanted.sort(key=_key)
    for target in remaining:
        found = None
        for capability in wanted:
            if _key(capability) > _key(target):
                break
            if capability in ptx or capability.split(".")[0] == target.split(".")[0]:
                found = capability
        if found is not None:
            chosen.append(found)
    unique = sorted(dict.fromkeys(chosen), key=_key)
    return tuple(f"{c}{_PTX}" if c in ptx else c for c in unique)


def _key(capability: str) -> tuple[int, int, str]:
    base = capability.removesuffix(_PTX)
    suffix = base[-1] if base[-1] in "af" else ""
    major, minor = base.rstrip("af").split(".")
    return (int(major), int(minor), suffix)
