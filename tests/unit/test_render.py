"""CLI tables outside a terminal: one line per row at any width, nothing wrapped or folded."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from registry_support import built, make_package, skipped, unique_name
from rich.console import Console
from rich.table import Table

from kernelpack.cli import _render

LONG_REASON = "nvcc 12.4 cannot build sm_100a; install CUDA 12.8 or later to build this kernel"


def _piped(width: int) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=width, highlight=False), out


def test_piped_table_is_one_line_per_row_at_40_columns() -> None:
    table = Table(title="kpdemo 0.1.0")
    for column in ("kernel", "status", "reason"):
        table.add_column(column)
    table.add_row("flash_moe", "[yellow]skipped[/]", f"arch-unsupported: {LONG_REASON}")
    table.add_row("rmsnorm", "[green]built[/]", "stable 9.0a")
    console, out = _piped(40)
    _render.print_table(console, table)
    assert out.getvalue().splitlines() == [
        "kpdemo 0.1.0",
        "kernel     status   reason",
        f"flash_moe  skipped  arch-unsupported: {LONG_REASON}",
        "rmsnorm    built    stable 9.0a",
    ]


def test_piped_table_joins_a_multi_line_cell_into_its_row() -> None:
    table = Table.grid()
    table.add_column()
    table.add_column()
    table.add_row("nvidia headers", "/a/include\n/b/include")
    console, out = _piped(20)
    _render.print_table(console, table)
    assert out.getvalue().splitlines() == ["nvidia headers  /a/include; /b/include"]


def test_status_through_a_pipe_with_columns_40_keeps_each_reason_on_its_line(
    tmp_path: Path,
) -> None:
    name = unique_name()
    make_package(
        tmp_path,
        name,
        {
            "rmsnorm": built("rmsnorm", name, abi="stable"),
            "flash_moe": skipped("arch-unsupported", LONG_REASON),
        },
    )
    env = {**os.environ, "COLUMNS": "40", "PYTHONPATH": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "kernelpack", "status", name],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    (line,) = [line for line in out.splitlines() if line.startswith("flash_moe")]
    assert line.endswith(LONG_REASON)
    assert all("│" not in line and "┃" not in line for line in out.splitlines())
