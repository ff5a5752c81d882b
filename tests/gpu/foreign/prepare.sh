#!/usr/bin/env bash
# Gathers what tests/gpu/foreign/run.sh needs into DIR (default: .device/foreign of this
# checkout, git-ignored): kernelpack's two wheels and the ones it needs that the GPU machine
# lacks, the nvidia-cutlass wheel (CUTLASS headers, from the local pip cache or PyPI), the
# stable-ABI relu wheel built here (it loads on any torch >= 2.11 of the same CUDA major),
# unchanged copies of the projects and the stand-in.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
dir=${1:-$root/.device/foreign}
py=$root/.venv/bin/python
rm -rf "$dir" && mkdir -p "$dir/wheels" "$dir/projects"
"$py" -m pip wheel -q --no-deps -w "$dir/wheels" "$root/src" "$root"
# The CUTLASS headers, and kernelpack's own needs that the GPU machine's image lacks.
"$py" -m pip download -q --no-deps --only-binary=:all: -d "$dir/wheels" nvidia-cutlass==4.2.0.0 \
  pyelftools==0.33 pyproject-metadata==0.12.1 auditwheel==6.8.2
for name in relu relu-torch-stable-abi cutlass-gemm; do
  cp -r "$root/tests/foreign/hf-kernels/examples/$name" "$dir/projects/"
done
cp -r "$root/tests/foreign/prime-kernels" "$dir/projects/"
cp "$root/tests/gpu/foreign/kernels.py" "$root/tests/gpu/foreign/run.sh" "$dir/"
stable=$(mktemp -d)/relu-torch-stable-abi
cp -r "$root/tests/foreign/hf-kernels/examples/relu-torch-stable-abi" "$stable"
printf '[tool.kernelpack]\narch = "9.0"\n' > "$stable/pyproject.toml"
"$py" -m kernelpack build "$stable" --wheel-dir "$dir/wheels" --require
du -sh "$dir" && ls -l "$dir/wheels"
