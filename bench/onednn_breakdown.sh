#!/usr/bin/env bash
# Where a training step's time goes in oneDNN: one `herd bench train` under
# ONEDNN_VERBOSE=1, its primitive executions summed by kind and implementation and
# divided by the steps run (warm-up included), then the reorders by layouts. What is
# left of step_ms is herd's own loops (batch norm, ReLU, adds, loss, optimizer).
#
#   bench/onednn_breakdown.sh [herd bench train options]   (default: resnet20, batch 128,
#                                                          1 thread, 10 steps after 3)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
herd=${HERD:-$root/build/herd}
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--model resnet20 --data fashion-mnist --batch-size 128 --steps 10
                               --warmup 3 --threads 1)
steps=0 warmup=0
for ((i = 0; i < ${#args[@]} - 1; i++)); do
  case ${args[i]} in --steps) steps=${args[i+1]} ;; --warmup) warmup=${args[i+1]} ;; esac
done
[ "$steps" -gt 0 ] || { echo "onednn_breakdown.sh: give --steps (and --warmup)" >&2; exit 2; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "\$ OMP_NUM_THREADS=1 ONEDNN_VERBOSE=1 herd bench train ${args[*]}"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} ONEDNN_VERBOSE=1 "$herd" bench train "${args[@]}" >"$log" 2>&1
grep -v '^onednn_verbose' "$log" | tail -n 1
total=$((steps + warmup))
echo "# oneDNN time per step (all $total steps / $total), by primitive and implementation:"
awk -F, -v n="$total" '$1 == "onednn_verbose" && $2 == "exec" {
    t[$4 "," $5 "," $6] += $NF; c[$4 "," $5 "," $6]++; all += $NF }
  END { for (k in t) printf "%9.1f ms %5d calls  %s\n", t[k] / n, c[k] / n, k
        printf "%9.1f ms in all\n", all / n > "/dev/stderr" }' "$log" 2>&1 | sort -rn
echo "# reorders by layouts:"
awk -F, -v n="$total" '$1 == "onednn_verbose" && $2 == "exec" && $4 == "reorder" {
    k = $5 "," $7; t[k] += $NF; c[k]++ }
  END { for (k in t) printf "%9.2f ms %5d calls  %s\n", t[k] / n, c[k] / n, k }' "$log" | sort -rn
