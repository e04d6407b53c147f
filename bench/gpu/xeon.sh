#!/usr/bin/env bash
# Issue 31 on the device machine's CPU (a 16-core Xeon with AMX): herd against PyTorch as
# installed there (2.11, MKL and oneDNN), side by side in one run, synthetic data of the
# models' shapes (the image has no data sets), samples/s:
#   threads: mlp, lenet5, resnet20 (1x28x28, batch 128) and resnet50 (3x224x224, batch 32),
#            fp32 and bf16 (PyTorch: CPU autocast), T in THREADS (default 1 4 16);
#   ranks:   the same models in fp32 on R in RANKS (default 2 4 8 16) ranks of 16/R threads:
#            herd under Hydra against DDP over gloo (bench/torch_reference.py --ddp R).
#   here:  XEON=1 bench/gpu/pack.sh     (.dev/herd-xeon: -march=sapphirerapids, no CUDA)
#   there: bench/gpu/xeon.sh OUTDIR [threads|ranks|all]   (SCALE=N multiplies the steps;
#          MODELS, THREADS and RANKS narrow it)
set -u
out=${1:-${OUT:-/tmp}}
part=${2:-all}
mkdir -p "$out"
exec > >(tee -a "$out/xeon-train.txt") 2>&1
cd "$(dirname "$0")/../.."
. .dev/env.sh
. bench/gpu/lib.sh
herd=${HERD_XEON:-.dev/herd-xeon}
scale=${SCALE:-1}
# PyTorch's step swings 2-5x between runs with glibc's default malloc (bench/herd_torch.sh
# says why): its runs get the allocator settings the other benchmarks give it.
py() {
  env -u LD_LIBRARY_PATH MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=17179869184 \
    MALLOC_TOP_PAD_=536870912 timeout 600 python3 "$@"
}
date -u
lscpu | grep -E "^Model name|^CPU\(s\)|^NUMA node\(s\)"
LD_LIBRARY_PATH=$HL "$herd" --version | head -n 2
py -c 'import torch; print("torch", torch.__version__, "mkl", torch.backends.mkl.is_available(), "mkldnn", torch.backends.mkldnn.is_available())'

# model: shape, classes, batch, steps at 1 thread (fewer for the slow ones)
declare -A shape=([mlp]=1,28,28,10 [lenet5]=1,28,28,10 [resnet20]=1,28,28,10 [resnet50]=3,224,224,1000)
declare -A batch=([mlp]=128 [lenet5]=128 [resnet20]=128 [resnet50]=32)
declare -A steps=([mlp]=200 [lenet5]=100 [resnet20]=10 [resnet50]=4)

herd_run() { # herd_run MODEL THREADS PRECISION STEPS [LAUNCH...]
  local m=$1 t=$2 p=$3 s=$4; shift 4
  LD_LIBRARY_PATH=$HL timeout 600 "$@" "$herd" bench train --model "$m" \
    --data "synthetic:${shape[$m]},$((batch[$m] * 4))" --batch-size "${batch[$m]}" --steps "$s" \
    --warmup 2 --threads "$t" --precision "$p" 2>&1 | grep "^model=" | tail -n 1
}
torch_run() { # torch_run MODEL THREADS PRECISION STEPS [DDP RANKS]
  local m=$1 t=$2 p=$3 s=$4
  py bench/torch_reference.py --models "$m" --shape "${shape[$m]}" --batch-size "${batch[$m]}" \
    --steps "$s" --warmup 2 --threads "$t" --precision "$p" ${5:+--ddp $5} 2>&1 | grep "model=" | tail -n 1
}
row() { # row LABEL HERD_LINE TORCH_LINE
  local h t
  h=$(field samples_per_s /dev/stdin <<<"$2") t=$(field samples_per_s /dev/stdin <<<"$3")
  echo "$1 herd=${h:-?} torch=${t:-?} ratio=$(awk -v a="${h:-0}" -v b="${t:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "?" }')"
  echo "  herd:  $2"
  echo "  torch: $3"
}

if [ "$part" = threads ] || [ "$part" = all ]; then
  echo "== threads"
  for t in ${THREADS:-1 4 16}; do
    for m in ${MODELS:-mlp lenet5 resnet20 resnet50}; do
      s=$((steps[$m] * scale * (t > 1 ? 2 : 1)))
      for p in fp32 bf16; do
        row "model=$m threads=$t precision=$p" "$(herd_run $m $t $p $s)" "$(torch_run $m $t $p $s)"
      done
    done
  done
fi
if [ "$part" = ranks ] || [ "$part" = all ]; then
  echo "== ranks (fp32, 16/R threads a rank; samples/s of all ranks)"
  for r in ${RANKS:-2 4 8 16}; do
    t=$((16 / r)); [ $t -lt 1 ] && t=1
    for m in ${MODELS:-mlp lenet5 resnet20 resnet50}; do
      s=$((steps[$m] * scale * 2))
      row "model=$m ranks=$r threads=$t" "$(herd_run $m $t fp32 $s mpiexec.hydra -np $r)" \
        "$(torch_run $m $t fp32 $s $r)"
    done
  done
fi
