#!/usr/bin/env bash
# bf16 against fp32 on the CPU, herd and PyTorch 1.13 (CPU autocast bf16) side by side
# in one run, interleaved per model so that drift in machine load affects all alike:
#
#   bench/bf16.sh [--models mlp,lenet5,resnet20,resnet50] [--repeats 2] [--ranks 1|2]
#
# mlp, lenet5, resnet20: Fashion-MNIST, batch 128, 50 steps after 5; resnet50: synthetic
# 3x224x224 with 1000 classes, batch 32, 4 steps after 2 (as the issue asks). --ranks 2:
# `herd run -np 2` against PyTorch DDP (gloo) with 1 thread per rank (resnet50: herd
# holds 7.3 GB per rank at batch 32 in fp32, so run it alone on a 24 GB machine:
# --models resnet50). Needs a CPU where oneDNN has bf16
# instructions (herd refuses bf16 elsewhere; `herd --version` says which).
# The limits measured in this run: the 1-thread fp32 GEMM (bench/lib.sh) and the
# 1-thread bf16 GEMM (torch.mm on bf16 tensors: oneDNN's AVX512_BF16 kernel, 1024^3);
# each throughput is also given as 3 x forward FLOPs x samples/s over the limit of its
# precision times the cores used. The best of the repeats is reported.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
herd=${HERD:-$root/build/herd}
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
models=mlp,lenet5,resnet20,resnet50
repeats=2
ranks=1
while [ $# -gt 0 ]; do
  case $1 in
    --models) models=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bf16.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$herd" ] || { echo "bf16.sh: $herd not found: make build" >&2; exit 1; }
"$herd" --version | tail -n 1
"$herd" --version | grep -q 'bf16: native' || { echo "bf16.sh: no native bf16 on this CPU" >&2; exit 1; }
bench_reference_setup
bench_gemm_limits
bench_gemm_bf16_limit

herd_args() { # model precision
  if [ "$1" = resnet50 ]; then
    echo --model resnet50 --data synthetic:3,224,224,1000,128 --batch-size 32 --steps 4 --warmup 2 --precision "$2"
  else
    echo --model "$1" --data fashion-mnist --batch-size 128 --steps 50 --warmup 5 --precision "$2"
  fi
}
torch_args() {
  if [ "$1" = resnet50 ]; then
    echo --models resnet50 --shape 3,224,224,1000 --batch-size 32 --steps 4 --warmup 2 --precision "$2"
  else
    echo --models "$1" --batch-size 128 --steps 50 --warmup 5 --precision "$2"
  fi
}
declare -A sps gf
IFS=, read -r -a model_list <<<"$models"
precs=(fp32 bf16)
for m in "${model_list[@]}"; do for p in "${precs[@]}"; do sps[herd,$m,$p]=-; sps[torch,$m,$p]=-; gf[$m]=; done; done
for ((r = 1; r <= repeats; r++)); do
  for m in "${model_list[@]}"; do
    for p in "${precs[@]}"; do
      if [ "$ranks" = 1 ]; then
        line=$(OMP_NUM_THREADS=1 "$herd" bench train $(herd_args "$m" "$p") --threads 1 2>/dev/null | tail -n 1) || line=
      else
        line=$(timeout 900 "$herd" run -np "$ranks" --threads-per-rank 1 -- bench train $(herd_args "$m" "$p") \
                 2>/dev/null | grep samples_per_s= | tail -n 1) || line=
      fi
      echo "herd  $m $p: $line" >&2
      v=$(kv samples_per_s "$line"); [ -n "$v" ] && sps[herd,$m,$p]=$(best "${sps[herd,$m,$p]}" "$v")
      # herd's gflops= is per job; FLOPs per sample = gflops / samples_per_s.
      [ -n "$v" ] && gf[$m]=$(awk -v g="$(kv gflops "$line")" -v s="$v" 'BEGIN { print g / s }')
      extra=(); [ "$ranks" -gt 1 ] && extra=(--ddp "$ranks")
      line=$(OMP_NUM_THREADS=1 timeout 900 "$python" "$root/bench/torch_reference.py" $(torch_args "$m" "$p") \
               --threads 1 "${extra[@]}" 2>/dev/null | tail -n 1) || line=
      echo "torch $m $p: $line" >&2
      v=$(kv samples_per_s "$line"); [ -n "$v" ] && sps[torch,$m,$p]=$(best "${sps[torch,$m,$p]}" "$v")
    done
  done
done
# fraction SPS MODEL PRECISION: achieved GFLOP/s over the limit of that precision x cores.
fraction() { limit_frac "$1" "${gf[$2]}" "$3" "$ranks"; }
echo
echo "### bf16 against fp32, $ranks rank(s) x 1 thread (best of $repeats; $(date -u +%Y-%m-%d))"
echo
echo "Limits in this run: fp32 GEMM $GEMM_LIMIT GFLOP/s per core, bf16 GEMM $GEMM_BF16 GFLOP/s per core;"
echo "in brackets each throughput as a fraction of its precision's limit x $ranks core(s)."
echo
echo "| model | herd fp32 | herd bf16 | herd bf16/fp32 | PyTorch fp32 | PyTorch bf16 | PyTorch bf16/fp32 | herd bf16 / PyTorch bf16 |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for m in "${model_list[@]}"; do
  hf=${sps[herd,$m,fp32]} hb=${sps[herd,$m,bf16]} tf=${sps[torch,$m,fp32]} tb=${sps[torch,$m,bf16]}
  echo "| $m | $hf ($(fraction "$hf" "$m" fp32)) | $hb ($(fraction "$hb" "$m" bf16)) | $(ratio "$hb" "$hf")" \
       "| $tf ($(fraction "$tf" "$m" fp32)) | $tb ($(fraction "$tb" "$m" bf16)) | $(ratio "$tb" "$tf") | $(ratio "$hb" "$tb") |"
done
