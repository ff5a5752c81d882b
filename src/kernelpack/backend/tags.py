"""Wheel tags: `cp311-cp311-manylinux_2_28_x86_64`, or `cp310-abi3-…` when every kernel is stable.

The platform tag comes from the libraries themselves, judged by auditwheel's policies (the
same code as `auditwheel show`): the highest glibc their versioned symbols need, the ISA
extensions they use, and the external libraries they link, where torch's and CUDA's
libraries do not count (they come from torch's wheels at run time, as in every torch
extension's wheel). When no manylinux policy fits, the tag is `linux_<arch>`, which PyPI
refuses, and a warning says why.
"""

from __future__ import annotations

import logging
import platform
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.tags import Tag, interpreter_name, interpreter_version
from wheel.wheelfile import WheelFile

from kernelpack.plan import BuildPlan

__all__ = [
    "EXTERNAL_LIBRARIES",
    "PlatformTag",
    "platform_tag",
    "provisional_platform",
    "wheel_tag",
]

#: Libraries a kernel links that torch's wheel (and its `nvidia-*` dependencies) provide:
#: left out of the external-library check, as torch extension projects do with
#: `auditwheel repair --exclude`.
EXTERNAL_LIBRARIES = frozenset(
    {
        "libtorch*.so*",
        "libc10*.so*",
        "libshm*.so*",
        "libcudart.so*",
        "libcuda.so*",
        "libnvrtc*.so*",
        "libnvJitLink.so*",
        "libcublas*.so*",
        "libcufft*.so*",
        "libcurand.so*",
        "libcusolver*.so*",
        "libcusparse*.so*",
        "libcudnn*.so*",
        "libnccl.so*",
        "libnvToolsExt.so*",
        "libnvtx3interop.so*",
        "libcupti.so*",
        "libcufile*.so*",
        "libnvshmem*.so*",
    }
)


@dataclass(frozen=True)
class PlatformTag:
    """The platform part of a wheel tag and, for `linux_*`, why no policy fits."""

    name: str
    """`manylinux_2_28_x86_64`, or `linux_x86_64`."""
    warning: str | None = None


def _machine() -> str:
    return platform.machine()


def platform_tag(libraries: Sequence[Path]) -> PlatformTag:
    """The best manylinux tag for `libraries` (the lowest policy of this machine when there
    are none: the wheel holds no native code)."""
    from auditwheel.architecture import Architecture
    from auditwheel.libc import Libc
    from auditwheel.policy import WheelPolicies
    from auditwheel.wheel_abi import analyze_wheel_abi

    if not libraries:
        policies = WheelPolicies(libc=Libc.GLIBC, arch=Architecture.detect())
        return PlatformTag(policies.lowest.name)
    with tempfile.TemporaryDirectory(prefix="kernelpack-tag-") as tmp:
        # auditwheel judges wheels: a stored (uncompressed) one with just the libraries.
        probe = Path(tmp) / f"probe-0-py3-none-linux_{_machine()}.whl"
        with WheelFile(probe, "w", compression=zipfile.ZIP_STORED) as whl:
            for index, library in enumerate(libraries):
                whl.write(str(library), f"probe/{index}/{library.name}")
            whl.writestr("probe-0.dist-info/METADATA", "Metadata-Version: 2.1\nName: probe\n")
            whl.writestr(
                "probe-0.dist-info/WHEEL",
                f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {probe.stem[8:]}\n",
            )
        logging.getLogger("auditwheel").setLevel(logging.ERROR)
        info = analyze_wheel_abi(
            None,
            None,
            probe,
            EXTERNAL_LIBRARIES,
            disable_isa_ext_check=False,
            allow_graft=False,
        )
    policies = info.policies
    overall = info.overall_policy
    if overall != policies.linux:
        return PlatformTag(overall.name)
    if info.ref_policy == policies.linux:
        needed = sorted(info.external_refs[policies.highest.name].libs)
        why = f"link {', '.join(needed)}, which no manylinux policy allows"
    elif info.sym_policy == policies.linux:
        symbols = sorted(f"{v}" for versions in info.versioned_symbols.values() for v in versions)
        why = f"need symbol versions newer than any manylinux policy ({', '.join(symbols)})"
    elif info.machine_policy == policies.linux:
        why = "use instruction-set extensions no manylinux policy allows"
    else:
        why = "use symbols no manylinux policy allows"
    return PlatformTag(
        overall.name,
        f"warning: wheel tagged {overall.name}: its libraries {why}; PyPI refuses this tag",
    )


def wheel_tag(plan: BuildPlan, platform_name: str) -> Tag:
    """`cp311-cp311-<platform>`, or `cp3X-abi3-<platform>` (X: the plan's Python floor) when
    every kernel is stable (`BuildPlan.all_stable`)."""
    if plan.all_stable:
        floor = plan.python_floor
        return Tag(f"cp{floor[0]}{floor[1]}", "abi3", platform_name)
    python = f"{interpreter_name()}{interpreter_version()}"
    return Tag(python, python, platform_name)


def provisional_platform() -> str:
    """`linux_<arch>`: the platform of a wheel whose libraries are not built yet (the WHEEL
    file of `prepare_metadata_for_build_wheel`) or never shipped (an editable wheel)."""
    return f"linux_{_machine()}"
