#!/usr/bin/env bash
# --deterministic with --tensor-parallel (docs/determinism.md): for a given T the weights
# do not depend on the data-parallel replicas, the --grad-accum split, --threads, ZeRO or
# pipeline stages. gpt-tp4 (tests/models), T = 2, 40 steps of 12 sequences in slices of 4,
# SGD with clipping: 1 replica ends on the bytes of 3 replicas with ZeRO-2, of 1 replica
# at --grad-accum 3 and 2 threads and of 2 pipeline stages (the head tied across them;
# on --device sim too), and within 1e-5 of one process (the norm is the whole
# model's); stopped at step 17 and resumed on 3 replicas, the uninterrupted bytes (the
# parts agree on one grid per tensor, which the checkpoint holds); dynamic loss scaling
# with an overflow found by one part skips the step on every part (1 and 3 replicas
# agree). mlp-tp (a column- then a row-parallel layer): T = 2 on 1 replica, 2 stages x
# T = 2, and 2 replicas x 2 stages x T = 2 with ZeRO-1, the same bytes; without
# --deterministic 2 stages x T = 2 trains one process's weights within 1e-5 (the stages'
# cut cannot fall between the pair: it once hung there). cnn-tp (batch norm, then the
# split head) with --sync-bn: 2 replicas x T = 2 within 1e-5 of one process; with
# --deterministic too, T = 2, 2 stages x T = 2 and 3 replicas x T = 2 with ZeRO-2 the
# same bytes, within 1e-5 of one process. Refused at start: a layer after
# a column-parallel one that is not element-wise or row-parallel. Under the sanitizers:
# 1 replica, the resume (on 1), the stages (mlp-tp's, cnn-tp's) and the refusal.
set -u
. "$(dirname "$0")/testlib.sh"
have_mpi || skip_all "herd built without MPI, or its launcher (HERD_MPIEXEC, set by ctest) missing"
token_corpus
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
run() { local np=$1; shift; timeout 300 "${mpiexec[@]}" -np "$np" "$herd" train "$@"; }
field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" "$2" | tail -n 1; }

sgd=(--optimizer sgd --lr 0.1 --momentum 0.9 --clip-grad-norm 0.5 --seed 3 --quiet
     --deterministic --slice-size 4 --threads 1)
gpt=(--model "$here/models/gpt-tp4.json" --data "tokens:$tmp/t_train.bin,256" --seq-len 32
     --test-samples 32 --train-samples 1104 --max-steps 40 "${sgd[@]}")
run 2 "${gpt[@]}" --tensor-parallel 2 --batch-size 12 --save "$tmp/t2.st" >"$tmp/t2.out" 2>&1
check "gpt-tp4, T = 2 on 1 replica: trains" test -s "$tmp/t2.st"
check "its norm clips" test "$(field clipped_steps "$tmp/t2.out")" -gt 0
if ! sanitizer_pass; then
  run 6 "${gpt[@]}" --tensor-parallel 2 --batch-size 4 --zero 2 --save "$tmp/z.st" >"$tmp/out" 2>&1
  same_bytes "T = 2 on 3 replicas with ZeRO-2: the bytes of 1 replica" "$tmp/t2.st" "$tmp/z.st"
  run 2 "${gpt[@]}" --tensor-parallel 2 --batch-size 4 --grad-accum 3 --threads 2 \
    --save "$tmp/a.st" >"$tmp/out" 2>&1
  same_bytes "T = 2 at --grad-accum 3 and 2 threads: likewise" "$tmp/t2.st" "$tmp/a.st"
  "$herd" train "${gpt[@]}" --batch-size 12 --save "$tmp/one.st" >"$tmp/out" 2>&1
  d=$(maxdiff "$tmp/t2.st" "$tmp/one.st")
  check "T = 2 against one process, clipped by the whole model's norm: within 1e-5 ($d)" within "$d" 1e-5
  ls=(--loss-scale dynamic)
  run 4 "${gpt[@]}" --tensor-parallel 2 --pipeline-stages 2 --batch-size 4 --grad-accum 3 \
    --save "$tmp/p.st" >"$tmp/out" 2>&1
  same_bytes "2 stages x T = 2 (the head's table gradient to stage 0 a slice at a time): likewise" \
    "$tmp/t2.st" "$tmp/p.st"
  run 4 "${gpt[@]}" --tensor-parallel 2 --pipeline-stages 2 --batch-size 12 --micro-batches 3 \
    --device sim --save "$tmp/ps.st" >"$tmp/out" 2>&1
  same_bytes "the same on the simulated device (device memory through the host): the CPU's bytes" \
    "$tmp/t2.st" "$tmp/ps.st"
  HERD_TEST_FAIL_AT=overflow:1 run 2 "${gpt[@]}" "${ls[@]}" --tensor-parallel 2 --batch-size 12 \
    --save "$tmp/o1.st" >"$tmp/o1.out" 2>&1
  check "an overflow on part 1 alone: the step skipped (skipped_steps=1)" \
    test "$(field skipped_steps "$tmp/o1.out")" = 1
  HERD_TEST_FAIL_AT=overflow:3 run 6 "${gpt[@]}" "${ls[@]}" --tensor-parallel 2 --batch-size 4 \
    --save "$tmp/o3.st" >"$tmp/out" 2>&1
  same_bytes "the same on 3 replicas (part 1 of replica 1): the bytes of 1 replica" "$tmp/o1.st" "$tmp/o3.st"
fi
run 2 "${gpt[@]}" --tensor-parallel 2 --batch-size 12 --max-steps 17 --checkpoint-dir "$tmp/ck" \
  >"$tmp/out" 2>&1
replicas=3
sanitizer_pass && replicas=1
run $((2 * replicas)) "${gpt[@]}" --tensor-parallel 2 --batch-size $((12 / replicas)) \
  --checkpoint-dir "$tmp/ck" --resume --save "$tmp/r.st" >"$tmp/out" 2>&1
same_bytes "stopped at step 17 on 1 replica, resumed on $replicas: the uninterrupted bytes" \
  "$tmp/t2.st" "$tmp/r.st"

mlp=(--model "$here/models/mlp-tp.json" --data synthetic:1,8,8,10,4800 --epochs 1 --max-steps 40)
run 2 "${mlp[@]}" "${sgd[@]}" --tensor-parallel 2 --batch-size 24 --save "$tmp/m2.st" >"$tmp/out" 2>&1
run 4 "${mlp[@]}" "${sgd[@]}" --tensor-parallel 2 --pipeline-stages 2 --batch-size 4 --grad-accum 6 \
  --save "$tmp/mp.st" >"$tmp/out" 2>&1
same_bytes "mlp-tp, 2 stages x T = 2: the bytes of T = 2" "$tmp/m2.st" "$tmp/mp.st"
if ! sanitizer_pass; then
  run 8 "${mlp[@]}" "${sgd[@]}" --tensor-parallel 2 --pipeline-stages 2 --batch-size 4 --grad-accum 3 \
    --zero 1 --save "$tmp/mz.st" >"$tmp/out" 2>&1
  same_bytes "2 replicas x 2 stages x T = 2 with ZeRO-1: likewise" "$tmp/m2.st" "$tmp/mz.st"
  plain=(--optimizer sgd --lr 0.1 --momentum 0.9 --seed 3 --quiet --threads 1 --batch-size 24)
  "$herd" train "${mlp[@]}" "${plain[@]}" --save "$tmp/n1.st" >"$tmp/out" 2>&1
  run 4 "${mlp[@]}" "${plain[@]}" --tensor-parallel 2 --pipeline-stages 2 --micro-batches 6 \
    --comm-timeout 30 --save "$tmp/n4.st" >"$tmp/n4.out" 2>&1
  check "without --deterministic, 2 stages x T = 2: exit 0" test $? -eq 0
  d=$(maxdiff "$tmp/n4.st" "$tmp/n1.st")
  check "and one process's weights within 1e-5 ($d)" within "$d" 1e-5
fi

# Batch norm ahead of the split head (tests/models/cnn-tp.json): with --sync-bn its
# statistics are the data group's, whole on every part; under --deterministic its slices
# run layer by layer together, each slice's model split as the part is.
cnn=(--model "$here/models/cnn-tp.json" --data synthetic:1,8,8,10,2400 --epochs 1 --max-steps 30
     --sync-bn)
bn=(--optimizer sgd --lr 0.05 --momentum 0.9 --seed 3 --quiet --threads 1)
if ! sanitizer_pass; then
  "$herd" train "${cnn[@]}" "${bn[@]}" --batch-size 24 --save "$tmp/c1.st" >"$tmp/out" 2>&1
  run 4 "${cnn[@]}" "${bn[@]}" --tensor-parallel 2 --batch-size 12 --save "$tmp/c4.st" >"$tmp/out" 2>&1
  d=$(maxdiff "$tmp/c4.st" "$tmp/c1.st")
  check "cnn-tp --sync-bn, 2 replicas x T = 2: one process's weights within 1e-5 ($d)" within "$d" 1e-5
fi
run 2 "${cnn[@]}" "${sgd[@]}" --tensor-parallel 2 --batch-size 24 --save "$tmp/s2.st" >"$tmp/out" 2>&1
check "cnn-tp --deterministic --sync-bn, T = 2: trains" test -s "$tmp/s2.st"
run 4 "${cnn[@]}" "${sgd[@]}" --tensor-parallel 2 --pipeline-stages 2 --batch-size 4 --grad-accum 6 \
  --save "$tmp/s4.st" >"$tmp/out" 2>&1
same_bytes "... on 2 stages x T = 2: the same bytes" "$tmp/s2.st" "$tmp/s4.st"
if ! sanitizer_pass; then
  run 6 "${cnn[@]}" "${sgd[@]}" --tensor-parallel 2 --zero 2 --batch-size 8 --save "$tmp/s6.st" \
    >"$tmp/out" 2>&1
  same_bytes "... on 3 replicas x T = 2 with ZeRO-2: the same bytes" "$tmp/s2.st" "$tmp/s6.st"
  "$herd" train "${cnn[@]}" "${sgd[@]}" --batch-size 24 --save "$tmp/s1.st" >"$tmp/out" 2>&1
  d=$(maxdiff "$tmp/s2.st" "$tmp/s1.st")
  check "... and one process's within 1e-5 ($d)" within "$d" 1e-5
fi

cat >"$tmp/bad.json" <<'JSON'
{"name": "bad", "layers": [{"type": "flatten"},
  {"type": "linear", "name": "fc1", "out": 64, "parallel": "column"},
  {"type": "relu", "name": "act"}, {"type": "linear", "name": "fc2", "out": "classes"}]}
JSON
run 2 --model "$tmp/bad.json" --data synthetic:1,8,8,10,480 --tensor-parallel 2 --batch-size 8 \
  --max-steps 2 --epochs 1 >"$tmp/bad.out" 2>&1
check "a plain linear after a column-parallel one: refused, naming both" \
  grep -q "layer 'fc2' (linear) reads 'act', which holds one part" "$tmp/bad.out"
finish
