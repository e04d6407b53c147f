#!/usr/bin/env bash
# herd.torch's allgather of rows that differ by rank (bench/herd_torch_allgather.py), and its
# _async collectives on small tensors (bench/herd_torch_async_small.py), on 2 and 3 ranks of 1
# thread, ROUNDS rounds; with BASE=OTHER_BUILD_DIR (a build of another
# commit, its Python package inside) the two builds alternate, run by run.
# Usage: bash bench/herd_torch_allgather.sh [ROUNDS] > bench/results/DATE-herd-torch-allgather.txt
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
rounds=${1:-3}
bench_herd_torch_setup
bench_builds
for round in $(seq "$rounds"); do
  for np in 2 3; do
    for rows in 10 1000; do
      for b in "${builds[@]}"; do
        bench_torch_line "$round" "$b" "$np" bench/herd_torch_allgather.py --rows "$rows"
      done
    done
    for b in "${builds[@]}"; do
      bench_torch_line "$round" "$b" "$np" bench/herd_torch_async_small.py
    done
  done
done
