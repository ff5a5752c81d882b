"""What the benchmarks record of the GPU machine they ran on, beside torch's own view."""

from __future__ import annotations

import subprocess

__all__ = ["CLOCK_FIELDS", "clock_line", "clocks", "driver", "query"]

#: nvidia-smi's fields for `clocks`: the clocks now, their maxima, the application clocks
#: (what the GPU boosts to under load unless capped) and the power limit.
CLOCK_FIELDS = (
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks.max.mem",
    "clocks.applications.graphics",
    "clocks.applications.memory",
    "power.limit",
)


def query(fields: str) -> str | None:
    """The first GPU's line of `nvidia-smi --query-gpu=FIELDS` (None where it cannot)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def driver() -> str | None:
    """The NVIDIA driver version, as nvidia-smi reports it (None where it cannot)."""
    return query("driver_version")


def clocks() -> dict[str, float | str] | None:
    """`CLOCK_FIELDS` of the first GPU: MHz and W as numbers, what nvidia-smi does not
    report (``[N/A]``) as its text; None where nvidia-smi cannot be run."""
    line = query(",".join(CLOCK_FIELDS))
    if line is None:
        return None
    values = [v.strip() for v in line.split(",")]
    if len(values) != len(CLOCK_FIELDS):
        return None
    out: dict[str, float | str] = {}
    for field, value in zip(CLOCK_FIELDS, values, strict=True):
        try:
            out[field] = float(value)
        except ValueError:
            out[field] = value
    return out


def clock_line(values: dict[str, float | str] | None) -> str:
    """`clocks` in words, for a table's heading."""
    if not values:
        return "clocks: not reported"

    def v(field: str) -> str:
        value = values.get(field, "?")
        return f"{value:g}" if isinstance(value, float) else str(value)

    return (
        f"clocks: SM {v('clocks.sm')} MHz (max {v('clocks.max.sm')}), "
        f"memory {v('clocks.mem')} MHz (max {v('clocks.max.mem')}), "
        f"application {v('clocks.applications.graphics')} / "
        f"{v('clocks.applications.memory')} MHz, power limit {v('power.limit')} W"
    )
