#!/usr/bin/env bash
# The prepared device script (issues 9 and 23), in parts that each fit one device command
# (at most 600 s), run from the repository root of a checkout, with nothing to install:
#
#   bash scripts/gpu_check.sh preflight tests   # versions, launches, imports; the twin's tests
#   bash scripts/gpu_check.sh bench             # tokens/s, launches per token, batch scaling
#   bash scripts/gpu_check.sh oracle            # the oracle grading the twin, samples trimmed
#   bash scripts/gpu_check.sh all               # every part, for a human: over 600 s in all
#
# Parts run in the order given; every step has its own time limit, and a short table of the
# steps comes last. A failed preflight skips every later step (one line says why); fused
# kernels that fail the preflight's check are turned off (SPECDEC_GPU_FUSED=0) for the rest. Results
# and logs go to $OUT (a new temporary folder when it is unset).
#
# Options (before or after the parts):
#   --plan      print each part's steps and time limits, run nothing
#   --dry-run   NumPy mode (SPECDEC_GPU_BACKEND=numpy), every step cut to a few seconds and
#               its limit scaled by GPU_CHECK_TIME_SCALE (default 0.25): CI runs it
#               (tests/twin/test_device_script.py) to show the plumbing works and each step
#               fits its scaled limit. It proves nothing about GPU timing.
# Environment: PYTHON (default python3), OUT, GPU_CHECK_ORACLE_SCALE (default 0.1: the
# oracle's sample sizes, scripts/specdec_oracle_scale.py), GPU_CHECK_TIME_SCALE,
# SPECDEC_GPU_FUSED (default 1; 0 runs the twin without its fused kernels).
# docs/gpu.md ("The device script") says which call to make with which timeout.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

parts=() dry=0 plan=0
for arg in "$@"; do
  case $arg in
    preflight | tests | oracle | bench) parts+=("$arg") ;;
    all) parts+=(preflight tests oracle bench) ;;
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
  TIME_SCALE=${GPU_CHECK_TIME_SCALE:-0.25}
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
