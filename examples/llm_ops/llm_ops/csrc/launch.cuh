// Kernel launches with programmatic dependent launch (PDL, sm_90 and newer), shared by the
// kernels of this folder.
//
// A kernel launched by `launch` may start while the kernel before it in the stream is still
// running: its CTAs are placed on the SMs and wait in `grid_dependency_sync` until that kernel
// has completed and its memory is visible, so the launch latency of a short kernel overlaps
// the end of the one before it. Every kernel launched this way calls `grid_dependency_sync`
// as its first statement, before it reads or writes any global memory: reads then see the
// previous kernel's writes, and writes cannot land in a buffer it still reads. The call also
// lets the next kernel of the stream start launching. A kernel launched without the
// attribute (LLM_OPS_PDL=0, or another library's launch) runs both instructions as no-ops,
// and a kernel after ours that was not launched with the attribute waits for ours to
// complete as usual. Under CUDA-graph capture the dependency is captured as a programmatic
// edge (CUDA 12.3 and newer).
#pragma once

#include <cstdlib>
#include <cstring>
#include <utility>

#include <cuda_runtime.h>

namespace llm_ops {

// The first statement of every kernel launched by `launch`: wait for the grids this one
// depends on, then allow the next grid of the stream to launch.
__device__ __forceinline__ void grid_dependency_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Whether launches ask for PDL: yes unless LLM_OPS_PDL=0 (read once per process).
inline bool pdl_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("LLM_OPS_PDL");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  return enabled;
}

// A launch configuration with PDL (when enabled) and, for `cluster` > 1, a cluster of that
// many CTAs along x. The attributes live in the object: keep it alive through the launch.
struct LaunchConfig {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attrs[2] = {};

  LaunchConfig(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, unsigned cluster = 1) {
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    unsigned n = 0;
    if (pdl_enabled()) {
      attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attrs[n].val.programmaticStreamSerializationAllowed = 1;
      ++n;
    }
    if (cluster > 1) {
      attrs[n].id = cudaLaunchAttributeClusterDimension;
      attrs[n].val.clusterDim.x = cluster;
      attrs[n].val.clusterDim.y = 1;
      attrs[n].val.clusterDim.z = 1;
      ++n;
    }
    config.attrs = attrs;
    config.numAttrs = n;
  }
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

// `kernel<<<grid, block, smem, stream>>>(args...)` with PDL, in clusters of `cluster` CTAs
// along x (the grid a multiple of it; 1: no cluster); errors are left for cudaGetLastError,
// as a `<<<>>>` launch leaves them.
template <typename... Params, typename... Args>
void launch_cluster(void (*kernel)(Params...), unsigned cluster, dim3 grid, dim3 block,
                    size_t smem, cudaStream_t stream, Args&&... args) {
  LaunchConfig c(grid, block, smem, stream, cluster);
  (void)cudaLaunchKernelEx(&c.config, kernel, std::forward<Args>(args)...);
}

// The same without clusters.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            Args&&... args) {
  launch_cluster(kernel, 1, grid, block, smem, stream, std::forward<Args>(args)...);
}

// The same for a kernel known by address, its arguments as an array of pointers (as
// cudaLaunchKernel takes them).
inline void launch_untyped(const void* kernel, dim3 grid, dim3 block, size_t smem,
                           cudaStream_t stream, void** params) {
  LaunchConfig c(grid, block, smem, stream);
  (void)cudaLaunchKernelExC(&c.config, kernel, params);
}

}  // namespace llm_ops
