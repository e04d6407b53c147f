#!/usr/bin/env bash
# herd.torch's Adasum against its sum of the same float32 tensor (bench/herd_torch_adasum.py)
# on 2, 3 and 4 ranks of 1 thread, 1 and 16 MiB, ROUNDS rounds.
# Usage: bash bench/herd_torch_adasum.sh [ROUNDS] > bench/results/DATE-herd-torch-adasum.txt
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
rounds=${1:-3}
bench_herd_torch_setup
bench_builds
for round in $(seq "$rounds"); do
  for np in 2 3 4; do
    for mib in 1 16; do
      for b in "${builds[@]}"; do
        bench_torch_line "$round" "$b" "$np" bench/herd_torch_adasum.py --mib "$mib"
      done
    done
  done
done
