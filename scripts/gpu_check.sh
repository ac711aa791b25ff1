#!/usr/bin/env bash
# The one prepared device script (issue 9): run on a machine with an NVIDIA GPU, from the
# repository root, with nothing installed and no network:
#     bash scripts/gpu_check.sh            # results under $OUT when it is set
# It uses the machine's python3 (CuPy, torch, transformers, scipy, pytest, hypothesis there)
# and the checkout itself (PYTHONPATH=.). Each step has its own time limit; a table is last.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=. SPECDEC_GPU_BACKEND=${SPECDEC_GPU_BACKEND:-cupy}
PY=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d)}
status=()

step() {  # step NAME SECONDS COMMAND...: run, log to $OUT/NAME.log, remember the outcome
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  status+=("$name: exit $rc in $((SECONDS - start)) s ($(tail -n 1 "$OUT/$name.log"))")
}

$PY -c "from gpu.backend import backend_name; print('backend:', backend_name())" | tee "$OUT/backend.txt"
step gpu-tests 120 $PY -m pytest -p no:cacheprovider -q -m gpu tests/twin
step twin-tests 180 $PY -m pytest -p no:cacheprovider -q tests/twin
step oracle-twin 240 $PY -m pytest -p no:cacheprovider -q -m distribution \
  --verify=gpu.verification:verify --speculative=gpu.speculative:speculative_generate \
  --batch=gpu.batch:speculative_generate_batch --tree=gpu.tree:tree_speculative_generate
step bench 240 $PY -m lab.gpu_bench --repeats 3 --out "$OUT"

echo
for line in "${status[@]}"; do echo "$line"; done
echo
sed -n '/^backend:/,$p' "$OUT/bench.log"
