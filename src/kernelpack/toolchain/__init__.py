"""The toolchain layer: what this machine builds with.

`detection` finds nvcc, CUDA, torch (through `torchprobe`), the cores and memory, and applies
the CUDA toolkit rule: a system toolkit, else NVIDIA's CUDA wheels (`cudawheels`), found in
torch's environment or installed into kernelpack's cache (`toolkitcache`);
`launcher` chooses the compiler launcher (ccache, sccache) and runs its per-build session;
`deps` resolves named header-only dependencies; `environment` declares every variable a build
honours and reads them once into a `BuildEnvironment`, which the plan carries.
"""
