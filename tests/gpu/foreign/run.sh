#!/usr/bin/env bash
# The GPU run of the foreign projects (tests/foreign): on a machine with an NVIDIA GPU, nvcc
# and torch, and no network.
#
#   tests/gpu/foreign/run.sh DIR OUT
#
# DIR holds what prepare.sh gathered: wheels/ (kernelpack, kernelpack-runtime, nvidia-cutlass,
# and the stable-ABI relu wheel built on another machine), projects/ (unchanged copies) and
# kernels.py. It installs kernelpack, builds the classic-ABI projects here (their wheels
# load only under the torch they were built against), installs every wheel, prints each
# package's status and runs each kernel-builder project's own tests/ through the `kernels`
# stand-in. Logs go to OUT; the exit status is 0 when every project's tests pass.
set -uo pipefail
dir=$(cd "$1" && pwd)
out=$2
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
work=$(mktemp -d)
status=0

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  "$py" -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
  nvcc --version | tail -2
} 2>&1 | tee "$out/env.txt"

tools=$work/tools
"$py" -m pip install -q --no-index --no-deps --no-compile --target "$tools" \
  "$dir"/wheels/kernelpack_runtime-*.whl "$dir"/wheels/kernelpack-*.whl \
  "$dir"/wheels/nvidia_cutlass-*.whl "$dir"/wheels/pyelftools-*.whl \
  "$dir"/wheels/pyproject_metadata-*.whl "$dir"/wheels/auditwheel-*.whl 2>&1 | tee -a "$out/env.txt"
export PYTHONPATH=$tools

# Build the classic-ABI projects here, in parallel; each log says what it compiled.
# prime-kernels (flash_moe, sm_100a: it cannot run on this GPU) is waited for last.
declare -A pids
for name in relu cutlass-gemm prime-kernels; do
  cp -r "$dir/projects/$name" "$work/$name"
  if [ "$name" != prime-kernels ]; then
    printf '[tool.kernelpack]\narch = "9.0"\n' > "$work/$name/pyproject.toml"
  fi
  ( cd "$work/$name" && start=$(date +%s) && "$py" -m kernelpack build . --wheel-dir "$work/dist-$name" \
      && echo "wall $(( $(date +%s) - start )) s: $name" ) > "$out/build-$name.log" 2>&1 &
  pids[$name]=$!
done
mkdir -p "$work/dist-relu-torch-stable-abi"
cp "$dir"/wheels/relu_torch_stable_abi-*.whl "$work/dist-relu-torch-stable-abi/"

site=$work/site
install() {  # NAME: install the wheel built for project NAME
  "$py" -m pip install -q --no-index --no-deps --no-compile --target "$site" \
    "$work/dist-$1"/*.whl 2>&1 | tee -a "$out/env.txt"
}
for name in relu-torch-stable-abi relu cutlass-gemm; do
  if [ "$name" != relu-torch-stable-abi ]; then
    wait "${pids[$name]}" || { echo "$name: build failed" | tee -a "$out/summary.txt"; status=1; continue; }
  fi
  install "$name"
  package=${name//-/_}
  PYTHONPATH=$site:$tools "$py" -m kernelpack status "$package" --json > "$out/status-$name.json" 2>&1
  tests=$work/tests-$name
  mkdir -p "$tests" && cp -r "$dir/projects/$name/tests" "$tests/"
  # kernels.py (the stand-in) first on the path, then the installed wheels.
  ( cd "$tests" && PYTHONPATH=$dir:$site:$tools "$py" -m pytest tests -q -p no:cacheprovider -rA ) \
    > "$out/tests-$name.log" 2>&1
  code=$?
  echo "$name: pytest exit $code, $(tail -1 "$out/tests-$name.log")" | tee -a "$out/summary.txt"
  [ "$code" -eq 0 ] || status=1
done
if wait "${pids[prime-kernels]}"; then
  install prime-kernels
  PYTHONPATH=$site:$tools "$py" -m kernelpack status prime_kernels --json \
    > "$out/status-prime-kernels.json" 2>&1
else
  echo "prime-kernels: build failed" | tee -a "$out/summary.txt"
  status=1
fi
grep -h "^wall\|compiled, " "$out"/build-*.log | tee -a "$out/summary.txt"
echo "run.sh: exit $status" | tee -a "$out/summary.txt"
exit "$status"
