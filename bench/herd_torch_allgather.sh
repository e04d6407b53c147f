#!/usr/bin/env bash
# herd.torch's allgather of rows that differ by rank (bench/herd_torch_allgather.py) on 2
# and 3 ranks of 1 thread, ROUNDS rounds; with BASE=OTHER_BUILD_DIR (a build of another
# commit, its Python package inside) the two builds alternate, run by run.
# Usage: bash bench/herd_torch_allgather.sh [ROUNDS] > bench/results/DATE-herd-torch-allgather.txt
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
rounds=${1:-3}
bench_herd_torch_setup
builds=("$PWD/build")
[ -n "${BASE:-}" ] && builds=("$(cd "$BASE" && pwd)" "${builds[@]}")
for round in $(seq "$rounds"); do
  for np in 2 3; do
    for rows in 10 1000; do
      for b in "${builds[@]}"; do
        line=$(PYTHONPATH=$b/python "$b/herd" run -np "$np" -- "$python" bench/herd_torch_allgather.py \
          --rows "$rows" 2>/dev/null | grep ranks=) || line="failed"
        echo "round=$round build=$b $line"
      done
    done
  done
done
