"""Terminal output of the CLI: tables that never wrap outside a terminal, and the build summary.

On a terminal a table is a rich `Table`. Anywhere else (a pipe, a CI log, a file) it is one
plain line per row, columns padded but never wrapped or folded, whatever the width (`COLUMNS`
included): a CI log keeps each reason on the line of its kernel, and `grep` finds it. The
build summary ends with one line saying what the build did (`outcome`); before a build, one
line says which build variables were set and what they did (`settings_line`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kernelpack_runtime.record import BuiltKernel, SkippedKernel

if TYPE_CHECKING:
    from kernelpack.builder.outputs import BuildResult
    from kernelpack.plan import BuildPlan

__all__ = [
    "console",
    "outcome",
    "plain_lines",
    "print_result_line",
    "print_summary",
    "print_table",
    "settings_line",
]

_GAP = "  "


def console(*, stderr: bool = False) -> Console:
    """A console for CLI output: soft-wrapped (long lines stay whole) outside a terminal."""
    probe = Console(stderr=stderr)
    return Console(stderr=stderr, highlight=False, soft_wrap=not probe.is_terminal)


def print_table(console: Console, table: Table) -> None:
    """Print `table`: as drawn by rich on a terminal, else as `plain_lines`."""
    if console.is_terminal:
        console.print(table)
        return
    for line in plain_lines(console, table):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def plain_lines(console: Console, table: Table) -> list[str]:
    """`table` as text lines: its title, the header, one line per row, its caption.

    Cells become their plain text (markup and styles dropped); a cell of several lines is
    joined into one with "; ".
    """

    def text(cell: object) -> str:
        if isinstance(cell, Text):
            plain = cell.plain
        elif isinstance(cell, str):
            plain = console.render_str(cell).plain
        else:
            plain = str(cell)
        return "; ".join(part.strip() for part in plain.splitlines() if part.strip())

    columns = [[text(cell) for cell in column.cells] for column in table.columns]
    rows = [list(row) for row in zip(*columns, strict=True)] if columns else []
    if table.show_header and any(text(c.header) for c in table.columns):
        rows.insert(0, [text(column.header) for column in table.columns])
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(len(columns))]
    lines = []
    if table.title is not None:
        lines.append(text(table.title))
    for row in rows:
        padded = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])]
        lines.append(_GAP.join([*padded, row[-1]]).rstrip())
    if table.caption is not None:
        lines.append(text(table.caption))
    return lines


def outcome(result: BuildResult, wheel: Path | None = None) -> str:
    """The build's last line, true to what happened: the wheel (or in-place build) and the
    kernels it holds, or that it holds none and why."""
    built = [name for name, record in result.record.kernels.items() if record.built]
    skipped = [
        f"{name} ({record.reason.code})"
        for name, record in result.record.kernels.items()
        if isinstance(record, SkippedKernel)
    ]
    if not built:
        why = f"skipped {', '.join(skipped)}" if skipped else "the manifest declares none"
        if wheel is not None:
            return f"wrote a wheel with no kernels built ({why}): {wheel}"
        return f"built no kernel ({why})"
    holds = f"{len(built)} kernel(s): {', '.join(built)}"
    if skipped:
        holds += f"; skipped {', '.join(skipped)}"
    if wheel is not None:
        return f"wrote {wheel} ({holds})"
    return f"installed in place ({holds})"


def print_summary(result: BuildResult, console: Console, wheel: Path | None = None) -> None:
    """Print the kernels table, the steps by wall time when anything ran, and `outcome()`."""
    kernels = Table(title=f"{result.record.package} {result.record.version}", title_justify="left")
    kernels.add_column("kernel")
    kernels.add_column("status")
    kernels.add_column("abi / archs / reason")
    for name, record in result.record.kernels.items():
        if isinstance(record, BuiltKernel):
            archs = " ".join(str(arch) for arch in record.archs)
            detail = f"{record.abi}  {archs}  {record.library}"
            kernels.add_row(name, "[green]built[/]", detail)
        else:
            reason = f"{record.reason.code}: {record.reason.message}"
            kernels.add_row(name, "[yellow]skipped[/]", reason)
    print_table(console, kernels)
    if not result.steps:
        if result.libraries:
            console.print(f"nothing to do: every library is up to date ({result.seconds:.2f} s)")
        console.print(outcome(result, wheel), highlight=False, markup=False, soft_wrap=True)
        return
    steps = Table(title="steps run (wall time)", title_justify="left")
    steps.add_column("step")
    steps.add_column("output")
    steps.add_column("seconds", justify="right")
    for step in sorted(result.steps, key=lambda s: -s.seconds):
        steps.add_row(step.tool, step.output, f"{step.seconds:.1f}")
    print_table(console, steps)
    console.print(
        f"{len(result.compiled)} compiled, {len(result.steps) - len(result.compiled)} linked "
        f"in {result.seconds:.1f} s"
    )
    console.print(outcome(result, wheel), highlight=False, markup=False, soft_wrap=True)


def print_result_line(result: BuildResult, console: Console) -> None:
    """One line for `--quiet`: `llm_ops 0.1.0+cu130stable2.10: 2 built, 1 skipped (3.2 s)`."""
    kernels = result.record.kernels.values()
    built = sum(1 for k in kernels if k.built)
    skipped = len(result.record.kernels) - built
    console.print(
        f"{result.record.package} {result.record.version}: {built} built, {skipped} skipped "
        f"({result.seconds:.1f} s)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def settings_line(plan: BuildPlan, jobs: int, *, verbose: bool = False) -> str | None:
    """`MAX_JOBS=2: 2 jobs; TORCH_CUDA_ARCH_LIST=9.0: rmsnorm 9.0a, moe none (not-selected)`
    (the plan's environment and decisions); None when neither variable is set (verbose:
    always a line)."""
    cap = plan.environment.max_jobs
    if cap is None and plan.archs is None and not verbose:
        return None
    parts = [
        f"MAX_JOBS={cap}: {_jobs(jobs)}" if cap is not None else f"{_jobs(jobs)} (MAX_JOBS unset)"
    ]
    if plan.archs is None:
        parts.append("archs as declared (TORCH_CUDA_ARCH_LIST and KERNELPACK_ARCH unset)")
    else:
        shown = []
        for kernel in plan.kernels:
            if kernel.build:
                shown.append(f"{kernel.name} {' '.join(str(a) for a in kernel.archs)}")
            elif (
                kernel.skip is not None and kernel.skip.code == "not-selected" and not kernel.archs
            ):
                shown.append(f"{kernel.name} none (not-selected)")
        parts.append(f"{plan.archs.describe()}: {', '.join(shown) or 'no kernel'}")
    return "kernelpack: " + "; ".join(parts)


def _jobs(count: int) -> str:
    return f"{count} job" if count == 1 else f"{count} jobs"
