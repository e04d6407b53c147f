#!/usr/bin/env bash
# --cuda-graphs: each micro-batch's forward and backward captured once per shape and
# replayed end on the bytes of the same run without graphs: lenet5 with an evaluation
# every epoch and a short last batch (memory freed under the graphs: captured again),
# accumulation with dynamic loss scaling (a graph per accumulation and scale), resnet20
# with AdamW and clipping, gpt-nano on tokens, and 2 ranks (the buckets reduce after the
# backward's graph), with ZeRO 1 and 2, and dropout (its masks drawn from the micro-batch's
# seed in device memory). The run reports its captures and launches; the CPU and the
# options whose forward or backward exchange mid-step are refused, naming why.
# The second argument names the device: sim (default; its graphs check every rule of a
# CUDA graph, src/backend/sim/sim_graph.c) or cuda on a GPU machine (bench/gpu).
source "$(dirname "$0")/testlib.sh"
dev=${2:-sim}
export OMP_NUM_THREADS=1
token_corpus
# same TAG ARGS...: the run with and without graphs; the weights' bytes are the same and
# the graphs were launched.
same() {
  local tag=$1; shift
  rm -f "$tmp/e.st" "$tmp/g.st" # no file of an earlier case can pass for this one's
  "$herd" train "$@" --device "$dev" --save "$tmp/e.st" >"$tmp/e.out" 2>&1
  "$herd" train "$@" --device "$dev" --cuda-graphs --save "$tmp/g.st" >"$tmp/g.out" 2>&1
  check "$tag: the same weights with --cuda-graphs" cmp "$tmp/e.st" "$tmp/g.st"
  local n
  n=$(grep -o "cuda graphs: [0-9]* captures, [0-9]* launches" "$tmp/g.out")
  echo "$tag: $n"
  check "$tag: graphs were launched ($n)" test "$(echo "$n" | awk '{print $5}')" -gt 0 2>/dev/null
}
lenet=(--model lenet5 --data synthetic:1,28,28,10,650 --test-samples 64 --threads 1 --batch-size 32)
# A repeat pass (testlib.sh: the sanitizers' and MPICH's) keeps one run of each path: the
# graphs' own code (captures, stale graphs, the token check, the seed) and 2 ranks; these
# and ZeRO 2 or compression add keys and options the first pass covers. Under the
# sanitizers, dropout's, 2 ranks without ZeRO and the refusals: the other runs reach no
# line of herd's code that the pass's other tests do not (clang's coverage of each
# process, 2026-12-07: tests/repeat_passes.txt).
if ! sanitizer_pass; then
  same "lenet5, evaluated every epoch, a short last batch" "${lenet[@]}" --epochs 3 --eval-every 1
  # 21 batches an epoch (20 of 32 and one of 10), 2 regions each: the first of each shape
  # and the first after each evaluation run as called, every later one is launched.
  check "lenet5: captured again after each evaluation" \
    grep -q "cuda graphs: 8 captures, 116 launches" "$tmp/g.out"
fi
if ! repeat_pass; then
  same "lenet5, --grad-accum 2 --loss-scale dynamic" "${lenet[@]}" --epochs 2 --batch-size 16 \
    --grad-accum 2 --loss-scale dynamic
  same "resnet20, AdamW, --clip-grad-norm" --model resnet20 --data synthetic:3,32,32,10,256 \
    --test-samples 32 --threads 2 --epochs 1 --batch-size 32 --optimizer adamw --lr 0.001 \
    --clip-grad-norm 1
fi
# Dropout draws its masks from the micro-batch's seed in device memory, written before
# each launch: the same masks as without graphs.
same "batch norm and dropout (tests/models/bndrop.json)" --model "$here/models/bndrop.json" \
  --data synthetic:1,28,28,10,650 --test-samples 64 --threads 1 --batch-size 32 --epochs 2
sanitizer_pass || same "gpt-nano on tokens" --model gpt-nano --data "tokens:$tmp/t_train.bin,256" --seq-len 32 \
  --optimizer adamw --lr 0.003 --threads 1 --test-samples 32 --batch-size 8 --max-steps 30

if have_mpi; then
  # Plain data parallelism, ZeRO (the update's all-gather waited for whole before the
  # captured forward; the reduce-scatters after the backward's graph) and compression.
  dp=("${lenet[@]}" --epochs 1 --batch-size 16 --device "$dev")
  variants=("" "--zero 1" "--zero 2 --grad-accum 2" "--compress bf16")
  repeat_pass && variants=("" "--zero 1")
  sanitizer_pass && variants=("")
  for zero in "${variants[@]}"; do
    rm -f "$tmp/e2.st" "$tmp/g2.st"
    # shellcheck disable=SC2086 # the options' words
    timeout 120 "${mpiexec[@]}" -np 2 "$herd" train "${dp[@]}" $zero --save "$tmp/e2.st" \
      >"$tmp/e2.out" 2>&1
    # shellcheck disable=SC2086
    timeout 120 "${mpiexec[@]}" -np 2 "$herd" train "${dp[@]}" $zero --cuda-graphs \
      --save "$tmp/g2.st" >"$tmp/g2.out" 2>&1
    check "2 ranks${zero:+, $zero}: the same weights with --cuda-graphs" cmp "$tmp/e2.st" "$tmp/g2.st"
  done
else
  skipped_part "2 ranks (herd built without MPI, or no launcher)"
fi

# refused WHAT PATTERN ARGS...: herd train fails before training, saying PATTERN.
refused() {
  local what=$1 pattern=$2; shift 2
  "$herd" train "$@" --cuda-graphs --epochs 1 --max-steps 2 >"$tmp/r.out" 2>&1
  local rc=$?
  check "refused: $what (exit $rc)" test "$rc" -ne 0
  check "refused: $what, saying '$pattern'" grep -q -- "$pattern" "$tmp/r.out"
}
refused "the CPU" "the cpu backend runs each op as it is called" "${lenet[@]}" --device cpu
refused "--sync-bn" "does not work with --sync-bn" "${lenet[@]}" --device "$dev" --sync-bn
refused "--deterministic" "does not work with --deterministic" "${lenet[@]}" --device "$dev" \
  --deterministic
refused "--pipeline-stages 2" "does not work with --pipeline-stages" "${lenet[@]}" --device "$dev" \
  --pipeline-stages 2
finish
