#!/usr/bin/env bash
# GPT on 2 ranks x 1 thread as data, tensor and pipeline parallelism, side by side in one
# run: the same global batch trained by `herd train` as DP 2 (two whole replicas), TP 2
# (one replica split by heads, features and vocabulary), and PP 2 (two stages, the last
# holding a copy of the tied token table; --micro-batches M). Each row: the median step
# of steps 2..N (rank 0's step_ms in --metrics; the first step builds kernels' plans), the
# tokens/s it makes, the fraction of 2 x the 1-thread GEMM limit measured here (training
# FLOPs = 3 x herd's forward count, taken from a one-step `herd bench train`), and each
# rank's peak resident memory (/usr/bin/time's maximum RSS, MPI's and the data's in it).
#
#   bench/gpt_grid.sh [--model gpt2] [--seq-len 256] [--batch 8] [--steps 4] [--micro 4]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
herd=${HERD:-$root/build/herd}
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
model=gpt2 seq=256 batch=8 steps=4 micro=4
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --seq-len) seq=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --micro) micro=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpt_grid.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$herd" ] || { echo "gpt_grid.sh: $herd not found: make build" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bench_gpt_setup "$tmp"
vocab=256; [ "$model" = gpt2 ] && vocab=50257
data="tokens:$tmp/lic_train.bin,$vocab"
mpirun=(mpirun.openmpi --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# herd's forward FLOPs per sample at this sequence: gflops = 3 x that x samples/s.
OMP_NUM_THREADS=1 "$herd" bench train --model "$model" --data "$data" --seq-len "$seq" \
  --batch-size 1 --steps 1 --warmup 0 --threads 1 >"$tmp/one" 2>&1
line=$(tail -n 1 "$tmp/one")
fwd=$(awk -v g="$(kv gflops "$line")" -v s="$(kv samples_per_s "$line")" 'BEGIN { printf "%.6g", g * 1e9 / (3 * s) }')
echo "forward FLOPs per sample of $model at sequence $seq: $fwd"

rows=()
for p in "${precs[@]}"; do
  for grid in "DP|--batch-size $((batch / 2))" "TP|--batch-size $batch --tensor-parallel 2" \
              "PP|--batch-size $batch --pipeline-stages 2 --micro-batches $micro"; do
    kind=${grid%%|*}
    read -r -a args <<<"${grid#*|}"
    echo "\$ mpirun -np 2 herd train --model $model --seq-len $seq ${args[*]} --precision $p --max-steps $steps"
    rm -f "$tmp"/rss.* "$tmp/m"
    OMP_NUM_THREADS=1 timeout 3600 "${mpirun[@]}" -np 2 \
      sh -c '/usr/bin/time -o "$0.$OMPI_COMM_WORLD_RANK" -f %M "$@"' "$tmp/rss" \
      "$herd" train --model "$model" --data "$data" --seq-len "$seq" --threads 1 \
      --optimizer sgd --lr 0.01 --momentum 0.9 --eval-every 0 --log-every 1 --max-steps "$steps" \
      --precision "$p" --metrics "$tmp/m" "${args[@]}" >"$tmp/out" 2>&1 || true
    grep -E "error|param_bytes" "$tmp/out" | sed "s/^/  /" || true
    step_ms=$(python3 - "$tmp/m" <<'PY'
import json, statistics, sys
ms = [json.loads(l)["step_ms"] for l in open(sys.argv[1]) if '"kind":"step"' in l][1:]
print("%.1f" % statistics.median(ms) if ms else "-")
PY
)
    echo "  step_ms (median of steps 2..$steps) = $step_ms"
    tps=$(awk -v m="$step_ms" -v b="$batch" -v t="$seq" 'BEGIN { if (m == "-") print "-"; else printf "%.1f", b * t * 1000 / m }')
    frac=$(limit_frac "$(awk -v x="$tps" -v t="$seq" 'BEGIN { print (x == "-") ? "-" : x / t }')" \
           "$(awk -v f="$fwd" 'BEGIN { print 3 * f / 1e9 }')" "$p" 2)
    rss=$(for f in "$tmp"/rss.*; do tail -n 1 "$f"; done | awk '{ printf "%s%.0f", (NR > 1 ? ", " : ""), $1 / 1024 }')
    for f in "$tmp"/rss.*; do echo "  rank ${f##*.} maxrss_kib=$(tail -n 1 "$f")"; done
    rows+=("| $model | $p | $kind 2 (${args[*]}) | $step_ms | $tps | $frac | $rss |")
  done
done
echo
echo "### $model on 2 ranks x 1 thread, global batch $batch x $seq: DP, TP and PP ($(date -u +%Y-%m-%d))"
echo
echo "Limits in this run (1 core): fp32 GEMM $GEMM_LIMIT GFLOP/s, bf16 GEMM $GEMM_BF16 GFLOP/s."
echo
echo "| model | precision | grid | step ms | tokens/s | of 2 x GEMM limit | peak RSS per rank (MiB) |"
echo "|---|---|---|---:|---:|---:|---|"
printf '%s\n' "${rows[@]}"
