#!/usr/bin/env bash
# The Hugging Face Hub check on the GPU machine: kernelpack exports, loaded by the real
# `kernels` package (no stand-in). Called by scripts/gpu-check (kernelpack already installed
# and on PYTHONPATH); it can also run alone:
#
#   tests/gpu/hub/run.sh OUT WHEELS
#
# WHEELS is a folder of wheels for this machine's Python, made elsewhere by
# `scripts/gpu-check --build-wheels` (build/hub-wheels): `kernels` and its dependencies,
# nvidia-cutlass (headers of the cutlass-gemm example) and what kernelpack's export needs
# (pyelftools, pyproject-metadata, auditwheel, wheel). Nothing is downloaded.
#
# For examples/llm_ops and the kernel-builder examples relu, relu-torch-stable-abi and
# cutlass-gemm (arch 9.0 to keep the compiles short): `kernelpack export --hub` on this
# machine, `kernels.get_local_kernel` of the export with a CUDA op run against torch, then
# each example's own tests/ with `get_kernel("kernels-test/<name>", version=1)` resolved to
# the export through LOCAL_KERNELS. Logs and summary.txt go to OUT; exit 0 when all pass.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
out=$1
wheels=$(cd "$2" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
py=${PYTHON:-python3}
work=$(mktemp -d)
status=0
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1

hubsite=$work/hubsite
"$py" -m pip install -q --no-index --find-links "$wheels" --no-compile --target "$hubsite" \
  kernels 2>&1 | tee "$out/install.log"
# Headers and build helpers only: nvidia-cutlass's own Python dependencies are not needed.
"$py" -m pip install -q --no-index --no-deps --find-links "$wheels" --no-compile --upgrade \
  --target "$hubsite" nvidia-cutlass pyelftools pyproject-metadata auditwheel wheel 2>&1 \
  | tee -a "$out/install.log"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$hubsite
"$py" -c 'import kernels, torch; print("kernels", kernels.__version__, "torch", torch.__version__)' \
  2>&1 | tee -a "$out/install.log"

note() { echo "$*" | tee -a "$out/summary.txt"; }

export_one() {  # NAME SOURCE: copy, export, log; prints the export folder
  local name=$1 source=$2
  cp -r "$source" "$work/$name"
  if [ -f "$work/$name/build.toml" ]; then
    printf '[tool.kernelpack]\narch = "9.0"\n' > "$work/$name/pyproject.toml"
  fi
  local start
  start=$(date +%s)
  if "$py" -m kernelpack export --hub "$work/hub-$name" "$work/$name" > "$out/export-$name.log" 2>&1; then
    note "$name: exported in $(( $(date +%s) - start )) s: $(ls "$work/hub-$name/build" | tr '\n' ' ')"
    cp -r "$work/hub-$name" "$out/hub-$name"
    rm -f "$out/hub-$name"/build/*/*.so  # the libraries stay out of the results
    return 0
  fi
  note "$name: export failed (export-$name.log)"
  return 1
}

# Load through get_local_kernel and compare one CUDA op with torch.
read -r -d '' LLM_OPS <<'PY'
import json, sys, torch, kernels
from pathlib import Path
m = kernels.get_local_kernel(Path(sys.argv[1]))
rmsnorm = m.load("rmsnorm")
x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
ref = torch.nn.functional.rms_norm(x.float(), (4096,), w.float(), 1e-6).to(x.dtype)
torch.testing.assert_close(rmsnorm.rms_norm(x, w, 1e-6), ref, atol=2e-2, rtol=2e-2)
print(json.dumps({"module": m.__name__, "status": m.status(), "namespace": rmsnorm.NAMESPACE}))
PY
read -r -d '' RELU <<'PY'
import json, sys, torch, kernels
from pathlib import Path
m = kernels.get_local_kernel(Path(sys.argv[1]))
x = torch.randn(1 << 20, device="cuda")  # relu(x, out) in both examples
out = torch.empty_like(x)
m.relu(x, out)
torch.testing.assert_close(out, torch.relu(x))
print(json.dumps({"module": m.__name__, "ops": str(m.ops)}))
PY

if export_one llm_ops "$root/examples/llm_ops"; then
  if "$py" -c "$LLM_OPS" "$work/hub-llm_ops" > "$out/load-llm_ops.json" 2> "$out/load-llm_ops.log"; then
    note "llm_ops: get_local_kernel loaded, rms_norm matches torch: $(cat "$out/load-llm_ops.json")"
  else
    note "llm_ops: load failed (load-llm_ops.log)"; status=1
  fi
else
  status=1
fi

for name in relu relu-torch-stable-abi cutlass-gemm; do
  export_one "$name" "$root/tests/foreign/hf-kernels/examples/$name" || { status=1; continue; }
  if [ "$name" != cutlass-gemm ]; then
    if "$py" -c "$RELU" "$work/hub-$name" > "$out/load-$name.json" 2> "$out/load-$name.log"; then
      note "$name: get_local_kernel loaded, relu matches torch: $(cat "$out/load-$name.json")"
    else
      note "$name: load failed (load-$name.log)"; status=1
    fi
  fi
  tests=$work/tests-$name
  mkdir -p "$tests" && cp -r "$root/tests/foreign/hf-kernels/examples/$name/tests" "$tests/"
  ( cd "$tests" && LOCAL_KERNELS="kernels-test/$name=$work/hub-$name" \
      "$py" -m pytest tests -q -p no:cacheprovider -rA ) > "$out/tests-$name.log" 2>&1
  code=$?
  note "$name: own tests against the export (LOCAL_KERNELS, real kernels): pytest exit $code, $(tail -1 "$out/tests-$name.log")"
  [ "$code" -eq 0 ] || status=1
done
note "hub run.sh: exit $status"
exit "$status"
