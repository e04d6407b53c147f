#!/usr/bin/env bash
# What --timeline costs: `herd bench train` without and with --timeline, interleaved
# (alternating which runs first, so drift in machine load affects both alike), on
# 1 rank and under `mpirun -np 2`, keeping each side's best step time.
#
#   bench/timeline_overhead.sh [--models mlp,lenet5,resnet20] [--steps 50]
#                              [--warmup 5] [--repeats 3] [--ranks 1,2]
#
# Environment: HERD (default build/herd). Prints one line per model and rank count:
# best ms/step off, on, and the overhead in percent of the step.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
herd=${HERD:-$root/build/herd}
models=mlp,lenet5,resnet20
steps=50
warmup=5
repeats=3
ranks=1,2
while [ $# -gt 0 ]; do
  case $1 in
    --models) models=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

step_ms() { # ranks, model, extra flags...
  local np=$1 model=$2; shift 2
  local cmd=("$herd" bench train --model "$model" --batch-size 128 --threads 1
             --steps "$steps" --warmup "$warmup" "$@")
  [ "$np" -gt 1 ] && cmd=(mpirun --oversubscribe --bind-to core -np "$np" "${cmd[@]}")
  "${cmd[@]}" 2>/dev/null | sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p'
}
best() { sort -g | head -n 1; }

printf '%-10s %5s %12s %12s %9s\n' model ranks off_ms on_ms overhead
for np in ${ranks//,/ }; do
  for model in ${models//,/ }; do
    : >"$tmp/off"; : >"$tmp/on"
    for i in $(seq "$repeats"); do # alternate which goes first
      if [ $((i % 2)) -eq 1 ]; then
        step_ms "$np" "$model" >>"$tmp/off"
        step_ms "$np" "$model" --timeline "$tmp/t.json" >>"$tmp/on"
      else
        step_ms "$np" "$model" --timeline "$tmp/t.json" >>"$tmp/on"
        step_ms "$np" "$model" >>"$tmp/off"
      fi
    done
    off=$(best <"$tmp/off"); on=$(best <"$tmp/on")
    printf '%-10s %5s %12s %12s %8.2f%%\n' "$model" "$np" "$off" "$on" \
      "$(awk -v a="$off" -v b="$on" 'BEGIN { print 100 * (b - a) / a }')"
  done
done
