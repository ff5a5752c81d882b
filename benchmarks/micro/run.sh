#!/usr/bin/env bash
# Builds and runs the kernel microbenchmarks of this folder on a machine with an NVIDIA GPU of
# compute capability 9.0 and nvcc 12.8 or newer: OUTDIR/micro-<name>.txt for each program
# (nvcc's output and the program's table; the binaries go to a temporary folder). LABEL
# (default "current") is printed in front of gemv_decode's rows. --build-only builds them and
# runs nothing (no GPU needed: that the programs still build against the kernels' headers).
# Exit status: 0 when every program built (and ran), 1 otherwise. NVCC names the compiler.
set -uo pipefail
build_only=0
if [ "${1:-}" = --build-only ]; then
  build_only=1
  shift
fi
if [ $# -lt 1 ]; then
  echo "usage: benchmarks/micro/run.sh [--build-only] OUTDIR [LABEL]" >&2
  exit 2
fi
out=$1
label=${2:-current}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
examples=$(cd "$here/../../examples" && pwd)
nvcc=${NVCC:-nvcc}
if ! command -v "$nvcc" >/dev/null; then
  echo "benchmarks/micro/run.sh: no nvcc ($nvcc) on PATH" >&2
  exit 1
fi
mkdir -p "$out"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
status=0
# Each program's include folders (under examples/), one a line.
includes() {
  case $1 in
    gemv_decode) echo moe_ops/moe_ops/moe/csrc ;;
    rmsnorm_decode_backward | rmsnorm_forward_large)
      printf '%s\n' llm_ops/llm_ops/csrc llm_ops/llm_ops/rmsnorm/csrc ;;
  esac
}
for name in gemv_decode rmsnorm_decode_backward rmsnorm_forward_large; do
  flags=()
  while read -r dir; do flags+=("-I$examples/$dir"); done < <(includes "$name")
  log=$out/micro-$name.txt
  if "$nvcc" -std=c++17 -arch=sm_90a -O3 -DNDEBUG "${flags[@]}" "$here/$name.cu" \
      -o "$bin/$name" >"$log" 2>&1; then
    args=("$label")
    [ "$name" = gemv_decode ] && args+=(--sweep)  # every split of K after the plan's
    [ "$build_only" = 1 ] || "$bin/$name" "${args[@]}" >>"$log" 2>&1 || status=1
  else
    echo "benchmarks/micro/run.sh: $name did not build (see $log)" >&2
    status=1
  fi
done
exit "$status"
