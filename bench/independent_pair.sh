#!/usr/bin/env bash
# The weak-scaling ceiling of this machine with no communication at all: one
# single-process `herd bench train` alone on core 0, then two independent ones at
# once on cores 0 and 1. "pair efficiency" = (sum of the two) / (2 x alone): what two
# ranks could reach if reductions cost nothing. Each repeat measures both, in turn.
#
#   bench/independent_pair.sh [--models mlp,lenet5,resnet20] [--repeats 3]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
herd=${HERD:-$root/build/herd}
models=mlp,lenet5,resnet20
repeats=3
while [ $# -gt 0 ]; do
  case $1 in
    --models) models=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ "$(getconf _NPROCESSORS_ONLN)" -ge 2 ] || { echo "needs 2 cores" >&2; exit 1; }
sps() { # sps CORE MODEL STEPS: samples/s of one single-thread run bound to CORE
  taskset -c "$1" "$herd" bench train --model "$2" --threads 1 --steps "$3" 2>/dev/null |
    tail -n 1 | sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p'
}
printf '%-10s %10s %10s %10s %8s\n' model alone pair_a pair_b pair_eff
IFS=, read -r -a list <<<"$models"
for ((r = 1; r <= repeats; r++)); do
  for m in "${list[@]}"; do
    steps=100; [ "$m" = resnet20 ] && steps=30
    alone=$(sps 0 "$m" $steps)
    sps 0 "$m" $steps >"/tmp/herd_pair_$$" &
    b=$(sps 1 "$m" $steps)
    wait
    a=$(cat "/tmp/herd_pair_$$")
    rm -f "/tmp/herd_pair_$$"
    printf '%-10s %10s %10s %10s %8s\n' "$m" "$alone" "$a" "$b" \
      "$(awk -v x="$alone" -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", (a + b) / (2 * x) }')"
  done
done
