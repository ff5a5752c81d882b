"""A compile the kernel's out-of-memory killer ends is noted as such by the memory shim, and
never mistaken for a compile error; the engine's messages for it name the figures.

The killer is faked at its edge: a counter file in the format of the cgroup's `memory.events`
(`oom_kill N`), which the child raises before it is SIGKILLed, as the kernel does."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kernelpack.builder import _peak, memory
from kernelpack.builder.graph import Pools

GIB = 1024**3

# What the killer does to a process: count it in the cgroup's memory.events, then SIGKILL it.
KILLED = """
import os, signal, sys
counter = sys.argv[1]
kills = next(int(l.split()[1]) for l in open(counter) if l.startswith("oom_kill "))
open(counter, "w").write("oom 1\\noom_kill %d\\noom_group_kill 0\\n" % (kills + 1))
os.kill(os.getpid(), signal.SIGKILL)
"""
# nvcc whose cicc the killer ended: nvcc itself exits 1.
NVCC_OF_KILLED_CICC = f"""
import subprocess, sys
subprocess.run([sys.executable, "-c", {KILLED!r}, sys.argv[1]])
sys.stderr.write("nvcc error   : 'cicc' died due to signal 9 (Kill signal)\\n")
sys.exit(1)
"""


def _counter(tmp_path: Path, kills: int = 3) -> Path:
    counter = tmp_path / "memory.events"
    counter.write_text(f"oom 1\noom_kill {kills}\noom_group_kill 0\n")
    return counter


def _run(tmp_path: Path, counter: Path, *command: str) -> int:
    """Run `command` behind the shim (in `tmp_path`, where its log goes) as ninja would."""
    argv = [*memory.shim([counter]), "obj/k/k.cu.o", "--", *command]
    return subprocess.run(argv, cwd=tmp_path, check=False, timeout=60).returncode


def _end(tmp_path: Path) -> str:
    (line,) = (tmp_path / memory.LOG_FILE).read_text().splitlines()
    return line.split("\t")[-1]


def test_a_command_killed_while_the_oom_count_rose_is_noted_as_killed(tmp_path: Path) -> None:
    counter = _counter(tmp_path)
    code = _run(tmp_path, counter, sys.executable, "-c", KILLED, str(counter))
    assert code == 128 + signal.SIGKILL
    assert _end(tmp_path) == _peak.OOM
    assert memory.killed(tmp_path, "obj/k/k.cu.o") is not None


def test_nvcc_exiting_1_after_its_cicc_was_killed_is_noted_as_killed(tmp_path: Path) -> None:
    counter = _counter(tmp_path)
    code = _run(tmp_path, counter, sys.executable, "-c", NVCC_OF_KILLED_CICC, str(counter))
    assert code == 1
    assert _end(tmp_path) == _peak.OOM


def test_a_failure_while_the_oom_count_stayed_is_not_a_kill(tmp_path: Path) -> None:
    code = _run(tmp_path, _counter(tmp_path), sys.executable, "-c", "raise SystemExit(1)")
    assert code == 1
    assert _end(tmp_path) == "-"
    assert memory.killed(tmp_path, "obj/k/k.cu.o") is None


def test_a_success_is_not_a_kill_when_another_process_was_killed(tmp_path: Path) -> None:
    counter = _counter(tmp_path)
    raise_count = f"open({str(counter)!r}, 'w').write('oom_kill 9\\n')"
    assert _run(tmp_path, counter, sys.executable, "-c", raise_count) == 0
    assert _end(tmp_path) == "-"


def test_only_the_last_run_of_a_compile_counts(tmp_path: Path) -> None:
    log = tmp_path / memory.LOG_FILE
    log.write_text(f"obj/a.cu.o\t{2 * GIB}\toom\nobj/a.cu.o\t{GIB}\t-\nobj/b.cu.o\t{GIB}\toom\n")
    assert memory.killed(tmp_path, "obj/a.cu.o") is None
    assert memory.killed(tmp_path, "obj/b.cu.o") == GIB
    assert memory.collect(tmp_path) == {"obj/a.cu.o": 2 * GIB, "obj/b.cu.o": GIB}


def test_the_counters_of_this_process_are_files_with_an_oom_kill_count() -> None:
    counters = _peak.oom_counters()
    assert counters
    for counter in counters:
        assert any(line.startswith("oom_kill ") for line in Path(counter).read_text().splitlines())
    assert isinstance(_peak.oom_kills(counters), int)


def test_an_unreadable_counter_never_makes_a_kill(tmp_path: Path) -> None:
    missing = tmp_path / "gone" / "memory.events"
    assert _peak.oom_kills([str(missing)]) is None
    assert _run(tmp_path, missing, sys.executable, "-c", "raise SystemExit(1)") == 1
    assert _end(tmp_path) == "-"


@pytest.fixture
def budget() -> memory.Budget:
    """The issue's build: 2 cores, one kernel-builder compile of 9 archs, 20 GiB free."""
    return memory.Budget.for_build(
        {"heavy": {"obj/relu/relu.cu.o": 9, "obj/relu/torch_binding.cpp.o": 1}, "light": {}},
        {},
        jobs=2,
        available=20 * GIB,
    )


def test_the_retry_line_says_what_was_killed_and_how_the_rest_runs(
    budget: memory.Budget,
) -> None:
    assert budget.pools == Pools(heavy=1, light=2, heavy_threads=6, light_threads=1)
    killed = memory.OutOfMemory("kernel 'relu': relu.cu", "obj/relu/relu.cu.o", int(2.6 * GIB))
    retry = budget.fewer(["obj/relu/relu.cu.o"])
    assert retry.jobs == 1
    assert budget.retrying(killed, retry) == (
        "kernel 'relu': relu.cu: killed by the out-of-memory killer at 2.6 GiB (its largest "
        "process), with 1 compile of 6 nvcc threads at once; retrying with 1 compile of "
        "1 nvcc thread at once"
    )


def test_a_second_kill_names_the_file_the_figures_and_what_to_change(
    budget: memory.Budget,
) -> None:
    killed = memory.OutOfMemory("kernel 'relu': relu.cu", "obj/relu/relu.cu.o", int(2.6 * GIB))
    message = budget.fewer(None).exhausted(killed)
    assert message.startswith(
        "kernel 'relu': relu.cu: killed by the out-of-memory killer at 2.6 GiB"
    )
    assert "with 1 compile of 1 nvcc thread at once (20.0 GiB free when the build started)" in (
        message
    )
    assert "MAX_JOBS=1 (or -j 1)" in message
    assert "TORCH_CUDA_ARCH_LIST" in message
    assert "failed to compile" not in message
    assert "\n" not in message
