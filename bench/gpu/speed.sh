#!/usr/bin/env bash
# Issue 26's GPU speed run, herd against PyTorch side by side on one GPU, about 6 minutes:
#   1. what changed is correct: test_backend_cuda (convolutions on measured algorithms,
#      dropout bit for bit with the CPU), test_cuda_train, test_cuda_precision; two runs
#      of one job byte-identical (the second reads the first's measured algorithms);
#   2. the backend's dropout against PyTorch's (bench_cuda_ops / torch_cuda_ops.py);
#   3. throughput, samples/s: herd with cuDNN's heuristics (HERD_CUDNN_HEURISTIC=1, the
#      old choice) and with measured algorithms, and PyTorch (bench/torch_reference.py:
#      cudnn.benchmark on, TF32 off for fp32, autocast + channels_last for bf16);
#   4. a resnet50 step's kernel times, heuristics against measured (bench/gpu/kprof.c).
#   here:  bench/gpu/pack.sh               (builds .dev/, carried to the device)
#   there: bench/gpu/speed.sh OUTDIR        (from the project root)
# QUICK=1 shortens every run (for checking the script).
set -u
out=${1:-${OUT:-/tmp}}
mkdir -p "$out"
exec > >(tee "$out/gpu-speed.txt") 2>&1
cd "$(dirname "$0")/../.."
. .dev/env.sh
. bench/gpu/lib.sh
export HERD_CUDNN_CACHE=$tmp/cudnn-algos.tsv # measured here, in this run
herd() { LD_LIBRARY_PATH=$HL timeout 300 .dev/herd "$@"; }
py() { env -u LD_LIBRARY_PATH timeout 300 python3 "$@"; } # PyTorch brings its own libraries
t0=$SECONDS
section() { echo; echo "==== $* ($((SECONDS - t0)) s)"; }
quick=${QUICK:-0}

date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
herd --version
py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name())'

# PART=determinism: what deterministic algorithms cost, herd and PyTorch alike (herd:
# HERD_CUDNN_ANY_ALGO=1 lifts the rule; PyTorch: torch.backends.cudnn.deterministic).
if [ "${PART:-all}" = determinism ]; then
  check test_cuda_precision env LD_LIBRARY_PATH="$HL" HERD_TEST_DEVICE=cuda timeout 300 \
    .dev/tests/test_cuda_precision
  R50=synthetic:3,224,224,1000,512
  for run in "resnet50 $R50 64 fp32 30 5" "resnet50 $R50 64 tf32 30 5" \
             "resnet20 synthetic:3,32,32,10,4096 128 fp32 100 10"; do
    read -r m data b p s w <<<"$run"
    for any in 0 1; do
      echo "herd $m batch=$b $p any_algo=$any: $(HERD_CUDNN_ANY_ALGO=$any herd bench train \
        --model $m --data $data --batch-size $b --steps $s --warmup $w --precision $p 2>&1 | tail -n1)"
    done
    for det in --deterministic ""; do
      echo "torch $m batch=$b $p ${det:-nondeterministic}: $(py bench/torch_reference.py \
        --device cuda --models $m --batch-size $b --steps $s --warmup $w --precision $p $det 2>&1 | tail -n1)"
    done
  done
  summary "gpu determinism costs"
  exit
fi

if [ "${FROM:-1}" -le 2 ]; then # FROM=3: only the timings
section "1. correctness"
for t in test_backend_cuda test_cuda_train test_cuda_precision; do
  check "$t" env LD_LIBRARY_PATH="$HL" HERD_TEST_DEVICE=cuda timeout 300 .dev/tests/$t
done
R20=(--model resnet20 --data synthetic:3,32,32,10,512 --batch-size 64 --max-steps 6 --epochs 1
     --seed 3 --quiet --lr 0.05 --momentum 0.9)
herd train "${R20[@]}" --save "$tmp/a.st" >/dev/null 2>&1
herd train "${R20[@]}" --save "$tmp/b.st" >/dev/null 2>&1
check "resnet20: two runs on measured algorithms are byte-identical" cmp "$tmp/a.st" "$tmp/b.st"
check "the measured choices were kept ($(wc -l <"$tmp/cudnn-algos.tsv" 2>/dev/null) lines)" \
  test -s "$tmp/cudnn-algos.tsv"

section "2. dropout and the other ops against PyTorch"
LD_LIBRARY_PATH=$HL timeout 120 .dev/bench_cuda_ops | grep -E "^(resnet|dropout|relu|add)"
py bench/torch_cuda_ops.py | grep -E "^(resnet|dropout|relu|add)"
fi

section "3. throughput (samples/s)"
steps50=30 steps20=100
[ "$quick" = 1 ] && steps50=3 steps20=5
R50=synthetic:3,224,224,1000,512
hb() { # hb CHOICE MODEL DATA BATCH STEPS WARMUP PRECISION
  local heur=0; [ "$1" = heuristics ] && heur=1
  echo "herd $2 batch=$4 $7 $1: $(HERD_CUDNN_HEURISTIC=$heur herd bench train --model "$2" \
    --data "$3" --batch-size "$4" --steps "$5" --warmup "$6" --precision "$7" 2>&1 | tail -n1)"
}
tb() { # tb MODEL BATCH STEPS WARMUP PRECISION [--channels-last]
  echo "torch $1 batch=$2 $5 ${6:-}: $(py bench/torch_reference.py --device cuda --models "$1" \
    --batch-size "$2" --steps "$3" --warmup "$4" --precision "$5" ${6:-} 2>&1 | tail -n1)"
}
for b in 64 128; do
  [ "$quick" = 1 ] && b=8
  for p in fp32 tf32; do
    hb heuristics resnet50 $R50 $b $steps50 5 $p
    hb measured resnet50 $R50 $b $steps50 5 $p
    tb resnet50 $b $steps50 5 $p
  done
  tb resnet50 $b $steps50 5 bf16 --channels-last
  [ "$quick" = 1 ] && break
done
for p in fp32 tf32; do
  hb heuristics resnet20 synthetic:3,32,32,10,4096 128 $steps20 10 $p
  hb measured resnet20 synthetic:3,32,32,10,4096 128 $steps20 10 $p
  tb resnet20 128 $steps20 10 $p
done

section "4. a resnet50 fp32 step's kernels (batch 64), heuristics against measured"
b=64; [ "$quick" = 1 ] && b=8
kp=$(find / -name 'libcupti.so.13' -not -path '/proc/*' 2>/dev/null | head -n1)
for choice in heuristics measured; do
  heur=0; [ $choice = heuristics ] && heur=1
  for s in 5 15; do
    KPROF_OUT=$tmp/k.$choice.$s CUDA_INJECTION64_PATH=$PWD/.dev/kprof.so \
      LD_LIBRARY_PATH=$HL:$(dirname "${kp:-/x/x}") HERD_CUDNN_HEURISTIC=$heur timeout 300 .dev/herd \
      bench train --model resnet50 --data $R50 --batch-size $b --steps $s --warmup 2 >/dev/null 2>&1
  done
  echo "-- $choice"
  py bench/gpu/kprof_diff.py "$tmp/k.$choice.5" "$tmp/k.$choice.15" 10 --top 15
  cp "$tmp/k.$choice.15" "$out/kprof-$choice.tsv" 2>/dev/null
done

section "5. the algorithms chosen (resnet50 fp32, batch 64)"
cp "$tmp/cudnn-algos.tsv" "$out/cudnn-algos.tsv" 2>/dev/null
HERD_CUDNN_CACHE= HERD_CUDNN_LOG=1 herd bench train --model resnet50 --data $R50 --batch-size $b \
  --steps 1 --warmup 0 2>&1 | grep "cuDNN conv" | head -n 30
section "done"
summary "gpu speed checks"
