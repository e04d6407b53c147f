#!/usr/bin/env bash
# What hvd.join's announcements cost (docs/performance.md, "herd from Python"): herd.torch
# on 2 ranks of 1 thread (bench/herd_torch.py: the same models and steps as herd_torch.sh),
# with HERD_TORCH_JOIN=1 (every collective announced by a small sum first) and without,
# ROUNDS rounds alternating.
# Usage: bash bench/herd_torch_join.sh [ROUNDS] > bench/results/DATE-herd-torch-join.txt
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
rounds=${1:-3}
bench_herd_torch_setup
export MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=17179869184 MALLOC_TOP_PAD_=536870912
declare -A steps=([mlp]=300 [lenet5]=100 [resnet20]=10)
for round in $(seq "$rounds"); do
  for model in ${MODELS:-mlp lenet5 resnet20}; do
    for join in 0 1; do
      echo "round=$round join=$join $(HERD_TORCH_JOIN=$join "$herd" run -np 2 -x HERD_TORCH_JOIN -- "$python" \
        bench/herd_torch.py --threads 1 --models "$model" --steps "${steps[$model]}" 2>/dev/null | grep model=)"
    done
  done
done
