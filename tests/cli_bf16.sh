#!/usr/bin/env bash
# --precision bf16 on the CPU from the CLI. Where oneDNN finds bf16 instructions it
# trains natively; elsewhere it is refused naming the ISA, and the rest runs on the
# emulation (HERD_CPU_BF16=emulate: bf16's rounding on fp32 kernels). Checkpoints hold
# fp32 master weights: a bf16 run resumes in fp32 and back, continuing the same steps.
# Two ranks train in bf16 with the gradient allreduce in fp32 or --compress bf16 (not
# under the sanitizers: the ranks reach no line of herd's code that the pass's other tests
# do not; clang's coverage of each process, 2026-12-07: tests/repeat_passes.txt).
set -u
. "$(dirname "$0")/testlib.sh"
data="synthetic:1,12,12,4,256"
common=(--model lenet5 --data "$data" --batch-size 32 --threads 1 --device cpu --seed 3)
steps() { sed -n 's/.*steps=\([0-9]*\).*/\1/p' "$1"; }

"$herd" --version >"$tmp/version"
check "--version names the ISA oneDNN dispatches to" grep -q '^cpu: oneDNN dispatches to .* (bf16: ' "$tmp/version"
if grep -q 'bf16: native' "$tmp/version"; then
  echo "bf16 instructions here: native path"
else
  "$herd" train "${common[@]}" --epochs 1 --precision bf16 >/dev/null 2>"$tmp/err"
  check "without bf16 instructions: refused, exit 1" test $? -eq 1
  check "... naming what it needs and the ISA found" \
    grep -q "needs a CPU with bf16 instructions (AVX512_BF16 or AMX); oneDNN dispatches to" "$tmp/err"
  echo "no bf16 instructions here: the rest runs on HERD_CPU_BF16=emulate"
  export HERD_CPU_BF16=emulate
fi

"$herd" train "${common[@]}" --epochs 1 --precision bf16 >"$tmp/out" 2>"$tmp/err"
check "bf16 trains" test $? -eq 0
last=$(tail -n 1 "$tmp/out")
check "summary says precision=bf16 ($last)" bash -c "[[ '$last' == *precision=bf16* ]]"
check "the header names it" grep -q "herd: device cpu, precision bf16" "$tmp/err"
if [ -z "${HERD_CPU_BF16:-}" ]; then # native: lenet5's first layer has no bf16 weight-gradient kernel
  check "... and says which direction runs in fp32" \
    grep -q "herd: bf16: convolution backward weights runs in fp32 for some layers" "$tmp/err"
fi
"$herd" train "${common[@]}" --epochs 1 --precision bf16 --loss-scale dynamic >"$tmp/out" 2>&1
check "--loss-scale dynamic works with bf16" bash -c "test $? -eq 0 && grep -q 'skipped_steps=0' '$tmp/out'"

# bf16 -> fp32 -> bf16 through checkpoints: 8 steps per epoch, 3 epochs in all.
"$herd" train "${common[@]}" --epochs 1 --precision bf16 --checkpoint-dir "$tmp/ck" >"$tmp/out" 2>&1
check "bf16 epoch 1 saved" test -e "$tmp/ck/latest"
"$herd" train "${common[@]}" --epochs 2 --precision fp32 --checkpoint-dir "$tmp/ck" --resume >"$tmp/out" 2>&1
check "resumed in fp32: 16 steps ($(steps "$tmp/out"))" test "$(steps "$tmp/out")" = 16
check "... summary says fp32" grep -q "precision=fp32" "$tmp/out"
"$herd" train "${common[@]}" --epochs 3 --precision bf16 --checkpoint-dir "$tmp/ck" --resume \
  --save "$tmp/w.st" >"$tmp/out" 2>&1
check "and back in bf16: 24 steps ($(steps "$tmp/out"))" test "$(steps "$tmp/out")" = 24
check "... saving fp32 weights" grep -q '"F32"' "$tmp/w.st"
check "... and none in bf16" bash -c "! grep -q '\"BF16\"' '$tmp/w.st'"

"$herd" bench train --model mlp --data "$data" --device cpu --precision bf16 --steps 2 --warmup 1 >"$tmp/out" 2>&1
check "bench train --precision bf16 reports it" grep -q "precision=bf16" "$tmp/out"

if [ -z "${HERD_CPU_BF16:-}" ]; then # native: resnet20 keeps bf16 activations between layers
  r20=(--model resnet20 --data "$data" --batch-size 32 --threads 1 --device cpu --seed 3 --epochs 1
       --precision bf16)
  activations() { sed -n 's/.*peak memory.* activations \([0-9.]*\).*/\1/p' "$1"; }
  "$herd" train "${r20[@]}" >"$tmp/out" 2>"$tmp/err"
  check "resnet20 trains and evaluates with bf16 activations" \
    bash -c "test $? -eq 0 && grep -q 'test_acc=' '$tmp/out'"
  HERD_BF16_ACTIVATIONS=fp32 "$herd" train "${r20[@]}" >"$tmp/out32" 2>"$tmp/err32"
  a16=$(activations "$tmp/err") a32=$(activations "$tmp/err32")
  check "... in half the memory of fp32 activations ($a16 against $a32 MiB)" \
    awk -v a="$a16" -v b="$a32" 'BEGIN { exit !(a > 0 && a <= 0.55 * b) }'
fi

if have_mpi && ! sanitizer_pass; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
  for c in none bf16; do
    timeout 120 "${mpiexec[@]}" -np 2 "$herd" train "${common[@]}" --epochs 1 --precision bf16 \
      --compress "$c" >"$tmp/out" 2>&1
    check "2 ranks in bf16, --compress $c" bash -c "test $? -eq 0 && grep -q 'precision=bf16' '$tmp/out'"
  done
  for mode in --sync-bn "--pipeline-stages 2"; do # batch norm over ranks; stages cut between blocks
    timeout 120 "${mpiexec[@]}" -np 2 "$herd" train "${common[@]}" --model resnet20 --epochs 1 \
      --precision bf16 $mode >"$tmp/out" 2>&1
    check "2 ranks of resnet20 in bf16, $mode" bash -c "test $? -eq 0 && grep -q 'precision=bf16' '$tmp/out'"
  done
fi
finish
