#!/usr/bin/env bash
# Issue 26's 16-bit run on one GPU, about 5 minutes: --precision bf16 and fp16 (16-bit
# channels-last activations, tensor-core convolutions and gemm, fp32 master weights).
#   1. correctness: test_cuda_act16 (every 16-bit op against the CPU), the other CUDA
#      tests, two bf16 runs byte-identical, fp16 refused without loss scaling; and
#      --deterministic on the GPU (issue 27): lenet5 and resnet20 (with and without
#      --sync-bn) run to run, across splits and on 2 ranks sharing the GPU, byte for byte;
#   2. throughput, samples/s, herd against PyTorch (bench/torch_reference.py: autocast,
#      channels_last, cudnn.benchmark on) side by side;
#   3. accuracy: resnet20 on Fashion-MNIST, 15 epochs, bf16 against fp32 on the GPU
#      (the first 30,000 training images: the data travels in .dev/fmnist, see below);
#   4. a resnet50 bf16 step's kernel times (bench/gpu/kprof.c), 5. the cuDNN algorithms
#      it runs (HERD_CUDNN_LOG=1); compute-sanitizer over test_cuda_act16 and
#      test_device_transformer in part 1;
#   6. GPT (issue 28): gpt-nano on the GPU against the CPU and run to run, tokens/s of
#      gpt-nano and gpt2 against PyTorch (bench/torch_gpt.py --device cuda).
#   here:  bench/gpu/pack.sh && bench/gpu/pack_fmnist.sh
#   there: bench/gpu/half.sh OUTDIR        (from the project root)
#   SECTIONS="1 4" runs only those parts (default: all six), KPROF_MODES part 4's profiles
#   (default "kernels api sample") and KPROF_CFGS its models (default "r50 r20"; g2: gpt2
#   at tf32), P16 part 2's 16-bit formats (default "bf16 fp16"); HERD_BEFORE=PATH, a herd
#   binary of an earlier commit, adds its figures beside the current one's in parts 2 and 4.
#   All of it with HERD_BEFORE runs past one call's 10 minutes: split it, e.g.
#   SECTIONS="1 4 5" (about 5 minutes) and SECTIONS="2 3" (about 6) in two calls.
set -u
out=${1:-${OUT:-/tmp}}
mkdir -p "$out"
exec > >(tee "$out/gpu-half.txt") 2>&1
cd "$(dirname "$0")/../.."
. .dev/env.sh
. bench/gpu/lib.sh
export HERD_CUDNN_CACHE=$tmp/cudnn-algos.tsv # measured here, in this run
herd() { LD_LIBRARY_PATH=$HL timeout 300 .dev/herd "$@"; }
py() { env -u LD_LIBRARY_PATH timeout 300 python3 "$@"; }
# The binaries compared: the current one, and HERD_BEFORE's beside it when given.
bins=(".dev/herd=herd"); [ -n "${HERD_BEFORE:-}" ] && bins+=("$HERD_BEFORE=herd-before")
t0=$SECONDS
want() { case " ${SECTIONS:-1 2 3 4 5 6} " in *" $1 "*) return 0 ;; esac; return 1; }
section() { echo; echo "==== $* ($((SECONDS - t0)) s)"; }

date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
herd --version
py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name())'

if want 1; then
section "1. correctness"
for t in test_cuda_act16 test_backend_cuda test_device_transformer test_cuda_train test_cuda_precision; do
  check "$t" env LD_LIBRARY_PATH="$HL" HERD_TEST_DEVICE=cuda timeout 300 .dev/tests/$t
done
if command -v compute-sanitizer >/dev/null; then
  for t in "memcheck test_cuda_act16" "memcheck test_device_transformer" \
           "racecheck test_device_transformer"; do
    set -- $t
    LD_LIBRARY_PATH=$HL HERD_TEST_DEVICE=cuda timeout 120 compute-sanitizer --tool "$1" \
      --error-exitcode 9 .dev/tests/"$2" >"$tmp/san.out" 2>&1
    rc=$?; tail -n 2 "$tmp/san.out"
    check "compute-sanitizer $1 $2: 0 errors (exit $rc)" test $rc -eq 0
  done
fi
R20=(--model resnet20 --data synthetic:3,32,32,10,512 --batch-size 64 --max-steps 6 --epochs 1
     --seed 3 --lr 0.05 --momentum 0.9)
herd train "${R20[@]}" --precision bf16 --save "$tmp/a.st" 2>&1 | tail -n 2
herd train "${R20[@]}" --precision bf16 --save "$tmp/b.st" >/dev/null 2>&1
check "resnet20 bf16: two runs are byte-identical" cmp "$tmp/a.st" "$tmp/b.st"
herd train "${R20[@]}" --precision fp16 --quiet >"$tmp/f16.out" 2>&1
rc=$?; head -c 300 "$tmp/f16.out"
check "fp16 without loss scaling: refused (exit $rc), naming --loss-scale" \
  bash -c "test $rc -ne 0 && grep -q 'loss-scale dynamic' '$tmp/f16.out'"
herd train "${R20[@]}" --precision fp16 --loss-scale dynamic --loss-scale-init 1024 2>&1 | tail -n 1 |
  tee "$tmp/f16b.out"
check "fp16 with --loss-scale dynamic trains" grep -q "train_loss=" "$tmp/f16b.out"
# --deterministic (issue 27) on the GPU: each slice's gradient read back into the exact
# sums, so the bytes must not depend on the split of the global batch or on the ranks
# sharing the GPU, and must repeat run to run; the CPU's bytes are not promised.
D=(--data synthetic:3,16,16,10,960 --test-samples 32 --epochs 1 --seed 5 --lr 0.05 --momentum 0.9
   --deterministic --quiet)
for m in lenet5 resnet20 "resnet20 --sync-bn"; do
  tag=${m// /}
  herd train --model $m "${D[@]}" --batch-size 8 --grad-accum 12 --save "$tmp/d.$tag.a" 2>&1 | tail -n 1
  herd train --model $m "${D[@]}" --batch-size 8 --grad-accum 12 --save "$tmp/d.$tag.b" >/dev/null 2>&1
  check "--deterministic $m: two runs byte-identical" cmp "$tmp/d.$tag.a" "$tmp/d.$tag.b"
  herd train --model $m "${D[@]}" --batch-size 32 --grad-accum 3 --save "$tmp/d.$tag.c" >/dev/null 2>&1
  check "--deterministic $m: 1 x 32 x 3 gives the 1 x 8 x 12 bytes" cmp "$tmp/d.$tag.a" "$tmp/d.$tag.c"
  LD_LIBRARY_PATH=$HL timeout 300 mpiexec.hydra -np 2 .dev/herd train --model $m "${D[@]}" \
    --batch-size 8 --grad-accum 6 --save "$tmp/d.$tag.n2" >"$tmp/n2.out" 2>&1 || tail -n 5 "$tmp/n2.out"
  check "--deterministic $m: 2 ranks sharing the GPU give the 1-rank bytes" \
    cmp "$tmp/d.$tag.a" "$tmp/d.$tag.n2"
  herd train --model $m "${D[@]}" --batch-size 8 --grad-accum 12 --device cpu --save "$tmp/d.$tag.cpu" \
    >/dev/null 2>&1
  echo "--deterministic $m: GPU against CPU, maxdiff $(maxdiff "$tmp/d.$tag.a" "$tmp/d.$tag.cpu")"
done
HERD_CUDNN_ANY_ALGO=1 herd train --model lenet5 "${D[@]}" --batch-size 8 >"$tmp/any.out" 2>&1
check "--deterministic with HERD_CUDNN_ANY_ALGO=1 refused, naming it" grep -q "HERD_CUDNN_ANY_ALGO=1" "$tmp/any.out"
fi

if want 2; then
section "2. throughput (samples/s)"
R50=synthetic:3,224,224,1000,512
hb() { # hb MODEL DATA BATCH STEPS WARMUP PRECISION (again with any cuDNN algorithm if refused)
  local r b bin label
  for b in "${bins[@]}"; do
    bin=${b%%=*} label=${b#*=}
    r=$(LD_LIBRARY_PATH=$HL timeout 300 "$bin" bench train --model "$1" --data "$2"       --batch-size "$3" --steps "$4" --warmup "$5" --precision "$6" 2>&1 | tail -n1)
    echo "$label $1 batch=$3 $6: $r"
    case $r in *samples_per_s=*) ;; *)
      echo "$label $1 batch=$3 $6 HERD_CUDNN_ANY_ALGO=1: $(HERD_CUDNN_ANY_ALGO=1 \
        LD_LIBRARY_PATH=$HL timeout 300 "$bin" bench train --model "$1" --data "$2" \
        --batch-size "$3" --steps "$4" --warmup "$5" --precision "$6" 2>&1 | tail -n1)" ;;
    esac
  done
}
tb() { # tb MODEL BATCH STEPS WARMUP PRECISION [--channels-last]
  echo "torch $1 batch=$2 $5 ${6:-}: $(py bench/torch_reference.py --device cuda --models "$1" \
    --batch-size "$2" --steps "$3" --warmup "$4" --precision "$5" ${6:-} 2>&1 | tail -n1)"
}
# Issue 26's table: resnet50 at 64 and 128 in fp32, tf32 and the 16-bit formats, each
# beside PyTorch as a careful user runs it (TF32 off for fp32, channels_last for 16 bits).
for b in 64 128; do
  for p in fp32 tf32; do
    hb resnet50 $R50 $b 30 5 $p
    tb resnet50 $b 30 5 $p
  done
  for p in ${P16:-bf16 fp16}; do
    hb resnet50 $R50 $b 30 5 $p
    tb resnet50 $b 30 5 $p --channels-last
  done
done
for p in fp32 bf16; do
  hb resnet20 synthetic:3,32,32,10,4096 128 100 10 $p
  tb resnet20 128 100 10 $p $([ $p = bf16 ] && echo --channels-last)
done
fi

if want 3; then
section "3. accuracy: resnet20, Fashion-MNIST (first 30,000 training images), 15 epochs"
fm=/usr/share/datasets/fashion-mnist
mkdir -p $fm && cp .dev/fmnist/*.gz $fm/
A=(--model resnet20 --data fashion-mnist --augment --schedule cosine --epochs 15 --batch-size 128
   --lr 0.1 --momentum 0.9 --nesterov --weight-decay 5e-4 --warmup-epochs 1 --seed 1
   --train-samples 30000 --quiet)
for p in fp32 bf16; do
  herd train "${A[@]}" --precision $p >"$tmp/acc.$p" 2>&1
  echo "$p (exit $?): $(tail -n 1 "$tmp/acc.$p")"
done
a32=$(field test_acc "$tmp/acc.fp32") a16=$(field test_acc "$tmp/acc.bf16")
echo "test accuracy: fp32 $a32, bf16 $a16"
check "bf16 within 0.3 points of fp32" \
  awk -v a="$a32" -v b="$a16" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 0.003) }'
fi

if want 4; then
section "4. where a step's time goes: resnet50 bf16 (batch 64), resnet20 fp32 (batch 128)"
kp=$(find / -name 'libcupti.so.13' -not -path '/proc/*' 2>/dev/null | head -n1)
R50B=(bench train --model resnet50 --data synthetic:3,224,224,1000,512 --batch-size 64 --warmup 2
      --precision bf16)
R20B=(bench train --model resnet20 --data synthetic:3,32,32,10,4096 --batch-size 128 --warmup 10
      --precision fp32)
G2B=(bench train --model gpt2 --data "tokens:.dev/tok/lic_train.bin,50257" --seq-len 1024
     --batch-size 8 --warmup 2 --precision tf32)
for b in "${bins[@]}"; do
  bin=${b%%=*} label=${b#*=}
  for cfg in ${KPROF_CFGS:-r50 r20}; do
    case $cfg in
      r50) args=("${R50B[@]}") short=5 long=15 ;;
      r20) args=("${R20B[@]}") short=20 long=60 ;;
      g2) args=("${G2B[@]}") short=3 long=8 ;;
    esac
    echo "-- $label $cfg, unprofiled: $(LD_LIBRARY_PATH=$HL timeout 300 "$bin" "${args[@]}" \
      --steps $long 2>&1 | tail -n1)"
    # Kernels, copies and the device's idle gaps; with the host's CUDA calls recorded
    # (api: KPROF_API=1, which slows the host a little); the host thread's sampled stacks
    # (sample: KPROF_SAMPLE=1, functions named from $bin.sym): where the host spends it.
    for mode in ${KPROF_MODES:-kernels api sample}; do
      for s in $short $long; do
        KPROF_API=$([ $mode = api ] && echo 1) KPROF_SAMPLE=$([ $mode = sample ] && echo 1) \
          KPROF_SYMS=$bin.sym KPROF_OUT=$tmp/k.$label.$cfg.$mode.$s \
          CUDA_INJECTION64_PATH=$PWD/.dev/kprof.so LD_LIBRARY_PATH=$HL:$(dirname "${kp:-/x/x}") \
          timeout 300 "$bin" "${args[@]}" --steps $s >/dev/null 2>&1
      done
      echo "-- $label $cfg, $mode"
      py bench/gpu/kprof_diff.py "$tmp/k.$label.$cfg.$mode.$short" "$tmp/k.$label.$cfg.$mode.$long" \
        $((long - short)) --top 20
    done
  done
  cp "$tmp/k.$label.r50.sample.15" "$out/kprof-bf16-$label.tsv" 2>/dev/null
done
fi
if want 5; then
section "5. the algorithms chosen for resnet50 bf16 (batch 64)"
HERD_CUDNN_CACHE= HERD_CUDNN_LOG=1 herd bench train --model resnet50 \
  --data synthetic:3,224,224,1000,512 --batch-size 64 --steps 1 --warmup 0 --precision bf16 2>&1 |
  grep "cuDNN conv" | head -n 30
cp "$tmp/cudnn-algos.tsv" "$out/cudnn-algos.tsv" 2>/dev/null
fi
if want 6; then
section "6. GPT on the GPU (issue 28's layers): gpt-nano against the CPU and run to run; tokens/s"
tok=.dev/tok # bench/gpu/pack.sh: Debian's license texts, tokenised byte-level here
G=(--model gpt-nano --data "tokens:$tok/lic_train.bin,256" --seq-len 64 --batch-size 16
   --max-steps 20 --epochs 1 --optimizer adamw --lr 0.003 --weight-decay 0 --seed 3
   --test-samples 64 --log-every 1)
herd train "${G[@]}" --metrics "$tmp/g.cuda" --save "$tmp/g.cuda.st" 2>&1 | tail -n 1
herd train "${G[@]}" --save "$tmp/g.cuda2.st" >/dev/null 2>&1
check "gpt-nano on the GPU: two runs byte-identical" cmp "$tmp/g.cuda.st" "$tmp/g.cuda2.st"
herd train "${G[@]}" --device cpu --threads 8 --metrics "$tmp/g.cpu" --save "$tmp/g.cpu.st" 2>&1 |
  tail -n 1
l=$(py - "$tmp/g.cuda" "$tmp/g.cpu" <<'PY'
import json, sys
def steps(p):
    return [json.loads(l)["train_loss"] for l in open(p) if '"kind":"step"' in l]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
print("%.3g" % (max(abs(x - y) / abs(y) for x, y in zip(a, b)) if len(a) == len(b) == 20 else 9))
PY
)
echo "gpt-nano, 20 AdamW steps: largest relative loss difference GPU against CPU $l;" \
  "weights maxdiff $(maxdiff "$tmp/g.cuda.st" "$tmp/g.cpu.st")"
check "gpt-nano GPU losses within 1e-4 of the CPU's over 20 steps" \
  awk -v d="$l" 'BEGIN { exit !(d <= 1e-4) }'
# 2 ranks sharing the GPU against one GPU process: within 1e-3, not bitwise (on the CPU
# too, 2 stages end 1.7e-4 from one process after these 20 AdamW steps: the tied table's
# gradient is summed in two halves).
two_ranks() { # two_ranks TAG WHAT FLAGS...
  local tag=$1 what=$2 md; shift 2
  LD_LIBRARY_PATH=$HL timeout 300 mpiexec.hydra -np 2 .dev/herd train "${G[@]}" "$@" \
    --save "$tmp/g.$tag.st" >"$tmp/$tag.out" 2>&1 || tail -n 5 "$tmp/$tag.out"
  md=$(maxdiff "$tmp/g.cuda.st" "$tmp/g.$tag.st")
  echo "gpt-nano $what sharing the GPU: weights maxdiff $md from one GPU process"
  check "gpt-nano $what on the GPU: within 1e-3 of one GPU process" \
    awk -v d="$md" 'BEGIN { exit !(d != "" && d <= 1e-3) }'
}
two_ranks pp "in 2 pipeline stages (the tied table exchanged)" --pipeline-stages 2
# Tensor parallelism: the split loss's kernels (cuda_loss.cu) and the group's sums in
# device memory; not yet run on a GPU (written after 2026-12-04's device calls).
two_ranks tp "at --tensor-parallel 2" --tensor-parallel 2
herd train "${G[@]}" --precision bf16 --max-steps 10 2>&1 | tail -n 1 | tee "$tmp/g.bf16"
check "gpt-nano bf16 trains on the GPU" grep -q "train_loss=" "$tmp/g.bf16"
# tokens/s: herd bench train against PyTorch running the same model file
# (bench/torch_gpt.py --device cuda: eager, the same explicit attention, SGD).
gb() { # gb MODEL SEQ BATCH STEPS PRECISION
  echo "herd $1 seq=$2 batch=$3 $5: $(herd bench train --model "$1" --data "tokens:$tok/lic_train.bin,$([ "$1" = gpt2 ] && echo 50257 || echo 256)" \
    --seq-len "$2" --batch-size "$3" --steps "$4" --warmup 2 --precision "$5" 2>&1 | tail -n 1)"
  [ "$5" = tf32 ] && return
  echo "torch $1 seq=$2 batch=$3 $5: $(py bench/torch_gpt.py --device cuda --model "$1" --seq-len "$2" \
    --batch-size "$3" --steps "$4" --warmup 2 --precision "$5" 2>&1 | tail -n 1)"
}
for p in fp32 tf32 bf16; do gb gpt-nano 64 64 30 $p; done
for p in fp32 tf32 bf16; do gb gpt2 1024 8 10 $p; done
fi
section "done"
summary "gpu 16-bit checks"
