#!/usr/bin/env bash
# herd predict against a measurement, in one run: for each model, the predicted 2-worker
# efficiency (alpha-beta fitted to a `herd bench allreduce -J` file measured on this
# machine) and `herd run -np 2 -- bench train`'s own in-run scaling efficiency.
#
#   bench/predict_vs_measured.sh BENCH_JSON [--models mlp,lenet5,resnet20] [--repeats 3]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
herd=${HERD:-$root/build/herd}
[ $# -ge 1 ] && [ -f "$1" ] || { echo "usage: predict_vs_measured.sh BENCH_JSON [--models M,..] [--repeats N]" >&2; exit 2; }
json=$1; shift
models=mlp,lenet5,resnet20
repeats=3
while [ $# -gt 0 ]; do
  case $1 in
    --models) models=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    *) echo "predict_vs_measured.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
kv() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p" | tail -n 1; }
IFS=, read -r -a list <<<"$models"
for m in "${list[@]}"; do
  steps=100; [ "$m" = resnet20 ] && steps=30
  echo "== $m"
  "$herd" predict --model "$m" --workers 2 --from-bench "$json" --steps 20
  for ((r = 1; r <= repeats; r++)); do
    line=$("$herd" run -np 2 -- bench train --model "$m" --steps "$steps" 2>/dev/null | tail -n 1)
    echo "measured: $line"
    echo "measured $m run $r: scaling_efficiency=$(kv scaling_efficiency "$line") comm_wait_ms=$(kv comm_wait_ms "$line") step_ms=$(kv step_ms "$line")"
  done
done
