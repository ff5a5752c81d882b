"""Each compile's measured peak memory, kept in the build folder, and the job plan made from it.

Every compile of the graph runs behind a small shim (`kernelpack.builder._peak`) that waits
for it with `wait4` and appends its peak resident memory to `compile-peaks.log`; `collect()`
folds the log into `compile-peaks.json` (output -> bytes, the largest seen: a cache hit that
used little memory never lowers a compile's known peak), before the plan and after the
build. The plan (`Budget.for_build`) budgets each job with the largest measured peak of its
pool, and with the per-kind estimate (`graph.HEAVY_JOB_BYTES` / `graph.LIGHT_JOB_BYTES`)
while no compile of the pool has been measured. A peak is one process's (`wait4` reports
the largest one below the command): for nvcc, one cicc, so one nvcc thread's memory; a
compile of N threads needs about N times it (`graph.Pools.for_memory`).

The shim also notes a compile that the kernel's out-of-memory killer ended; `killed()` finds
it, and the engine reports it as `OutOfMemory` (never as a compile error) and runs the rest
of the graph again with fewer compiles at once (`Budget.fewer`), once.

With sccache as the launcher the compiles run inside sccache's server, not below the
command ninja starts, so there is nothing to measure: no shim, the previous measurements
or the estimates stay in use.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kernelpack.builder import _peak
from kernelpack.builder.graph import HEAVY_JOB_BYTES, LIGHT_JOB_BYTES, Pools
from kernelpack.errors import BuildError
from kernelpack_runtime._files import write_text_atomic

__all__ = [
    "LOG_FILE",
    "PEAKS_FILE",
    "Budget",
    "JobMemory",
    "OutOfMemory",
    "collect",
    "killed",
    "load",
    "measurable",
    "plan",
    "shim",
    "unshim",
]

#: The build folder's measured peaks: `{"obj/k/k.cu.o": bytes, ...}`.
PEAKS_FILE = "compile-peaks.json"
#: What the shims of the running build append to (`output<TAB>bytes<TAB>end` lines).
LOG_FILE = "compile-peaks.log"

_GIB = 1024**3
_POOLS = ("heavy", "light")


def shim(oom_counters: Sequence[Path] = ()) -> list[str]:
    """The words the graph puts before `$out -- <compile command>`: this interpreter, in
    isolated mode without `site` (it starts in milliseconds), running the shim;
    `oom_counters` replace the cgroup's count of out-of-memory kills (`_peak`)."""
    words = [sys.executable, "-I", "-S", str(Path(_peak.__file__)), LOG_FILE]
    for counter in oom_counters:
        words += ["--oom-counter", str(counter)]
    return words


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
    """Fold the log into the kept peaks (the largest per output); return them."""
    log = build_dir / LOG_FILE
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return load(build_dir)
    peaks = load(build_dir)
    for output, value, _ in _records(text):
        if value > 0:
            peaks[output] = max(peaks.get(output, 0), value)
    write_text_atomic(build_dir / PEAKS_FILE, json.dumps(peaks, indent=1, sort_keys=True) + "\n")
    log.unlink(missing_ok=True)
    return peaks


def killed(build_dir: Path, output: str) -> int | None:
    """The peak (bytes) of the last run of compile `output` in the log when the kernel's
    out-of-memory killer ended it; None when it did not (or was not measured)."""
    try:
        text = (build_dir / LOG_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    last = None
    for record in _records(text):
        if record[0] == output:
            last = record
    return last[1] if last is not None and last[2] else None


def _records(text: str) -> Iterator[tuple[str, int, bool]]:
    """(output, peak bytes, killed by the out-of-memory killer) of each whole log line."""
    for line in text.splitlines():
        head, _, end = line.rpartition("\t")
        output, _, value = head.rpartition("\t")
        if output and value.isdigit() and end in ("-", _peak.OOM):
            yield output, int(value), end == _peak.OOM


@dataclass(frozen=True)
class JobMemory:
    """Memory budgeted per job (one nvcc thread) of each pool, and why."""

    heavy: int
    light: int
    heavy_why: str
    light_why: str

    def of(self, pool: str) -> tuple[int, str]:
        """(bytes, why) of `pool`."""
        return (self.heavy, self.heavy_why) if pool == "heavy" else (self.light, self.light_why)


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


class OutOfMemory(BuildError):
    """A compile the kernel's out-of-memory killer ended: not an error in the code."""

    def __init__(self, step: str, output: str, peak: int) -> None:
        self.step = step
        """The compile as the build names it (`kernel 'k': csrc/k.cu`)."""
        self.output = output
        self.peak = peak
        """Its largest process's peak, in bytes."""
        super().__init__(
            f"{step}: killed by the out-of-memory killer at {peak / _GIB:.1f} GiB "
            "(its largest process)"
        )


@dataclass(frozen=True)
class Budget:
    """The build's memory plan: ninja's jobs, the pools, and the figures they come from."""

    jobs: int
    pools: Pools
    per_job: JobMemory
    compiles: Mapping[str, Mapping[str, int]]
    """Each pool's compiles: output -> the nvcc threads it asks for (`graph.compiles`)."""
    available: int | None
    """Bytes of memory free when the build started (None: unknown)."""

    @classmethod
    def for_build(
        cls,
        compiles: Mapping[str, Mapping[str, int]],
        peaks: Mapping[str, int],
        *,
        jobs: int,
        available: int | None,
    ) -> Budget:
        """The plan of a build of `compiles` with `jobs` jobs and `available` bytes free,
        from the `peaks` measured so far (the estimates where there are none)."""
        per_job = plan(
            compiles, peaks, heavy_estimate=HEAVY_JOB_BYTES, light_estimate=LIGHT_JOB_BYTES
        )
        pools = Pools.for_memory(
            jobs,
            available,
            heavy_threads=_most(compiles.get("heavy", {})),
            light_threads=_most(compiles.get("light", {})),
            heavy_bytes=per_job.heavy,
            light_bytes=per_job.light,
        )
        return cls(jobs, pools, per_job, compiles, available)

    def describe(self) -> str:
        """`heavy pool 1 x 6 nvcc threads x 3.0 GiB (estimate: ...), nvcc --threads lowered
        from 9 to 6 to fit one compile; light pool ...; 20.1 GiB free`."""
        free = "free memory unknown"
        if self.available is not None:
            free = f"{self.available / _GIB:.1f} GiB free"
        return "; ".join([*(self._pool_text(pool) for pool in _POOLS), free])

    def _pool_text(self, pool: str) -> str:
        """One pool's part of `describe`."""
        asked = _most(self.compiles.get(pool, {}))
        threads = self.pools.cap(pool, asked)
        size, why = self.per_job.of(pool)
        text = f"{pool} pool {self.pools.slots(pool)}"
        if asked > 1:
            text += f" x {threads} nvcc threads"
        text += f" x {size / _GIB:.1f} GiB ({why})"
        if threads < asked:
            text += f", nvcc --threads lowered from {asked} to {threads} to fit one compile"
        return text

    def fewer(self, pending: Iterable[str] | None) -> Budget:
        """The plan of the retry after an out-of-memory kill: half the jobs, and the compiles
        still to run (`pending`; None: unknown, all) with one nvcc thread (`Pools.fewer`)."""
        return replace(self, jobs=max(1, self.jobs // 2), pools=self.pools.fewer(pending))

    def retrying(self, killed: OutOfMemory, retry: Budget) -> str:
        """The line that says a compile was killed and how `retry` runs the rest."""
        return (
            f"{killed}, with {self.at_once(killed.output)} at once; retrying with "
            f"{retry.at_once(killed.output)} at once"
        )

    def exhausted(self, killed: OutOfMemory) -> str:
        """The error of a compile killed again in the retry (`self`): what it ran with,
        the memory free, and what to change."""
        free = ""
        if self.available is not None:
            free = f" ({self.available / _GIB:.1f} GiB free when the build started)"
        return (
            f"{killed} even with {self.at_once(killed.output)} at once{free}: free memory, "
            "or build less at once: MAX_JOBS=1 (or -j 1) runs one compile at a time, and "
            "fewer archs (TORCH_CUDA_ARCH_LIST, only the GPUs you need) fewer nvcc threads "
            "in each"
        )

    def at_once(self, output: str) -> str:
        """`2 compiles of 9 nvcc threads`: how many compiles of `output`'s pool could run at
        once, and with how many threads each."""
        pool = next((p for p in _POOLS if output in self.compiles.get(p, {})), None)
        if pool is None:
            return _count(self.jobs, "compile")
        mine = self.compiles[pool]
        slots = min(self.pools.slots(pool), self.jobs, len(mine))
        threads = self.pools.threads(output, pool, mine[output])
        kind = "nvcc thread" if output.endswith(".cu.o") else "thread"
        return f"{_count(slots, 'compile')} of {_count(threads, kind)}"


def _most(threads: Mapping[str, int]) -> int:
    """The most threads one of these compiles asks for (1 when there are none)."""
    return max(threads.values(), default=1)


def _count(number: int, noun: str) -> str:
    """`1 compile`, `2 compiles`."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def measurable(launcher: Path | None) -> bool:
    """Whether a compile run through `launcher` runs below the shim (no launcher, ccache);
    sccache runs compiles in its server."""
    return launcher is None or not launcher.name.startswith("sccache")
