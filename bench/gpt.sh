#!/usr/bin/env bash
# GPT training speed on the CPU, herd against PyTorch 1.13 side by side in one run
# (issue 28): tokens/s of gpt-nano (sequence 64, its context, batch 16) and gpt2 (GPT-2
# small, sequence 256, batch 4) at 1 thread, fp32 and bf16, on Debian's license texts
# tokenised byte-level; with --ranks N, N ranks x 1 thread (`herd run` against PyTorch DDP
# over gloo, the batch per rank). PyTorch runs the same model file (bench/torch_gpt.py),
# the same optimizer as `herd bench train` (SGD, momentum 0.9, weight decay 5e-4) and, for
# bf16, CPU autocast. Each throughput is also given as a fraction of the 1-thread GEMM
# limit of its precision measured in this run x the cores (training FLOPs = 3 x forward).
#
#   bench/gpt.sh [--models gpt-nano,gpt2] [--repeats 1] [--ranks 1]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
herd=${HERD:-$root/build/herd}
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
models=gpt-nano,gpt2
repeats=1
ranks=1
while [ $# -gt 0 ]; do
  case $1 in
    --models) models=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpt.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$herd" ] || { echo "gpt.sh: $herd not found: make build" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bench_gpt_setup "$tmp"

shape() { # model -> "T B STEPS WARMUP VOCAB"
  case $1 in
    gpt-nano) echo 64 16 30 3 256 ;;
    gpt2) echo 256 4 3 1 50257 ;;
    *) echo "gpt.sh: no shape for $1" >&2; exit 2 ;;
  esac
}

declare -A tps fpt
IFS=, read -r -a model_list <<<"$models"
for m in "${model_list[@]}"; do for p in fp32 bf16; do tps[herd,$m,$p]=-; tps[torch,$m,$p]=-; done; done
for ((r = 1; r <= repeats; r++)); do
  for m in "${model_list[@]}"; do
    read -r t b steps warmup vocab <<<"$(shape "$m")"
    for p in "${precs[@]}"; do
      args=(bench train --model "$m" --data "tokens:$tmp/lic_train.bin,$vocab" --seq-len "$t"
            --batch-size "$b" --steps "$steps" --warmup "$warmup" --precision "$p")
      if [ "$ranks" = 1 ]; then
        line=$(OMP_NUM_THREADS=1 "$herd" "${args[@]}" --threads 1 2>/dev/null | tail -n 1) || line=
      else
        line=$(timeout 1800 "$herd" run -np "$ranks" --threads-per-rank 1 -- "${args[@]}" 2>/dev/null |
                 grep tokens_per_s= | tail -n 1) || line=
      fi
      echo "herd  $m $p: $line"
      v=$(kv tokens_per_s "$line"); [ -n "$v" ] && tps[herd,$m,$p]=$(best "${tps[herd,$m,$p]}" "$v")
      # Training GFLOP per token at this sequence length: herd's gflops= over its tokens/s.
      [ -n "$v" ] && fpt[$m]=$(awk -v g="$(kv gflops "$line")" -v s="$v" 'BEGIN { print g / s }')
      line=$(OMP_NUM_THREADS=1 timeout 1800 "$python" "$root/bench/torch_gpt.py" --model "$m" \
               --seq-len "$t" --batch-size "$b" --steps "$steps" --warmup "$warmup" --precision "$p" \
               --ddp "$ranks" 2>/dev/null | tail -n 1) || line=
      echo "torch $m $p: $line"
      v=$(kv tokens_per_s "$line"); [ -n "$v" ] && tps[torch,$m,$p]=$(best "${tps[torch,$m,$p]}" "$v")
    done
  done
done

# fraction TOKENS_PER_S MODEL PRECISION: training FLOPs per token x tokens/s over the
# limit of the precision x the cores.
fraction() { limit_frac "$1" "${fpt[$2]:-}" "$3" "$ranks"; }
echo
echo "### GPT training, tokens/s, $ranks rank(s) x 1 thread (best of $repeats; $(date -u +%Y-%m-%d))"
echo
echo "Limits in this run: fp32 GEMM $GEMM_LIMIT GFLOP/s, bf16 GEMM $GEMM_BF16 GFLOP/s (1 core); in"
echo "brackets each throughput's training FLOPs (3 x forward at that sequence length) as a fraction"
echo "of its precision's limit x $ranks core(s)."
echo
echo "| model | herd fp32 | PyTorch fp32 | herd / PyTorch | herd bf16 | PyTorch bf16 | herd / PyTorch | herd bf16 / fp32 |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for m in "${model_list[@]}"; do
  hf=${tps[herd,$m,fp32]} hb=${tps[herd,$m,bf16]} tf=${tps[torch,$m,fp32]} tb=${tps[torch,$m,bf16]}
  echo "| $m | $hf ($(fraction "$hf" "$m" fp32)) | $tf ($(fraction "$tf" "$m" fp32)) | $(ratio "$hf" "$tf")" \
       "| $hb ($(fraction "$hb" "$m" bf16)) | $tb ($(fraction "$tb" "$m" bf16)) | $(ratio "$hb" "$tb") | $(ratio "$hb" "$hf") |"
done
