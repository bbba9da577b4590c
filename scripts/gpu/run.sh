#!/usr/bin/env bash
# lnbench on a GPU machine, one command from the repository root (issue 41): the CUDA tests, the bench table (cuDNN
# against each LN/BN cell), the LN-LSTM's ways to run side by side, which presets give the same bits twice, and the
# packed replicas' bench (scripts/gpu/packed_bench.py, where it exists). Each section is time-boxed out of one
# budget (GPU_BUDGET_S, 285 s), so the whole ends in under 5 minutes even where one hangs; a failing section stops
# none of the others. Logs and results.json go to $OUT (7 files at most); a summary table is printed last.
#
#   scripts/gpu/run.sh             on the GPU machine ($OUT set by the device tool; .whl carried)
#   ONLY="pytest options" scripts/gpu/run.sh   those sections only (a short rerun after a fix)
#   scripts/gpu/run.sh --dry-run   here, on the CPU: the same sections on tiny shapes, the tests' own code on
#                                  device=cpu, the Triton kernels under TRITON_INTERPRET=1 (needs triton installed),
#                                  each time box CAP_SCALE (6) times as long
#
# packed_bench.py's contract: called as `python3 scripts/gpu/packed_bench.py --json FILE` (FILE: a JSON list of
# row objects, or an object), its output in $OUT/packed.log; whatever it writes in FILE goes into results.json and
# its rows are printed in the summary.
set -u
START=$(date +%s)
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
if [ $DRY = 0 ] && [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PWD:/tmp/site || echo "run.sh: the wheels in .whl did not install (hydra-core etc.)"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
OUT=${OUT:-$PWD/gpu-out}
WORK=$(mktemp -d /tmp/lnbench-gpu.XXXXXX)
mkdir -p "$OUT"
BUDGET=${GPU_BUDGET_S:-285}
# No W&B (not installed there), no build of lnbench's C++ CPU kernels (20 s; the CPU references use torch's ops),
# torch.cuda.is_available() without starting CUDA (lnbench.cli does the same).
export PYTHONUNBUFFERED=1 LNBENCH_NATIVE=0 WANDB_MODE=disabled PYTORCH_NVML_BASED_CUDA_CHECK=1
if [ $DRY = 1 ]; then  # Triton's interpreter for the bench and the options only: the tests cover it apart
  export LNBENCH_CUDA_TESTS_DEVICE=cpu
  DEVICE=cpu SHAPES=4x10x32 REPS=3 COMPILE_LIMIT=${COMPILE_LIMIT:-20} SCALE=${CAP_SCALE:-6}
  TRITON_ENV="env TRITON_INTERPRET=1 LNBENCH_TRITON=interpret"
else
  DEVICE=cuda SHAPES=32x100x256,4x100x256 REPS=15 COMPILE_LIMIT=${COMPILE_LIMIT:-45} SCALE=${CAP_SCALE:-1}
  TRITON_ENV=""
fi
BUDGET=$((BUDGET * SCALE))

# section NAME CAP RESERVE COMMAND...: at most CAP seconds, and never into the RESERVE the later sections need
section() {
  local name=$1 cap=$(($2 * SCALE)) reserve=$(($3 * SCALE))
  shift 3
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then
    return
  fi
  local left=$((START + BUDGET - $(date +%s) - reserve))
  local limit=$((cap < left ? cap : left))
  if [ "$limit" -lt 5 ]; then
    echo "== $name: skipped (no time left in the ${BUDGET}s budget)"
    echo "{\"section\": \"$name\", \"status\": \"skipped: no time left\", \"seconds\": 0}" >>"$WORK/sections.jsonl"
    return
  fi
  echo "== $name (at most ${limit}s)"
  local t0=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$? status=ok
  if [ $rc = 124 ] || [ $rc = 137 ]; then status="timed out after ${limit}s"; elif [ $rc != 0 ]; then status="failed (exit $rc)"; fi
  echo "{\"section\": \"$name\", \"status\": \"$status\", \"seconds\": $(($(date +%s) - t0))}" >>"$WORK/sections.jsonl"
  tail -n 4 "$OUT/$name.log" | cut -c1-200
}

timeout_flag=""
$PY -c "import pytest_timeout" 2>/dev/null && timeout_flag="--timeout=60"

section env 15 270 $PY scripts/gpu/env_info.py "$WORK/env.json"
section pytest 120 140 $PY -m pytest -m cuda tests/cuda -q -rfEs -p no:cacheprovider $timeout_flag
section bench 35 105 $TRITON_ENV $PY -m lnbench.cli bench --device $DEVICE --models lstm,gru,ln_lstm,bn_lstm,ln_gru,bn_gru \
  --shapes $SHAPES --reps $REPS --warmup 3 --no-train --no-bandwidth --no-sweep --no-throughput --no-runner \
  --json "$WORK/bench.json"
section options 75 60 $TRITON_ENV $PY scripts/gpu/ln_lstm_options.py --device $DEVICE --shapes $SHAPES --reps $REPS \
  --compile-limit $COMPILE_LIMIT --json "$WORK/options.json"
section determinism 20 45 $PY scripts/gpu/determinism.py --device $DEVICE --json "$WORK/determinism.json"
if [ -f scripts/gpu/packed_bench.py ]; then
  section packed 60 5 $PY scripts/gpu/packed_bench.py --json "$WORK/packed.json"
fi
timeout 20 $PY scripts/gpu/summary.py "$WORK" "$OUT" "$(($(date +%s) - START))"
