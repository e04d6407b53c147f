#!/usr/bin/env bash
# herd.torch's DistributedOptimizer with op=hvd.Adasum against its default (the mean of the
# gradients) on 2 ranks of 1 thread, mlp, lenet5 and resnet20 at batch 128 a rank
# (bench/herd_torch.py), the two interleaved, ROUNDS rounds.
# Usage: bash bench/herd_torch_adasum_train.sh [ROUNDS] > bench/results/DATE-herd-torch-adasum-train.txt
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
rounds=${1:-3}
bench_herd_torch_setup
for round in $(seq "$rounds"); do
  for model in mlp lenet5 resnet20; do
    steps=50
    [ "$model" = resnet20 ] && steps=20
    for op in Average Adasum; do
      line=$($herd run -np 2 -- "$python" bench/herd_torch.py --models "$model" --steps "$steps" --op "$op" \
        2>/dev/null | grep samples_per_s) || line="failed"
      echo "round=$round op=$op $line"
    done
  done
done
