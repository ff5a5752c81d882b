"""Stand-ins for NVIDIA's CUDA wheels, for the real pip to install from a local folder.

`write_cuda_wheels(folder, "13.0.88")` writes the five wheels of `kernelpack.toolchain.
cudawheels.PACKAGES` at that version into `folder`: `nvidia/cu13/bin/nvcc` is a fake nvcc
(`fakes.nvcc`) answering as that release, `nvvm/bin/cicc` a script, `lib/libcudart.so.13` an
empty file. `local_index(folder)` is the environment that makes pip install from `folder`
alone (no index, no configuration of this machine).
"""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from pathlib import Path

from .nvcc import FakeNvcc, nvcc_script

__all__ = ["local_index", "write_cuda_wheels"]


def write_cuda_wheels(folder: Path, nvcc: FakeNvcc) -> Path:
    """Write the five fake CUDA wheels of `nvcc`'s version into `folder`; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    top = f"nvidia/cu{nvcc.version.split('.')[0]}"
    contents: dict[str, dict[str, tuple[str, bool]]] = {
        "nvidia-cuda-nvcc": {f"{top}/bin/nvcc": (nvcc_script(nvcc, '$(dirname "$0")'), True)},
        "nvidia-nvvm": {
            f"{top}/nvvm/bin/cicc": ("#!/bin/sh\nexit 0\n", True),
            f"{top}/nvvm/libdevice/libdevice.10.bc": ("", False),
        },
        "nvidia-cuda-crt": {f"{top}/include/crt/host_config.h": ("/* fake */\n", False)},
        "nvidia-cuda-cccl": {f"{top}/include/cccl/cuda/std/version": ("/* fake */\n", False)},
        "nvidia-cuda-runtime": {
            f"{top}/include/cuda_runtime.h": ("/* fake */\n", False),
            f"{top}/lib/libcudart.so.13": ("", False),
        },
    }
    for name, files in contents.items():
        _wheel(folder, name, nvcc.version, files)
    return folder


def local_index(folder: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """`environ` (default: this process's) with pip installing from `folder` alone."""
    env = {k: v for k, v in (environ or os.environ).items() if not k.startswith(("PIP_", "UV_"))}
    env.update(
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(folder),
        PIP_CONFIG_FILE=os.devnull,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    return env


def _wheel(folder: Path, name: str, version: str, files: dict[str, tuple[str, bool]]) -> None:
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    entries = dict(files)
    entries[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        False,
    )
    entries[f"{info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: kernelpack-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
        False,
    )
    record = []
    for path, (text, _) in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    entries[f"{info}/RECORD"] = ("\n".join(record) + "\n", False)
    with zipfile.ZipFile(folder / f"{dist}-{version}-py3-none-any.whl", "w") as zf:
        for path, (text, executable) in entries.items():
            item = zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0))
            item.external_attr = (0o100755 if executable else 0o100644) << 16
            zf.writestr(item, text)
