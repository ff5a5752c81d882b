"""`GpuLayout`: which GPUs each pytest-xdist worker holds under `--kernels-gpus`.

Pure arithmetic over the `CUDA_VISIBLE_DEVICES` entries the controller sees; the plugin hands
each worker its entries before the worker's interpreter imports anything. With no more workers
than GPUs, every worker holds the same number of them (a block of `len(gpus) // workers`,
consecutive, so a worker's GPUs sit together as a machine's NVLink groups usually do; the few
left over are unused and said so). With more workers than GPUs, each worker holds one, taken
round-robin, and some workers share a GPU. Every worker holds as many GPUs as every other, so
whether a `gpus(n)` test runs never depends on which worker the scheduler sends it to.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GpuLayout", "parse_gpus_option", "visible_entries"]


def parse_gpus_option(text: str) -> int | None:
    """`--kernels-gpus`: `auto` (None: every visible GPU) or a positive count.

    A `ValueError` quotes the bad value.
    """
    word = text.strip().lower()
    if word == "auto":
        return None
    if word.isdigit() and int(word) > 0:
        return int(word)
    raise ValueError(f"--kernels-gpus {text!r}: expected auto or a number of GPUs such as 4")


def visible_entries(visible: str | None, count: int) -> tuple[str, ...]:
    """The first `count` GPUs this process sees, as `CUDA_VISIBLE_DEVICES` entries.

    `visible` is this process's `CUDA_VISIBLE_DEVICES` (None: unset, every GPU by index), so a
    worker's entries name the same physical GPU as the controller's (an index, a UUID, a MIG
    instance).
    """
    if visible is None:
        return tuple(str(index) for index in range(count))
    return tuple(part.strip() for part in visible.split(","))[:count]


@dataclass(frozen=True)
class GpuLayout:
    """The GPUs (`CUDA_VISIBLE_DEVICES` entries) spread over `workers` workers."""

    gpus: tuple[str, ...]
    workers: int

    def __post_init__(self) -> None:
        if not self.gpus or self.workers < 1:
            raise ValueError("a layout needs at least one GPU and one worker")

    @property
    def per_worker(self) -> int:
        """How many GPUs each worker holds."""
        return max(1, len(self.gpus) // self.workers)

    @property
    def shared(self) -> bool:
        """Whether some workers share a GPU (more workers than GPUs)."""
        return self.workers > len(self.gpus)

    @property
    def unused(self) -> tuple[str, ...]:
        """GPUs no worker holds (those that do not divide evenly among the workers)."""
        if self.shared:
            return ()
        return self.gpus[self.workers * self.per_worker :]

    def held(self, worker: int) -> tuple[str, ...]:
        """The GPUs worker number `worker` (`gw<worker>`) holds, in order."""
        if not 0 <= worker < self.workers:
            raise IndexError(f"worker {worker} of {self.workers}")
        if self.shared:
            return (self.gpus[worker % len(self.gpus)],)
        start = worker * self.per_worker
        return self.gpus[start : start + self.per_worker]

    def summary(self) -> str:
        """One line: how many GPUs, how many workers, how they are shared out."""
        count = len(self.gpus)
        gpus = f"{count} GPU{'s' if count != 1 else ''}"
        workers = f"{self.workers} worker{'s' if self.workers != 1 else ''}"
        if self.shared:
            return f"{gpus} over {workers}, one each, round-robin (some workers share a GPU)"
        text = f"{gpus} over {workers}, {self.per_worker} each"
        if self.unused:
            text += f" ({','.join(self.unused)} unused)"
        return text

    def lines(self) -> list[str]:
        """The session header: the summary, then one line per worker."""
        lines = [f"kernelpack: GPUs of the pytest-xdist workers: {self.summary()}"]
        lines.extend(
            f"  gw{worker}  CUDA_VISIBLE_DEVICES={','.join(self.held(worker))}"
            for worker in range(self.workers)
        )
        return lines
