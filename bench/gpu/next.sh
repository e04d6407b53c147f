#!/usr/bin/env bash
# What waits for a GPU, most important first, in one device call of at most BUDGET seconds
# (default 480: a call may run 600, and a session has 900 of device time, starts
# included). A part starts only while the budget has room for it (its usual time, in
# brackets), and says so when it does not:
#   1. bench/gpu/graphs.sh: --cuda-graphs byte for byte against eager, its speed beside
#      PyTorch (issue 26) [240 s];
#   2. bench/gpu/torch_cuda.sh: herd.torch on CUDA tensors (issue 30) [60 s];
#   3. bench/gpu/half.sh parts 1 and 6: the 16-bit and --deterministic checks (issue 27)
#      and GPT with tensor parallelism on the GPU (issue 28) [120 s];
#   4. bench/gpu/check.sh PART=exact: the checks against the CPU [120 s];
#   5. bench/gpu/recompute.sh: --recompute's bytes and memory on the GPU, --loss-chunk's
#      weights [45 s].
#   here:  bench/gpu/pack.sh        there: bench/gpu/next.sh OUTDIR
# Each script writes its own log into OUTDIR; this one prints their summaries.
set -u
out=${1:-${OUT:-/tmp}}
budget=${BUDGET:-480}
mkdir -p "$out"
cd "$(dirname "$0")/../.."
t0=$SECONDS
run() { # run SECONDS NAME COMMAND...: COMMAND if SECONDS still fit in the budget
  local need=$1 name=$2 left=$((budget - (SECONDS - t0)))
  shift 2
  if [ "$left" -lt "$need" ]; then
    echo "next: not run, $left s left of $budget: $name (about $need s)"
    return
  fi
  echo "next: $name ($((SECONDS - t0)) s)"
  "$@" 2>&1 | tail -n 1
}
run 240 "graphs.sh" bash bench/gpu/graphs.sh "$out"
run 60 "torch_cuda.sh" bash bench/gpu/torch_cuda.sh "$out"
run 120 "half.sh 1 6" env SECTIONS="1 6" P16=bf16 bash bench/gpu/half.sh "$out"
run 120 "check.sh PART=exact" env PART=exact bash bench/gpu/check.sh "$out"
run 45 "recompute.sh" bash bench/gpu/recompute.sh "$out"
echo "next: done ($((SECONDS - t0)) s); logs in $out"
