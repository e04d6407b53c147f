#!/usr/bin/env bash
# One host's cores as threads of one rank or as ranks of one thread, at the same global
# batch (herd run's default without -np is a rank per NUMA node: issue 31). For each
# model and precision: `herd run -np 1 -- bench train --batch-size B` against
# `herd run -np C -- bench train --batch-size B/C` (C = this host's cores), interleaved,
# REPS rounds; prints each run's samples/s and the medians.
# Usage: bench/ranks_threads.sh [BUILD]   (env: MODELS, PRECISIONS, B, REPS)
set -euo pipefail
build=${1:-build}
herd=$build/herd
models=${MODELS:-mlp lenet5 resnet20}
precisions=${PRECISIONS:-fp32 bf16}
batch=${B:-128} reps=${REPS:-3}
cores=$("$herd" topo | sed -n 's/.* \([0-9][0-9]*\) core(s).*/\1/p')
[ "$cores" -ge 2 ] || { echo "needs 2 or more cores (herd topo says ${cores:-?})"; exit 1; }
echo "# $(date -u) $(uname -n); $("$herd" topo | head -1)"
"$herd" --version | head -2
rate() { grep -o 'samples_per_s=[0-9.]*' | tail -1 | cut -d= -f2; }
median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
for m in $models; do
  steps=40; [ "$m" = resnet20 ] && steps=8
  for p in $precisions; do
    one=() many=()
    for ((r = 0; r < reps; r++)); do
      a=$("$herd" run -np 1 -- bench train --model "$m" --batch-size "$batch" --steps $steps --warmup 2 \
        --precision "$p" 2>/dev/null | rate)
      b=$("$herd" run -np "$cores" -- bench train --model "$m" --batch-size $((batch / cores)) --steps $steps \
        --warmup 2 --precision "$p" 2>/dev/null | rate)
      echo "$m $p round $r: 1 rank x $cores threads $a, $cores ranks x 1 thread $b"
      one+=("$a") many+=("$b")
    done
    ma=$(printf '%s\n' "${one[@]}" | median) mb=$(printf '%s\n' "${many[@]}" | median)
    echo "MEDIAN $m $p global batch $batch: 1x$cores $ma  ${cores}x1 $mb  ranks/threads $(awk -v a="$ma" -v b="$mb" 'BEGIN{printf "%.2f", b/a}')"
  done
done
