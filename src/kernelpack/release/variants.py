"""PEP 825 wheel variants of a kernel release: properties, `variant.json`, `*-variants.json`.

Each variant label (`cu130stable2.10`) is one variant; its properties say where it runs, in
the namespaces installers read:

- `nvidia :: cuda_version_lower_bound :: 13.0` (the CUDA the build used) and
  `nvidia :: cuda_version_upper_bound :: 14` (the next major: a CUDA 13 build needs a driver of
  CUDA 13 or newer, and its libraries link the CUDA 13 runtime);
- `nvidia :: sm_arch :: 90_real` for each arch built (`9.0a` and `9.0` alike: the detection
  reports the device's compute capability), plus `<highest>_virtual` when PTX is embedded;
- `abi_dependency :: torch :: 2.14` (PEP 850): the torch minors the build imports under
  (one for the classic ABI; the stable target up to the torch built against for the stable
  ABI). uv 0.13 knows no `abi_dependency` provider of its own and reads the namespace only
  through a static provider declaration, which marks those properties supported everywhere:
  the wheel's exact `Requires-Dist` on torch stays the constraint that holds.

The `nvidia` provider is declared as uv's built-in NVIDIA detection reads it
(`nvidia-variant-provider`, `nvidia_variant_provider.plugin:NvidiaVariantPlugin`). The `null`
variant has no properties: every machine accepts it, and an installer takes it when no other
variant fits (a machine without an NVIDIA GPU or driver).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from packaging.version import Version

from kernelpack.release.distfiles import KernelWheel
from kernelpack_runtime.arch import Arch
from kernelpack_runtime.reason import Reason
from kernelpack_runtime.record import BuildRecord, BuiltKernel, SkippedKernel

__all__ = [
    "NULL",
    "SCHEMA",
    "Properties",
    "null_record",
    "properties",
    "variant_json",
    "variants_json",
]

#: The PEP 825 schema uv 0.13 writes and reads.
SCHEMA = "https://variants-schema.wheelnext.dev/peps/825/v0.1.1.json"
#: The always-compatible fallback variant (PEP 825).
NULL = "null"

_NVIDIA_PROVIDER = {
    "requires": ["nvidia-variant-provider"],
    "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin",
}
_NAMESPACES = ("nvidia", "abi_dependency")

Properties = dict[str, dict[str, list[str]]]
"""namespace -> feature -> values."""


def _cuda(wheel: KernelWheel) -> tuple[int, int]:
    text = wheel.record.toolchain.cuda
    if text:
        release = Version(text).release
        return release[0], release[1] if len(release) > 1 else 0
    digits = wheel.cuda[2:]
    return int(digits[:-1]), int(digits[-1])


def _torch_minors(wheel: KernelWheel) -> list[str]:
    floor = wheel.abi.torch.release
    if wheel.abi.kind == "torch":
        return [f"{floor[0]}.{floor[1]}"]
    built = Version(wheel.record.toolchain.torch or str(wheel.abi.torch)).release
    top = built[1] if built[0] == floor[0] else floor[1]
    return [f"{floor[0]}.{minor}" for minor in range(floor[1], max(top, floor[1]) + 1)]


def properties(wheel: KernelWheel) -> Properties:
    """The variant properties of one kernel wheel."""
    major, minor = _cuda(wheel)
    archs: set[Arch] = set()
    virtual: set[str] = set()
    for kernel in wheel.record.kernels.values():
        if isinstance(kernel, BuiltKernel):
            parsed = list(kernel.archs)
            archs.update(parsed)
            if kernel.ptx and parsed:
                top = max(parsed)
                virtual.add(f"{top.major}{top.minor}_virtual")
    sm = sorted({f"{a.major}{a.minor}_real" for a in archs} | virtual)
    nvidia = {
        "cuda_version_lower_bound": [f"{major}.{minor}"],
        "cuda_version_upper_bound": [str(major + 1)],
    }
    if sm:
        nvidia["sm_arch"] = sm
    return {"nvidia": nvidia, "abi_dependency": {"torch": _torch_minors(wheel)}}


def merged(many: Iterable[Properties]) -> Properties:
    """The union of several wheels' properties (one label built for several platforms)."""
    result: Properties = {}
    for props in many:
        for namespace, features in props.items():
            target = result.setdefault(namespace, {})
            for feature, values in features.items():
                target[feature] = sorted(set(target.get(feature, [])) | set(values))
    return result


def _document(variants: Mapping[str, Properties]) -> dict[str, Any]:
    torches = sorted(
        {
            v
            for props in variants.values()
            for v in props.get("abi_dependency", {}).get("torch", [])
        },
        key=Version,
    )
    return {
        "$schema": SCHEMA,
        "default-priorities": {"namespace": list(_NAMESPACES)},
        "providers": {
            "nvidia": _NVIDIA_PROVIDER,
            "abi_dependency": {"static-properties": {"torch": torches}},
        },
        "variants": dict(variants),
    }


def variants_json(variants: Mapping[str, Properties]) -> bytes:
    """The index file `<name>-<version>-variants.json` for every variant (null included)."""
    return (json.dumps(_document(variants), indent=2) + "\n").encode()


def variant_json(variants: Mapping[str, Properties], label: str) -> bytes:
    """A wheel's `*.dist-info/variant.json`: the shared providers and priorities (equal to the
    index file's, as PEP 825 requires) and its own variant only."""
    document = _document(variants)
    document["variants"] = {label: variants[label]}
    return (json.dumps(document, indent=2) + "\n").encode()


def null_record(record: BuildRecord, version: str, install: Sequence[str]) -> BuildRecord:
    """`record` as the null variant holds it: every kernel `not-selected`, saying why and
    how to get a build with compiled kernels (`install`: the commands, one per channel)."""
    hint = "; ".join(install)
    kernels = {
        name: SkippedKernel(
            Reason(
                "not-selected",
                "this is the null wheel variant, which holds no compiled library (the "
                f"installer found no NVIDIA GPU and driver that another variant fits); {hint}",
            ),
            namespace=kernel.namespace,
        )
        for name, kernel in record.kernels.items()
    }
    return BuildRecord(
        package=record.package,
        version=version,
        toolchain=record.toolchain,
        kernels=kernels,
        env_prefix=record.env_prefix,
        release=record.release,
    )
