"""What the benchmarks record of the GPU machine they ran on, beside torch's own view."""

from __future__ import annotations

import subprocess

__all__ = ["driver"]


def driver() -> str | None:
    """The NVIDIA driver version, as nvidia-smi reports it (None where it cannot)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None
