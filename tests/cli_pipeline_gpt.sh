#!/usr/bin/env bash
# Pipeline stages for a language model through the CLI under mpirun, alone and with
# tensor parts inside each stage (DP x PP x TP), on a small GPT (tests/models/gpt-tp4.json)
# whose head is tied to the embedding's token table: the last stage keeps a copy of the
# table, and the two copies' gradients are summed after the reduction
# (src/train/pipeline_tied.c). 50 steps on 2 stages (both schedules), 3 stages, 2 stages
# x 2 replicas with --zero 2, 2 stages x 2 parts, 2 x 2 x 2 with --zero 2, and 3 stages x
# 2 parts end on one process's weights within 1e-5, every step's loss within 1e-5;
# --clip-grad-norm with --loss-scale dynamic counts the table once; checkpoints hold
# whole tensors: saved on 2 stages (x 2 parts) they resume on one process, on 3 stages x
# 2 replicas with ZeRO and on 3 stages x 2 parts, one process's resumes on 2 x 2, and
# AdamW's on 2 stages to the uninterrupted bits; the timeline puts the tensor group's
# and the stage replicas' collectives on their tracks; bf16 on 2 x 2 trains as one
# process; herd predict counts the table's
# exchange; each save checks the two copies bitwise, and a run whose copies drift apart
# (a test hook skips the sum on one rank) stops with an error; herd eval reads the
# file; --zero without a second replica is refused (--deterministic:
# cli_deterministic_pipeline).
# In a repeat pass (sanitizers, MPICH): 20 steps, 2 stages, 2 stages x 2 parts, 2 x 2
# with ZeRO, the resumes on one process, the prediction, the drift and the refusals;
# under the sanitizers 2 x 2 with ZeRO and the prediction alone.
set -u
. "$(dirname "$0")/testlib.sh"
have_mpi || skip_all "herd built without MPI, or its launcher (HERD_MPIEXEC, set by ctest) missing"
token_corpus
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun=("${mpiexec[@]}")
model="$here/models/gpt-tp4.json"
common=(--model "$model" --data "tokens:$tmp/t_train.bin,256" --seq-len 32 --threads 1
        --test-samples 32 --log-every 1 --quiet)
steps=50
repeat_pass && steps=20
half=$((steps / 2))
sgd=(--optimizer sgd --lr 0.1 --momentum 0.9 --max-steps "$steps")
# np, then the run's arguments after --pipeline-stages
grids=("2 2 --micro-batches 2 --batch-size 8" "4 2 --micro-batches 2 --batch-size 8 --tensor-parallel 2"
       "4 2 --micro-batches 2 --batch-size 4 --zero 2"
       "8 2 --batch-size 4 --tensor-parallel 2 --zero 2"
       "2 2 --micro-batches 4 --batch-size 8 --pp-schedule gpipe" "3 3 --micro-batches 4 --batch-size 8"
       "6 3 --micro-batches 4 --batch-size 8 --tensor-parallel 2 --pp-schedule gpipe")
repeat_pass && grids=("${grids[@]:0:3}")
# Under the sanitizers, the grid with ZeRO and predict: the rest reaches no line of herd's
# code the pass's other tests do not (clang's coverage of each process, 2026-12-06:
# tests/repeat_passes.txt).
sanitizer_pass && grids=("${grids[2]}")
train() { local np=$1; shift; timeout 180 "${mpirun[@]}" -np "$np" "$herd" train "${common[@]}" "$@"; }

"$herd" train "${common[@]}" "${sgd[@]}" --batch-size 8 --metrics "$tmp/m1" --save "$tmp/w1.st" \
  >"$tmp/one.out" 2>&1
check "one process trains $steps steps" test -s "$tmp/w1.st"
i=1 # w1.st and m1 are the one-process run's
for grid in "${grids[@]}"; do
  read -r np P rest <<<"$grid"
  i=$((i + 1))
  # shellcheck disable=SC2086 # rest is a list of arguments
  train "$np" "${sgd[@]}" --pipeline-stages "$P" $rest --metrics "$tmp/m$i" --save "$tmp/w$i.st" \
    >"$tmp/pp$i.out" 2>&1
  d=$(maxdiff "$tmp/w$i.st" "$tmp/w1.st")
  l=$(step_losses "$tmp/m$i" "$tmp/m1" "$steps")
  check "$P stages on $np ranks ($rest): one process's weights within 1e-5 ($d)" within "$d" 1e-5
  check "... and every step's loss within 1e-5 ($l)" within "$l" 1e-5
done

# The clipping norm counts the tied table once (on the embedding's stage), and the loss
# scaler unscales the copy too.
clip=(--optimizer sgd --lr 0.1 --momentum 0.9 --max-steps 20 --clip-grad-norm 0.5 --loss-scale dynamic)
if ! repeat_pass; then
  "$herd" train "${common[@]}" "${clip[@]}" --batch-size 8 --save "$tmp/c1.st" >"$tmp/c1.out" 2>&1
  train 4 "${clip[@]}" --batch-size 4 --pipeline-stages 2 --zero 1 --save "$tmp/c4.st" >"$tmp/c4.out" 2>&1
  train 4 "${clip[@]}" --batch-size 8 --pipeline-stages 2 --tensor-parallel 2 --save "$tmp/ct.st" \
    >"$tmp/ct.out" 2>&1
  n1=$(key clipped_steps "$tmp/c1.out")
  for run in c4 ct; do
    d=$(maxdiff "$tmp/$run.st" "$tmp/c1.st")
    check "$run: --clip-grad-norm and --loss-scale dynamic as one process ($d; clipped $(key clipped_steps "$tmp/$run.out") of $n1)" \
      sh -c "[ '$(key clipped_steps "$tmp/$run.out")' = '$n1' ] && [ '$n1' -gt 0 ] && awk 'BEGIN { exit !($d <= 1e-5) }'"
  done
fi

if ! sanitizer_pass; then
# A checkpoint holds the table once, in whole tensors; the last stage's copy takes its
# values and its momentum again at a resume, on any grid.
train 2 "${sgd[@]}" --max-steps "$half" --batch-size 8 --pipeline-stages 2 --micro-batches 2 \
  --checkpoint-dir "$tmp/ck" >"$tmp/ck.out" 2>&1
train 4 "${sgd[@]}" --max-steps "$half" --batch-size 8 --pipeline-stages 2 --tensor-parallel 2 \
  --checkpoint-dir "$tmp/ckt" >"$tmp/ckt.out" 2>&1
for d in ck3 ckt1 ckt3; do cp -r "$tmp/${d%?}" "$tmp/$d"; done
"$herd" train "${common[@]}" "${sgd[@]}" --batch-size 8 --checkpoint-dir "$tmp/ck" --resume \
  --save "$tmp/r1.st" >"$tmp/r1.out" 2>&1
d1=$(maxdiff "$tmp/r1.st" "$tmp/w1.st")
check "saved on 2 stages, resumed on one process: the uninterrupted weights within 1e-5 ($d1)" \
  within "$d1" 1e-5
"$herd" train "${common[@]}" "${sgd[@]}" --batch-size 8 --checkpoint-dir "$tmp/ckt1" --resume \
  --save "$tmp/rt1.st" >"$tmp/rt1.out" 2>&1
d1=$(maxdiff "$tmp/rt1.st" "$tmp/w1.st")
check "saved on 2 stages x 2 tensor parts, resumed on one process: likewise ($d1)" within "$d1" 1e-5
if ! repeat_pass; then
  train 6 "${sgd[@]}" --batch-size 4 --pipeline-stages 3 --zero 2 --checkpoint-dir "$tmp/ck3" \
    --resume --save "$tmp/r3.st" >"$tmp/r3.out" 2>&1
  d3=$(maxdiff "$tmp/r3.st" "$tmp/w1.st")
  check "saved on 2 stages, resumed on 3 stages x 2 replicas with --zero 2: likewise ($d3)" \
    within "$d3" 1e-5
  train 6 "${sgd[@]}" --batch-size 8 --pipeline-stages 3 --tensor-parallel 2 \
    --checkpoint-dir "$tmp/ckt3" --resume --save "$tmp/rt3.st" >"$tmp/rt3.out" 2>&1
  d3=$(maxdiff "$tmp/rt3.st" "$tmp/w1.st")
  check "saved on 2 stages x 2 parts, resumed on 3 stages x 2 parts: likewise ($d3)" within "$d3" 1e-5
  rm -rf "$tmp/ck1"
  "$herd" train "${common[@]}" "${sgd[@]}" --max-steps "$half" --batch-size 8 --checkpoint-dir "$tmp/ck1" \
    >"$tmp/ck1.out" 2>&1
  train 4 "${sgd[@]}" --batch-size 8 --pipeline-stages 2 --tensor-parallel 2 --checkpoint-dir "$tmp/ck1" \
    --resume --save "$tmp/r14.st" >"$tmp/r14.out" 2>&1
  d4=$(maxdiff "$tmp/r14.st" "$tmp/w1.st")
  check "saved on one process, resumed on 2 stages x 2 parts: likewise ($d4)" within "$d4" 1e-5
fi
# AdamW's moments of the copy come back too: interrupted and resumed on the same grid,
# the bits of the run that never stopped (and the copies still equal at the save).
adamw=(--optimizer adamw --lr 0.003 --batch-size 8 --pipeline-stages 2 --micro-batches 2)
train 2 "${adamw[@]}" --max-steps 20 --save "$tmp/a.st" >"$tmp/a.out" 2>&1
train 2 "${adamw[@]}" --max-steps 10 --checkpoint-dir "$tmp/cka" >"$tmp/ka.out" 2>&1
train 2 "${adamw[@]}" --max-steps 20 --checkpoint-dir "$tmp/cka" --resume --save "$tmp/ra.st" \
  >"$tmp/ra.out" 2>&1
check "AdamW on 2 stages, interrupted and resumed: the uninterrupted bits" \
  test "$(maxdiff "$tmp/ra.st" "$tmp/a.st")" = 0
"$herd" eval --model "$model" --checkpoint "$tmp/w2.st" --data "tokens:$tmp/t_train.bin,256" \
  --seq-len 32 --threads 1 >"$tmp/eval.out" 2>&1
check "herd eval reads a file saved on 2 stages" grep -q "perplexity=" "$tmp/eval.out"
fi

# The timeline of 2 stages x 2 parts x 2 replicas: the tensor group's sums and each
# stage part's reductions over its replicas, each on a track of its own.
if ! repeat_pass; then
  train 8 --batch-size 4 --max-steps 2 --pipeline-stages 2 --tensor-parallel 2 \
    --timeline "$tmp/grid.json" >"$tmp/grid.out" 2>&1
  check "timeline: the tensor group's sums and the stage replicas' reductions on their tracks" \
    python3 - "$tmp/grid.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))["traceEvents"]
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc
         if e.get("ph") == "M" and e["name"] == "thread_name"}
ev = [e for e in doc if e.get("ph") == "X"]
for r in range(8):
    assert names[(r, 2)] == "tensor group" and names[(r, 3)] == "stage replicas", names
    assert {e["name"] for e in ev if e["pid"] == r and e["tid"] == 2} == {"all-gather tensor-parallel sum"}
    data = {e["name"] for e in ev if e["pid"] == r and e["tid"] == 3}
    assert data and all(n.startswith("allreduce bucket") for n in data), (r, data)
PY
fi

# bf16 on 2 stages x 2 parts trains as one process does (the last step's loss).
if ! repeat_pass; then
  bf=(--optimizer sgd --lr 0.1 --momentum 0.9 --batch-size 8 --max-steps 20 --precision bf16)
  "$herd" train "${common[@]}" "${bf[@]}" >"$tmp/b1.out" 2>&1
  train 4 "${bf[@]}" --pipeline-stages 2 --tensor-parallel 2 >"$tmp/b4.out" 2>&1
  bf16_as_one "on 2 stages x 2 parts" "$tmp/b1.out" "$tmp/b4.out"
fi

# herd predict adds the exchange of the table's gradient between stage 0 and the last.
"$herd" predict --model "$model" --data "tokens:$tmp/t_train.bin,256" --seq-len 32 --workers 2 \
  --link-gbps 10 --latency-us 5 --step-ms 10 --pipeline-stages 2 --micro-batches 2 >"$tmp/predict.out" 2>&1
check "herd predict --pipeline-stages 2 counts the tied table's exchange" \
  grep -q "the token table on stage 0 and its copy on stage 1: 0\.0[0-9]* ms" "$tmp/predict.out"

sanitizer_pass && finish
# The copies drift apart when rank 1 (the last stage) skips the sum: the save says so.
HERD_TEST_FAIL_AT=untie:1 train 2 "${sgd[@]}" --batch-size 8 --max-steps 3 --pipeline-stages 2 \
  --save "$tmp/drift.st" >"$tmp/drift.out" 2>&1
rc=$?
check "copies that drift apart stop the run (exit $rc)" test "$rc" -ne 0
check "... naming the token table" grep -q "copy of the token table differs from the table" "$tmp/drift.out"
check "... and save nothing" test ! -e "$tmp/drift.st"

train 4 "${sgd[@]}" --batch-size 4 --pipeline-stages 2 --tensor-parallel 2 --zero 1 >"$tmp/z.out" 2>&1
rc=$?
check "--zero on stages of parts without a second replica is refused (exit $rc)" test "$rc" -ne 0
check "... naming the ranks it needs" grep -q "in every pipeline stage give one; start at least 8 ranks" \
  "$tmp/z.out"
finish
