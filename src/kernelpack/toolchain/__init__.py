"""The toolchain layer: what this machine builds with.

`detection` finds nvcc, CUDA, torch (through `torchprobe`), the cores and memory;
`launcher` chooses the compiler launcher (ccache, sccache) and runs its per-build session;
`deps` resolves named header-only dependencies; `environment` reads the variables of the field
(MAX_JOBS, TORCH_CUDA_ARCH_LIST, KERNELPACK_ARCH) that shape a build.
"""
