#!/usr/bin/env bash
# --loss-chunk N (docs/memory.md): the last layer and the loss N samples at a time, the
# last layer's backward right after each chunk. gpt-nano (its tied lm_head) in chunks of
# 3 of a batch of 8 (the last chunk of 2, each chunk's loss gradient weighted by its
# rows) trains one process's weights within 1e-5 and holds less; with --recompute and on
# the simulated device (device memory cut by samples) the chunked run's bytes; within
# 1e-5 of one process: --grad-accum 2, dynamic loss scaling, 2 tensor-parallel parts (the vocabulary-parallel
# loss a chunk at a time), 2 pipeline stages (1F1B, the last stage's micro-batches of 4 in
# chunks of 3), 2 stages x 2 replicas with ZeRO-2 under GPipe (the reduction armed in the
# forward of the last micro-batch) and 2 stages x 2 tensor parts. --deterministic: mlp's
# whole passes (the last layer's exact sums written by the first chunk, added to by the
# others) the bytes without chunks, on 1 rank and on 2. Refused: a chunk that is not whole
# slices, --cuda-graphs, a last layer that is not linear or lm_head. Under the sanitizers:
# the chunked gpt-nano, the 2 stages, the deterministic mlp and the refusals.
set -u
. "$(dirname "$0")/testlib.sh"
token_corpus
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
activations() { grep "peak memory [0-9]" "$1" | grep -o "activations [0-9][0-9.]*" | cut -d' ' -f2; }

gpt=("$herd" train --model gpt-nano --data "tokens:$tmp/t_train.bin,256" --seq-len 64 --batch-size 8
     --max-steps 20 --epochs 1 --eval-every 0 --test-samples 16 --threads 1 --lr 0.1 --seed 3)
"${gpt[@]}" --save "$tmp/held.st" >"$tmp/held.out" 2>&1
"${gpt[@]}" --loss-chunk 3 --save "$tmp/c3.st" >"$tmp/c3.out" 2>&1
check "gpt-nano in chunks of 3: exit 0" test -s "$tmp/c3.st"
d=$(maxdiff "$tmp/c3.st" "$tmp/held.st")
check "gpt-nano in chunks of 3: the whole batch's weights within 1e-5 ($d)" within "$d" 1e-5
a=$(activations "$tmp/held.out") b=$(activations "$tmp/c3.out")
check "gpt-nano in chunks of 3: activations $b MiB, under $a" \
  awk -v a="$a" -v b="$b" 'BEGIN { exit !(b > 0 && b < a) }'
if ! sanitizer_pass; then
  "${gpt[@]}" --loss-chunk 3 --recompute --save "$tmp/rc.st" >/dev/null 2>&1
  same_bytes "with --recompute: the same bytes" "$tmp/c3.st" "$tmp/rc.st"
  "${gpt[@]}" --loss-chunk 3 --device sim --save "$tmp/sim.st" >/dev/null 2>&1
  same_bytes "on the simulated device: the CPU's bytes" "$tmp/c3.st" "$tmp/sim.st"
  "${gpt[@]}" --loss-chunk 3 --batch-size 4 --grad-accum 2 --save "$tmp/acc.st" >/dev/null 2>&1
  d=$(maxdiff "$tmp/acc.st" "$tmp/held.st")
  check "4 x --grad-accum 2 in chunks of 3: within 1e-5 ($d)" within "$d" 1e-5
  # Each chunk's share and the loss scale multiply its gradient in one pass.
  "${gpt[@]}" --loss-scale dynamic --save "$tmp/ls.st" >/dev/null 2>&1
  "${gpt[@]}" --loss-chunk 3 --loss-scale dynamic --save "$tmp/lsc.st" >/dev/null 2>&1
  d=$(maxdiff "$tmp/lsc.st" "$tmp/ls.st")
  check "with dynamic loss scaling in chunks of 3: within 1e-5 of the whole batch's ($d)" within "$d" 1e-5
  if have_mpi; then
    timeout 300 "${mpiexec[@]}" -np 2 "${gpt[@]}" --loss-chunk 3 --tensor-parallel 2 \
      --save "$tmp/tp.st" >/dev/null 2>&1
    d=$(maxdiff "$tmp/tp.st" "$tmp/held.st")
    check "2 tensor-parallel parts in chunks of 3: within 1e-5 of one process ($d)" within "$d" 1e-5
  fi
fi
if have_mpi; then
  timeout 300 "${mpiexec[@]}" -np 2 "${gpt[@]}" --loss-chunk 3 --pipeline-stages 2 --micro-batches 2 \
    --save "$tmp/pp.st" >"$tmp/pp.out" 2>&1
  d=$(maxdiff "$tmp/pp.st" "$tmp/held.st")
  check "2 pipeline stages (1F1B) in chunks of 3: within 1e-5 of one process ($d)" within "$d" 1e-5
  if ! repeat_pass; then
    timeout 300 "${mpiexec[@]}" -np 4 "${gpt[@]}" --loss-chunk 3 --pipeline-stages 2 --batch-size 4 \
      --micro-batches 2 --pp-schedule gpipe --zero 2 --save "$tmp/ppz.st" >/dev/null 2>&1
    d=$(maxdiff "$tmp/ppz.st" "$tmp/held.st")
    check "2 stages x 2 replicas, GPipe, ZeRO-2, in chunks of 3: within 1e-5 ($d)" within "$d" 1e-5
    timeout 300 "${mpiexec[@]}" -np 4 "${gpt[@]}" --loss-chunk 3 --pipeline-stages 2 \
      --tensor-parallel 2 --micro-batches 2 --save "$tmp/pptp.st" >/dev/null 2>&1
    d=$(maxdiff "$tmp/pptp.st" "$tmp/held.st")
    check "2 stages x 2 tensor parts (the split loss's gradient a chunk's): within 1e-5 ($d)" \
      within "$d" 1e-5
  fi
else
  skipped_part "tensor parallelism and pipeline stages: herd built without MPI, or its launcher missing"
fi

# --deterministic: mlp's passes run whole (the linear layers' exact sums); chunks of
# whole slices leave every bit.
det=("$herd" train --model mlp --data synthetic:1,12,12,4,768 --test-samples 32 --epochs 1
     --threads 1 --deterministic --quiet --seed 5)
"${det[@]}" --batch-size 32 --save "$tmp/det.st" >/dev/null 2>&1
"${det[@]}" --batch-size 32 --loss-chunk 8 --save "$tmp/det8.st" >/dev/null 2>&1
same_bytes "--deterministic in chunks of 8: the bytes without chunks" "$tmp/det.st" "$tmp/det8.st"
if have_mpi && ! repeat_pass; then
  timeout 300 "${mpiexec[@]}" -np 2 "${det[@]}" --batch-size 16 --loss-chunk 8 \
    --save "$tmp/det2.st" >/dev/null 2>&1
  same_bytes "--deterministic on 2 ranks in chunks of 8: likewise" "$tmp/det.st" "$tmp/det2.st"
fi

"${det[@]}" --batch-size 32 --loss-chunk 12 >"$tmp/out" 2>&1
check "--deterministic: a chunk of 12 (slices of 8) refused, naming the multiple" \
  grep -q -- "--loss-chunk 12 is not a whole number of them; pick a multiple of 8" "$tmp/out"
"${gpt[@]}" --loss-chunk 2 --cuda-graphs >"$tmp/out" 2>&1
check "refused with --cuda-graphs, naming it" \
  grep -q -- "--loss-chunk does not work with --cuda-graphs yet" "$tmp/out"
cat >"$tmp/relu_last.json" <<'EOF'
{"name": "relu-last", "layers": [{"type": "flatten"}, {"type": "linear", "out": "classes"},
 {"type": "relu", "name": "out"}]}
EOF
"$herd" train --model "$tmp/relu_last.json" --data synthetic:1,12,12,4,64 --loss-chunk 2 \
  --max-steps 1 >"$tmp/out" 2>&1
check "refused for a last layer that is not linear or lm_head, naming it" \
  grep -q -- "the last layer of 'relu-last', 'out', is a relu layer" "$tmp/out"
finish
