#!/usr/bin/env bash
# Pipeline stages for a language model through the CLI under mpirun, on a small GPT
# (tests/models/gpt-tp4.json) whose head is tied to the embedding's token table: the
# last stage keeps a copy of the table, and the two copies' gradients are summed after
# the reduction (src/train/pipeline_tied.c). 20 steps on 2 stages (both schedules), 3
# stages, 2 stages x 2 replicas with --zero 2 end on one process's weights within 1e-5,
# every step's loss within 1e-5; --clip-grad-norm with --loss-scale dynamic counts the
# table once; a checkpoint from 2 stages resumes on one process and on 3 stages x 2
# replicas with ZeRO, and AdamW's on 2 stages to the uninterrupted bits; each save
# checks the two copies bitwise, and a run whose copies
# drift apart (a test hook skips the sum on one rank) stops with an error; herd eval
# reads the file; --deterministic is refused, named.
# In a repeat pass (sanitizers, MPICH): 2 stages, 2 x 2 with ZeRO, the resume on one
# process, the drift and the refusal.
set -u
. "$(dirname "$0")/testlib.sh"
have_mpi || skip_all "herd built without MPI, or its launcher (HERD_MPIEXEC, set by ctest) missing"
corpus=/usr/share/common-licenses
[ -d "$corpus" ] || skip_all "$corpus (Debian's base-files) is not here"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun=("${mpiexec[@]}")
cat "$corpus"/* | head -c 40000 >"$tmp/text"
python3 "$here/../scripts/tokenize_bytes.py" "$tmp/text" "$tmp/t_train.bin" "$tmp/t_val.bin" >/dev/null
model="$here/models/gpt-tp4.json"
common=(--model "$model" --data "tokens:$tmp/t_train.bin,256" --seq-len 32 --threads 1
        --test-samples 32 --log-every 1 --quiet)
sgd=(--optimizer sgd --lr 0.1 --momentum 0.9 --max-steps 20)
# np, then the run's arguments after --pipeline-stages
grids=("2 2 --micro-batches 2 --batch-size 8" "4 2 --micro-batches 2 --batch-size 4 --zero 2"
       "2 2 --micro-batches 4 --batch-size 8 --pp-schedule gpipe" "3 3 --micro-batches 4 --batch-size 8")
repeat_pass && grids=("${grids[@]:0:2}")
train() { local np=$1; shift; timeout 180 "${mpirun[@]}" -np "$np" "$herd" train "${common[@]}" "$@"; }
losses() {
  python3 - "$1" "$2" <<'PY'
import json, sys
def steps(p):
    return [json.loads(l)["train_loss"] for l in open(p) if '"kind":"step"' in l]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
assert len(a) == len(b) == 20, (len(a), len(b))
print("%.3g" % max(abs(x - y) / abs(y) for x, y in zip(a, b)))
PY
}

"$herd" train "${common[@]}" "${sgd[@]}" --batch-size 8 --metrics "$tmp/m1" --save "$tmp/w1.st" \
  >"$tmp/one.out" 2>&1
check "one process trains 20 steps" test -s "$tmp/w1.st"
i=0
for grid in "${grids[@]}"; do
  read -r np P rest <<<"$grid"
  i=$((i + 1))
  # shellcheck disable=SC2086 # rest is a list of arguments
  train "$np" "${sgd[@]}" --pipeline-stages "$P" $rest --metrics "$tmp/m$i" --save "$tmp/w$i.st" \
    >"$tmp/pp$i.out" 2>&1
  d=$(maxdiff "$tmp/w$i.st" "$tmp/w1.st")
  l=$(losses "$tmp/m$i" "$tmp/m1")
  check "$P stages on $np ranks ($rest): one process's weights within 1e-5 ($d)" within "$d" 1e-5
  check "... and every step's loss within 1e-5 ($l)" within "$l" 1e-5
done

key() { grep -o "$1=[0-9.]*" "$2" | cut -d= -f2; }
# The clipping norm counts the tied table once (on the embedding's stage), and the loss
# scaler unscales the copy too.
clip=(--optimizer sgd --lr 0.1 --momentum 0.9 --max-steps 20 --clip-grad-norm 0.5 --loss-scale dynamic)
if ! repeat_pass; then
  "$herd" train "${common[@]}" "${clip[@]}" --batch-size 8 --save "$tmp/c1.st" >"$tmp/c1.out" 2>&1
  train 4 "${clip[@]}" --batch-size 4 --pipeline-stages 2 --zero 1 --save "$tmp/c4.st" >"$tmp/c4.out" 2>&1
  n1=$(key clipped_steps "$tmp/c1.out")
  d=$(maxdiff "$tmp/c4.st" "$tmp/c1.st")
  check "--clip-grad-norm and --loss-scale dynamic on 2 stages x 2 with ZeRO 1 as one process ($d; clipped $(key clipped_steps "$tmp/c4.out") of $n1)" \
    sh -c "[ '$(key clipped_steps "$tmp/c4.out")' = '$n1' ] && [ '$n1' -gt 0 ] && awk 'BEGIN { exit !($d <= 1e-5) }'"
fi

# A checkpoint holds the table once; the last stage's copy takes its values and its
# momentum again at a resume, on any grid.
train 2 "${sgd[@]}" --max-steps 10 --batch-size 8 --pipeline-stages 2 --micro-batches 2 \
  --checkpoint-dir "$tmp/ck" >"$tmp/ck.out" 2>&1
cp -r "$tmp/ck" "$tmp/ck3"
"$herd" train "${common[@]}" "${sgd[@]}" --batch-size 8 --checkpoint-dir "$tmp/ck" --resume \
  --save "$tmp/r1.st" >"$tmp/r1.out" 2>&1
d1=$(maxdiff "$tmp/r1.st" "$tmp/w1.st")
check "saved on 2 stages, resumed on one process: the uninterrupted weights within 1e-5 ($d1)" \
  within "$d1" 1e-5
if ! repeat_pass; then
  train 6 "${sgd[@]}" --batch-size 4 --pipeline-stages 3 --zero 2 --checkpoint-dir "$tmp/ck3" \
    --resume --save "$tmp/r3.st" >"$tmp/r3.out" 2>&1
  d3=$(maxdiff "$tmp/r3.st" "$tmp/w1.st")
  check "... and on 3 stages x 2 replicas with --zero 2: likewise ($d3)" within "$d3" 1e-5
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

# The copies drift apart when rank 1 (the last stage) skips the sum: the save says so.
HERD_TEST_FAIL_AT=untie:1 train 2 "${sgd[@]}" --batch-size 8 --max-steps 3 --pipeline-stages 2 \
  --save "$tmp/drift.st" >"$tmp/drift.out" 2>&1
rc=$?
check "copies that drift apart stop the run (exit $rc)" test "$rc" -ne 0
check "... naming the token table" grep -q "copy of the token table differs from the table" "$tmp/drift.out"
check "... and save nothing" test ! -e "$tmp/drift.st"

train 2 "${sgd[@]}" --batch-size 8 --pipeline-stages 2 --deterministic >"$tmp/det.out" 2>&1
rc=$?
check "--deterministic with stages of a language model is refused (exit $rc)" test "$rc" -ne 0
check "... naming the option" grep -q "deterministic with --pipeline-stages and a language model" "$tmp/det.out"
finish
