"""`nvcc --threads` for multi-arch kernels, and the job pools that account for it."""

from __future__ import annotations

from kernelpack.builder.flags import nvcc_threads
from kernelpack.builder.graph import HEAVY_JOB_BYTES, LIGHT_JOB_BYTES, Pools

GIB = 1024**3
SM90 = "-gencode=arch=compute_90a,code=sm_90a"
SM100 = "-gencode=arch=compute_100a,code=sm_100a"


def test_a_single_arch_kernel_gets_no_threads() -> None:
    assert nvcc_threads((SM90,)) == 1


def test_a_multi_arch_kernel_gets_one_thread_per_arch() -> None:
    assert nvcc_threads((SM90, SM100)) == 2


def test_threaded_compiles_share_the_jobs() -> None:
    pools = Pools.for_memory(jobs=8, available_bytes=None, threads=2)
    assert (pools.heavy, pools.light) == (4, 4)


def test_jobs_times_threads_times_job_memory_stays_within_free_memory() -> None:
    free = 13 * GIB
    for threads in (1, 2, 3, 4):
        pools = Pools.for_memory(jobs=16, available_bytes=free, threads=threads)
        assert pools.heavy * threads * HEAVY_JOB_BYTES <= free
        assert pools.light * threads * LIGHT_JOB_BYTES <= free
        assert pools.light * threads <= 16
    assert Pools.for_memory(jobs=16, available_bytes=free, threads=2).heavy == 2


def test_a_threaded_compile_keeps_one_slot_when_memory_is_short() -> None:
    pools = Pools.for_memory(jobs=2, available_bytes=2 * GIB, threads=4)
    assert (pools.heavy, pools.light) == (1, 1)


def test_single_threaded_pools_are_unchanged() -> None:
    assert Pools.for_memory(jobs=8, available_bytes=7 * GIB) == Pools.for_memory(
        jobs=8, available_bytes=7 * GIB, threads=1
    )
