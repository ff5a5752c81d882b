"""Each compile's measured peak memory, kept in the build folder, and the job plan made from it.

Every compile of the graph runs behind a small shim (`kernelpack.builder._peak`) that waits
for it with `wait4` and appends its peak resident memory to `compile-peaks.log`; after the
build, `collect()` folds the log into `compile-peaks.json` (output -> bytes, the largest
seen: a cache hit that used little memory never lowers a compile's known peak). The next
build's pools (`plan()`) budget each job with the largest measured peak of its pool, and
with the per-kind estimate (`graph.HEAVY_JOB_BYTES` / `graph.LIGHT_JOB_BYTES`) while no
compile of the pool has been measured.

With sccache as the launcher the compiles run inside sccache's server, not below the
command ninja starts, so there is nothing to measure: no shim, the previous measurements
or the estimates stay in use.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kernelpack.builder import _peak
from kernelpack_runtime._files import write_text_atomic

__all__ = [
    "LOG_FILE",
    "PEAKS_FILE",
    "JobMemory",
    "collect",
    "load",
    "measurable",
    "plan",
    "shim",
    "unshim",
]

#: The build folder's measured peaks: `{"obj/k/k.cu.o": bytes, ...}`.
PEAKS_FILE = "compile-peaks.json"
#: What the shims of the running build append to (`output<TAB>bytes` lines).
LOG_FILE = "compile-peaks.log"

_GIB = 1024**3


def shim() -> list[str]:
    """The words the graph puts before `$out -- <compile command>`: this interpreter, in
    isolated mode without `site` (it starts in milliseconds), running the shim."""
    return [sys.executable, "-I", "-S", str(Path(_peak.__file__)), LOG_FILE]


def unshim(command: str) -> str:
    """A compile command without the shim in front (for `compile_commands.json`, `-v`)."""
    prefix = " ".join(shim()[:3])
    if command.startswith(prefix) and " -- " in command:
        return command.split(" -- ", 1)[1]
    return command


def load(build_dir: Path) -> dict[str, int]:
    """The peaks measured so far in `build_dir` (output -> bytes); empty when none."""
    try:
        data = json.loads((build_dir / PEAKS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if type(v) is int and v > 0}


def collect(build_dir: Path) -> dict[str, int]:
    """Fold this build's log into the kept peaks (the largest per output); return them."""
    log = build_dir / LOG_FILE
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return load(build_dir)
    peaks = load(build_dir)
    for line in text.splitlines():
        output, _, value = line.rpartition("\t")
        if output and value.isdigit() and int(value) > 0:
            peaks[output] = max(peaks.get(output, 0), int(value))
    write_text_atomic(build_dir / PEAKS_FILE, json.dumps(peaks, indent=1, sort_keys=True) + "\n")
    log.unlink(missing_ok=True)
    return peaks


@dataclass(frozen=True)
class JobMemory:
    """Memory budgeted per job of each pool, and why."""

    heavy: int
    light: int
    heavy_why: str
    light_why: str

    def describe(self, heavy_slots: int, light_slots: int, available: int | None) -> str:
        """`heavy 1 x 3.0 GiB (estimate: ...); light 2 x 0.4 GiB (measured ...); 20.1 GiB free`."""
        free = "free memory unknown" if available is None else f"{available / _GIB:.1f} GiB free"
        return (
            f"heavy pool {heavy_slots} x {self.heavy / _GIB:.1f} GiB ({self.heavy_why}); "
            f"light pool {light_slots} x {self.light / _GIB:.1f} GiB ({self.light_why}); {free}"
        )


def plan(
    outputs: Mapping[str, Iterable[str]],
    peaks: Mapping[str, int],
    *,
    heavy_estimate: int,
    light_estimate: int,
) -> JobMemory:
    """Per-job memory of the `heavy` and `light` pools, whose compiles' outputs `outputs`
    lists: the largest measured peak among them, else the estimate."""

    def one(pool: str, estimate: int) -> tuple[int, str]:
        mine = list(outputs.get(pool, ()))
        measured = {o: peaks[o] for o in mine if o in peaks}
        if not measured:
            return estimate, "estimate: no compile of the pool measured yet"
        largest = max(measured, key=lambda o: measured[o])
        return measured[largest], (
            f"measured peak of {largest}, {len(measured)} of {len(mine)} compiles measured"
        )

    heavy, heavy_why = one("heavy", heavy_estimate)
    light, light_why = one("light", light_estimate)
    return JobMemory(heavy=heavy, light=light, heavy_why=heavy_why, light_why=light_why)


def measurable(launcher: Path | None) -> bool:
    """Whether a compile run through `launcher` runs below the shim (no launcher, ccache);
    sccache runs compiles in its server."""
    return launcher is None or not launcher.name.startswith("sccache")
