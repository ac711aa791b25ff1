#!/usr/bin/env bash
# The prepared device script (issues 9, 23 and 50), in parts that each fit one device command
# (at most 600 s), run from the repository root of a checkout, with nothing to install:
#
#   bash scripts/gpu_check.sh kernels sanitizer replay timings  # the risky parts first
#   bash scripts/gpu_check.sh preflight tests   # versions, launches, imports; the twin's tests
#   bash scripts/gpu_check.sh bench             # tokens/s, launches per token, batch scaling
#   bash scripts/gpu_check.sh oracle            # the oracle grading the twin, samples trimmed
#   bash scripts/gpu_check.sh all               # every part, for a human: over 600 s in all
#
# The first four (scripts/gpu_kernel_check.py), each under a minute on an H100: every
# multi-block kernel 1,000 times one by one and 1,000 times as a graph replay against its
# body, the counters 0 after each batch; compute-sanitizer's racecheck and synccheck on one
# call of each such kernel (the sanitizer unpacked from its wheel, carried in
# $GPU_CHECK_WHEELS, default .gpu-wheels: the device has no network); graphs at T = 0.8 for
# 50 rounds against graphs off; then the timings, each beside its prediction.
# Parts run in the order given; every step has its own time limit, and a short table of the
# steps comes last. A failed preflight skips every later step (one line says why); fused
# kernels that fail the preflight's check are turned off (SPECDEC_GPU_FUSED=0) for the rest. Results
# and logs go to $OUT (a new temporary folder when it is unset).
#
# Options (before or after the parts):
#   --plan      print each part's steps and time limits, run nothing
#   --dry-run   NumPy mode (SPECDEC_GPU_BACKEND=numpy), every step cut to a few seconds (the
#               first four on the stand-in for a device, printing their budgets from counted
#               work at the device's sizes): CI runs it (tests/twin/test_device_script.py) to
#               show the plumbing works. Its limits (x GPU_CHECK_TIME_SCALE, default 1) only
#               stop a hung step. It proves nothing about GPU timing.
# Environment: PYTHON (default python3), OUT, GPU_CHECK_ORACLE_SCALE (default 0.1: the
# oracle's sample sizes, scripts/specdec_oracle_scale.py), GPU_CHECK_TIME_SCALE,
# GPU_CHECK_WHEELS, COMPUTE_SANITIZER (a compute-sanitizer to use instead of the wheel's),
# SPECDEC_GPU_FUSED (default 1; 0 runs the twin without its fused kernels).
# docs/gpu.md ("The device script") says which call to make with which timeout.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

parts=() dry=0 plan=0
for arg in "$@"; do
  case $arg in
    kernels | sanitizer | replay | timings | preflight | tests | oracle | bench) parts+=("$arg") ;;
    all) parts+=(kernels sanitizer replay timings preflight tests oracle bench) ;;
    --dry-run) dry=1 ;;
    --plan) plan=1 ;;
    -h | --help) usage ;;
    *) echo "gpu_check.sh: unknown part or option '$arg'" >&2; usage ;;
  esac
done
[ ${#parts[@]} -gt 0 ] || usage

PY=${PYTHON:-python3}
ORACLE_SCALE=${GPU_CHECK_ORACLE_SCALE:-0.1}
if [ $dry = 1 ]; then
  export SPECDEC_GPU_BACKEND=numpy
  export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}  # nothing is timed: spare the cores
  TIME_SCALE=${GPU_CHECK_TIME_SCALE:-1}  # a hang guard: the budgets are counted, not timed
else
  export SPECDEC_GPU_BACKEND=${SPECDEC_GPU_BACKEND:-cupy}  # a broken CuPy must not pass as NumPy
  TIME_SCALE=${GPU_CHECK_TIME_SCALE:-1}
fi
export PYTHONPATH=.:scripts  # the checkout itself, and the oracle's scale plug-in
if [ $plan = 1 ]; then
  OUT=${OUT:-'$OUT'}
else
  OUT=${OUT:-$(mktemp -d)}
  mkdir -p "$OUT"
fi
export GPU_CHECK_FUSED_OFF="$OUT/fused_off"  # written by the preflight if the kernels fail
export GPU_CHECK_GRAPHS_OFF="$OUT/graphs_off"  # ... if a replayed graph failed its check
rows=() failed=0 stopped=""
declare -A part_limits=()

limit_of() {  # seconds * TIME_SCALE, rounded, at least 1
  awk -v l="$1" -v s="$TIME_SCALE" 'BEGIN { v = int(l * s + 0.5); print (v < 1 ? 1 : v) }'
}

step() {  # step PART NAME SECONDS COMMAND...: run under its own limit, log to $OUT/NAME.log
  local part=$1 name=$2 limit; limit=$(limit_of "$3"); shift 3
  if [ $plan = 1 ]; then
    rows+=("| $part | $name | $limit | $* |")
    part_limits[$part]=$((${part_limits[$part]:-0} + limit))
    return
  fi
  if [ -n "$stopped" ]; then
    rows+=("| $part | $name | skipped | - | $limit | $stopped |")
    return
  fi
  echo "== $name (limit $limit s): $*"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]} took=$((SECONDS - start)) outcome
  case $rc in
    0) outcome=ok ;;
    124 | 137) outcome="TIMED OUT" ;;
    *) outcome="exit $rc" ;;
  esac
  [ "$rc" = 0 ] || failed=1
  local last; last=$(grep -v '^\s*$' "$OUT/$name.log" | tail -n 1 | cut -c1-110 | tr '|' '/')
  rows+=("| $part | $name | $outcome | $took | $limit | $last |")
  if [ "$name" = preflight ] && [ "$rc" != 0 ]; then
    stopped="the preflight failed"
  fi
  if [ -f "$GPU_CHECK_FUSED_OFF" ] && [ "${SPECDEC_GPU_FUSED:-1}" != 0 ]; then
    export SPECDEC_GPU_FUSED=0  # the preflight found the fused kernels broken: run unfused
    rows+=("| $part | (kernels) | off | - | - | $(head -c 100 "$GPU_CHECK_FUSED_OFF" | tr '|' '/') |")
  fi
  if [ -f "$GPU_CHECK_GRAPHS_OFF" ] && [ "${SPECDEC_GPU_GRAPHS:-1}" != 0 ]; then
    export SPECDEC_GPU_GRAPHS=0  # the preflight found the graphs broken: launch one by one
    rows+=("| $part | (graphs) | off | - | - | $(head -c 100 "$GPU_CHECK_GRAPHS_OFF" | tr '|' '/') |")
  fi
}

ORACLE_FILES=(
  tests/distribution/test_sampled_verify.py tests/distribution/test_sampled_loop.py
  tests/distribution/test_lookup_law.py tests/distribution/test_self_drafting_law.py
  tests/distribution/test_batch_law.py tests/distribution/test_tree_law.py
  tests/distribution/test_typical_law.py tests/distribution/test_independent_laws.py
  tests/distribution/test_plugin.py
)
TWIN_PLUGINS=(
  --verify=gpu.verification:verify --speculative=gpu.speculative:speculative_generate
  --batch=gpu.batch:speculative_generate_batch --tree=gpu.tree:tree_speculative_generate
)
PYTEST=("$PY" -m pytest -p no:cacheprovider -q)
CHECK=("$PY" scripts/gpu_kernel_check.py)
[ $dry = 1 ] && DRY=(--dry-run) || DRY=()

part_kernels() {
  step kernels kernels 60 "${CHECK[@]}" kernels "${DRY[@]}"
}

sanitizer() {  # the compute-sanitizer to run: given, on PATH, or unpacked from a carried wheel
  if [ -n "${COMPUTE_SANITIZER:-}" ]; then echo "$COMPUTE_SANITIZER"; return; fi
  command -v compute-sanitizer && return
  local wheel
  wheel=$(ls "${GPU_CHECK_WHEELS:-.gpu-wheels}"/nvidia_cuda_sanitizer_api_cu12-*.whl 2>/dev/null | head -n 1)
  [ -n "$wheel" ] || return 1
  local to="$OUT/sanitizer" bin=nvidia/cuda_sanitizer_api/bin/compute-sanitizer
  "$PY" -m zipfile -e "$wheel" "$to" && chmod +x "$to/$bin" && echo "$to/$bin"
}

part_sanitizer() {
  local tool san
  for tool in racecheck synccheck; do
    if [ $dry = 1 ]; then  # no device: the call the sanitizer would watch, plainly
      step sanitizer "$tool" 60 "${CHECK[@]}" one all --dry-run
    elif [ $plan = 1 ]; then
      step sanitizer "$tool" 60 compute-sanitizer --tool "$tool" "${CHECK[@]}" one all
    elif san=$(sanitizer); then
      step sanitizer "$tool" 60 env LD_LIBRARY_PATH="$(dirname "$san")/../lib:${LD_LIBRARY_PATH:-}" \
        "$san" --tool "$tool" --error-exitcode 1 "${CHECK[@]}" one all
    else
      step sanitizer "$tool" 60 sh -c "echo 'no compute-sanitizer: carry the nvidia-cuda-sanitizer-api-cu12 wheel in ${GPU_CHECK_WHEELS:-.gpu-wheels} (docs/gpu.md)'; exit 1"
    fi
  done
}

part_replay() {
  step replay replay 60 "${CHECK[@]}" replay "${DRY[@]}"
}

part_timings() {
  step timings timings 60 "${CHECK[@]}" timings "${DRY[@]}"
}

part_preflight() {
  step preflight preflight 90 "$PY" scripts/gpu_preflight.py
}

part_tests() {
  if [ $dry = 1 ]; then  # no device: the gpu-marked selection is only collected
    step tests gpu-tests 60 "${PYTEST[@]}" -m gpu --collect-only tests/twin
    step tests twin-tests 300 "${PYTEST[@]}" tests/twin/test_twin_interface.py
  else
    step tests gpu-tests 60 "${PYTEST[@]}" -m gpu tests/twin
    # this script's own dry run (test_device_script.py) checks nothing about a device
    step tests twin-tests 300 "${PYTEST[@]}" tests/twin --deselect tests/twin/test_device_script.py
  fi
}

part_oracle() {
  local scale=(--oracle-scale "$ORACLE_SCALE")
  [ $dry = 1 ] && scale=(--oracle-scale 0.001 --oracle-floor 20)
  step oracle oracle 270 "${PYTEST[@]}" -p specdec_oracle_scale "${scale[@]}" -m distribution \
    "${ORACLE_FILES[@]}" "${TWIN_PLUGINS[@]}"
}

part_bench() {
  local size=(--repeats 3)
  [ $dry = 1 ] && size=(--repeats 1 --n-prompts 1 --max-new-tokens 8 --ks 3 --batches 1,2)
  step bench bench 390 "$PY" -m specdec.measure.gpu_bench "${size[@]}" --out "$OUT"
}

if [ $plan = 0 ]; then
  echo "gpu_check.sh ${parts[*]}$([ $dry = 1 ] && echo ' (dry run: NumPy mode)'); $(date -u '+%F %T') UTC"
  echo "results: $OUT; SPECDEC_GPU_BACKEND=$SPECDEC_GPU_BACKEND; time limits x $TIME_SCALE"
fi
for part in "${parts[@]}"; do "part_$part"; done

echo
if [ $plan = 1 ]; then
  echo "| part | step | limit (s) | command |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  for part in "${!part_limits[@]}"; do
    echo "part $part: limits add up to ${part_limits[$part]} s"
  done | sort
  exit 0
fi
echo "| part | step | outcome | seconds | limit | last line of its log |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}" | tee "$OUT/summary.md"
exit $failed
