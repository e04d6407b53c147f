#!/usr/bin/env bash
# A sparse embedding's gradients across 2 ranks (docs/performance.md, "Sparse gradients"):
# herd.torch sending the rows each rank touched (allgather, Horovod's default), herd.torch
# summing the whole table in a bucket (sparse_as_dense=True; what sparse_as_dense=False did
# before 2026-12-07, plus the rows cut out after), and PyTorch DDP over gloo, side by side,
# ROUNDS rounds alternating, 1 thread a rank (bench/herd_torch_sparse.py).
# Usage: bash bench/herd_torch_sparse.sh [ROUNDS] > bench/results/DATE-herd-torch-sparse.txt
#        (VOCABS="20000 200000" STEPS=50: table sizes and timed steps)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
rounds=${1:-3}
bench_herd_torch_setup
for round in $(seq "$rounds"); do
  for vocab in ${VOCABS:-20000 200000}; do
    a=(--vocab "$vocab" --steps "${STEPS:-50}")
    echo "round=$round $("$herd" run -np 2 -- "$python" bench/herd_torch_sparse.py --dense 0 "${a[@]}" 2>/dev/null | grep framework=)"
    echo "round=$round $("$herd" run -np 2 -- "$python" bench/herd_torch_sparse.py --dense 1 "${a[@]}" 2>/dev/null | grep framework=)"
    echo "round=$round $("$python" bench/herd_torch_sparse.py --ddp 2 "${a[@]}" 2>/dev/null | grep framework=)"
  done
done
