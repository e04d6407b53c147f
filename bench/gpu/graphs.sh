#!/usr/bin/env bash
# Issue 26's CUDA graphs (--cuda-graphs) on one GPU, about 4 minutes:
#   1. correctness: test_device_graph (the graph ops) and tests/cli_cuda_graphs.sh on the
#      GPU (weights byte-identical with and without graphs: lenet5 with evaluations and a
#      short batch, accumulation with dynamic loss scaling, resnet20 AdamW with clipping,
#      gpt-nano, 2 ranks sharing the GPU with and without ZeRO; the refusals); resnet20
#      and gpt-nano at bf16 likewise; compute-sanitizer's memcheck over a graphs run;
#   2. speed: herd bench train without and with --cuda-graphs beside PyTorch (eager, as
#      bench/torch_reference.py and bench/torch_gpt.py run it) in one run: lenet5 and
#      resnet20 at batch 128 (fp32, bf16), gpt-nano 64 x 64 (fp32, bf16), resnet50 at 64
#      (bf16, the step the host bounds).
#   here:  bench/gpu/pack.sh        there: bench/gpu/graphs.sh OUTDIR   (SECTIONS="1 2")
# DEV=sim checks the script where there is no GPU (part 1 on the simulated device).
set -u
out=${1:-${OUT:-/tmp}}
dev=${DEV:-cuda}
mkdir -p "$out"
exec > >(tee "$out/gpu-graphs.txt") 2>&1
cd "$(dirname "$0")/../.."
. .dev/env.sh
. bench/gpu/lib.sh
export HERD_CUDNN_CACHE=$tmp/cudnn-algos.tsv # measured here, in this run
want() { case " ${SECTIONS:-1 2} " in *" $1 "*) return 0 ;; esac; return 1; }
herd() { LD_LIBRARY_PATH=$HL timeout 300 .dev/herd "$@"; }
py() { env -u LD_LIBRARY_PATH timeout 300 python3 "$@"; }
# The test script calls herd and the launcher itself: both with the bundle's libraries.
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$HL" "$PWD/.dev/herd" >"$tmp/herd"
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec mpiexec.hydra "$@"\n' "$HL" >"$tmp/mpiexec"
chmod +x "$tmp/herd" "$tmp/mpiexec"
date -u
tok=.dev/tok # bench/gpu/pack.sh: Debian's license texts, tokenised byte-level here

if want 1; then
  echo "==== 1. correctness"
  check "test_device_graph on $dev" env LD_LIBRARY_PATH="$HL" HERD_TEST_DEVICE=$dev timeout 120 \
    .dev/tests/test_device_graph
  check "tests/cli_cuda_graphs.sh on $dev" env HERD_MPIEXEC="$tmp/mpiexec" \
    bash tests/cli_cuda_graphs.sh "$tmp/herd" "$dev"
  [ "$dev" = cuda ] && p16=bf16 || p16=fp32 # the simulated device computes in fp32
  R20=(--model resnet20 --data synthetic:3,32,32,10,1024 --batch-size 128 --epochs 1
       --test-samples 128 --precision $p16 --device "$dev")
  herd train "${R20[@]}" --save "$tmp/r.e" >/dev/null 2>&1
  herd train "${R20[@]}" --cuda-graphs --save "$tmp/r.g" 2>&1 | grep "cuda graphs"
  check "resnet20 $p16: the same weights with --cuda-graphs" cmp "$tmp/r.e" "$tmp/r.g"
  G=(--model gpt-nano --data "tokens:$tok/lic_train.bin,256" --seq-len 64 --batch-size 16
     --max-steps 40 --optimizer adamw --lr 0.003 --test-samples 32 --precision $p16 --device "$dev")
  herd train "${G[@]}" --save "$tmp/g.e" >/dev/null 2>&1
  herd train "${G[@]}" --cuda-graphs --save "$tmp/g.g" 2>&1 | grep "cuda graphs"
  check "gpt-nano $p16: the same weights with --cuda-graphs" cmp "$tmp/g.e" "$tmp/g.g"
  if [ "$dev" = cuda ] && command -v compute-sanitizer >/dev/null; then
    check "compute-sanitizer memcheck: lenet5 with --cuda-graphs, 0 errors" bash -c \
      "LD_LIBRARY_PATH='$HL' timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
         .dev/herd train --model lenet5 --data synthetic:1,28,28,10,640 --batch-size 32 \
         --epochs 1 --test-samples 64 --cuda-graphs --quiet"
  fi
fi

if want 2 && [ "$dev" = cuda ]; then
  echo "==== 2. samples/s (tokens/s for gpt-nano): herd eager, herd --cuda-graphs, PyTorch eager"
  hb() { # hb MODEL DATA BATCH STEPS PRECISION [EXTRA...]
    local m=$1 d=$2 b=$3 s=$4 p=$5 g
    shift 5
    for g in "" --cuda-graphs; do
      echo "herd $m batch=$b $p ${g:-eager}: $(herd bench train --model "$m" --data "$d" \
        --batch-size "$b" --steps "$s" --warmup 5 --precision "$p" $g "$@" 2>&1 | tail -n 1)"
    done
  }
  tb() { # tb MODEL BATCH STEPS PRECISION
    echo "torch $1 batch=$2 $4: $(py bench/torch_reference.py --device cuda --models "$1" \
      --batch-size "$2" --steps "$3" --warmup 5 --precision "$4" \
      $([ "$4" = bf16 ] && echo --channels-last) 2>&1 | tail -n 1)"
  }
  for p in fp32 bf16; do
    hb lenet5 synthetic:1,28,28,10,8192 128 200 $p
    tb lenet5 128 200 $p
    hb resnet20 synthetic:3,32,32,10,8192 128 100 $p
    tb resnet20 128 100 $p
    hb gpt-nano "tokens:$tok/lic_train.bin,256" 64 30 $p --seq-len 64
    echo "torch gpt-nano seq=64 batch=64 $p: $(py bench/torch_gpt.py --device cuda --model gpt-nano \
      --seq-len 64 --batch-size 64 --steps 30 --warmup 2 --precision $p 2>&1 | tail -n 1)"
  done
  hb resnet50 synthetic:3,224,224,1000,512 64 30 bf16
  tb resnet50 64 30 bf16
fi
summary "gpu graphs checks"
