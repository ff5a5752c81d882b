#!/usr/bin/env bash
# Builds the grouped-GEMM tile experiment (main.cu and the tile_*.cu instantiations, with
# moe_ops' shipped tiles compiled from its own sources) into one program:
#
#   benchmarks/micro/grouped_tiles/build.sh OUTFILE [JOBS]
#
# nvcc 12.8 or newer (NVCC names it), sm_90a, and the CUTLASS headers of the nvidia-cutlass
# wheel (CUTLASS_DIR, default: the installed cutlass_library's source folder). Objects go to
# OUTFILE.obj/ and are kept, so a second build recompiles only what changed. Run the program
# on an H100 or H200: `OUTFILE [substring of the shapes to run]`.
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: benchmarks/micro/grouped_tiles/build.sh OUTFILE [JOBS]" >&2
  exit 2
fi
out=$1
jobs=${2:-2}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
csrc=$(cd "$here/../../../examples/moe_ops/moe_ops/moe/csrc" && pwd)
nvcc=${NVCC:-nvcc}
python=${PYTHON:-python3}
cutlass=${CUTLASS_DIR:-$("$python" -c 'import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), "source"))')}
flags=(-std=c++17 -gencode=arch=compute_90a,code=sm_90a -O3 -DNDEBUG=1
  --expt-relaxed-constexpr -I"$csrc" -I"$here" -I"$cutlass/include"
  -I"$cutlass/tools/util/include")
obj=$out.obj
mkdir -p "$obj"
sources=("$here"/main.cu "$here"/tile_*.cu "$csrc"/gemm_coop_rowb.cu "$csrc"/gemm_coop21_rowb.cu
  "$csrc"/gemm_fp8_rowwise.cu "$csrc"/gemm_fp8_rowwise_pong.cu)
# One compile a source, JOBS at a time; an object newer than its source and the headers is kept.
compile() {
  local src=$1 o
  o=$obj/$(basename "$src").o
  if [ -f "$o" ] && [ -z "$(find "$src" "$csrc" "$here" -newer "$o" -name '*.cu*' -print -quit)" ]; then
    return 0
  fi
  "$nvcc" "${flags[@]}" -c "$src" -o "$o.part" && mv "$o.part" "$o"
}
status=0
pids=()
for src in "${sources[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || status=1; done
  compile "$src" &
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || status=1; done
[ "$status" = 0 ] || { echo "build.sh: a source did not compile" >&2; exit 1; }
objects=()
for src in "${sources[@]}"; do objects+=("$obj/$(basename "$src").o"); done
"$nvcc" -gencode=arch=compute_90a,code=sm_90a "${objects[@]}" -o "$out"
echo "built $out"
