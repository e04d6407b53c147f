#!/usr/bin/env bash
# Tensor parallelism against data parallelism on the CPU (issue 28): one job of 2 ranks x
# 1 thread trains GPT at the same global batch either as TP 2 (one replica split over both
# ranks, --tensor-parallel 2) or DP 2 (two whole replicas), side by side in one run:
# tokens/s of `herd bench train`, the fraction of 2 x the 1-thread GEMM limit measured
# here, and each rank's peak resident memory (/usr/bin/time's maximum RSS, which includes
# MPI's and the data's). gpt2 at sequence 256 (global batch 8 sequences), gpt-nano at 64
# (global 32), fp32 and, where the CPU has bf16 instructions, bf16.
#
#   bench/gpt_tp.sh [--models gpt-nano,gpt2] [--steps 3]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
herd=${HERD:-$root/build/herd}
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
models=gpt-nano,gpt2
steps=3
while [ $# -gt 0 ]; do
  case $1 in
    --models) models=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpt_tp.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$herd" ] || { echo "gpt_tp.sh: $herd not found: make build" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bench_gpt_setup "$tmp"
mpirun=(mpirun.openmpi --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

shape() { # model -> "T GLOBAL_BATCH WARMUP"
  case $1 in
    gpt-nano) echo 64 32 3 ;;
    gpt2) echo 256 8 1 ;;
  esac
}
IFS=, read -r -a model_list <<<"$models"
rows=()
for m in "${model_list[@]}"; do
  read -r t gb warmup <<<"$(shape "$m")"
  s=$steps; [ "$m" = gpt-nano ] && s=$((steps * 10))
  for p in "${precs[@]}"; do
    for grid in "DP 2 1 $((gb / 2))" "TP 2 2 $gb"; do
      read -r kind np tpn b <<<"$grid"
      echo "\$ mpirun -np $np herd bench train --model $m --seq-len $t --batch-size $b --tensor-parallel $tpn --precision $p --steps $s"
      rm -f "$tmp"/rss.*
      # Each rank's peak RSS into a file of its own (their stderr would interleave).
      OMP_NUM_THREADS=1 timeout 3600 "${mpirun[@]}" -np "$np" \
        sh -c '/usr/bin/time -o "$0.$OMPI_COMM_WORLD_RANK" -f %M "$@"' "$tmp/rss" \
        "$herd" bench train --model "$m" --data "tokens:$tmp/lic_train.bin,$( [ "$m" = gpt2 ] && echo 50257 || echo 256)" \
        --seq-len "$t" --batch-size "$b" --steps "$s" --warmup "$warmup" --threads 1 \
        --tensor-parallel "$tpn" --precision "$p" >"$tmp/out" 2>&1 || true
      grep -E "tokens_per_s=|error" "$tmp/out" | sed 's/^/  /'
      for f in "$tmp"/rss.*; do echo "  rank ${f##*.} maxrss_kib=$(tail -n 1 "$f")"; done
      line=$(grep tokens_per_s= "$tmp/out" | tail -n 1)
      tps=$(kv tokens_per_s "$line"); tps=${tps:--}
      gf=$(kv gflops "$line"); gf=${gf:--}
      rss=$(for f in "$tmp"/rss.*; do tail -n 1 "$f"; done |
            awk '{ printf "%s%.0f", (NR > 1 ? ", " : ""), $1 / 1024 }')
      lim=$GEMM_LIMIT; [ "$p" = bf16 ] && lim=$GEMM_BF16
      frac=$(awk -v g="$gf" -v l="$lim" 'BEGIN { if (g == "-" || l <= 0) print "-"; else printf "%.2f", g / (2 * l) }')
      rows+=("| $m | $p | $kind 2 (batch $b per replica) | $tps | $frac | $rss |")
    done
  done
done
echo
echo "### GPT on 2 ranks x 1 thread: tensor against data parallelism ($(date -u +%Y-%m-%d))"
echo
echo "Limits in this run (1 core): fp32 GEMM $GEMM_LIMIT GFLOP/s, bf16 GEMM $GEMM_BF16 GFLOP/s; a row's"
echo "fraction is its training FLOPs per second over 2 x its precision's limit."
echo
echo "| model | precision | grid | tokens/s | of 2 x GEMM limit | peak RSS per rank (MiB) |"
echo "|---|---|---|---:|---:|---|"
printf '%s\n' "${rows[@]}"
