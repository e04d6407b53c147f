#!/usr/bin/env bash
# A checkpoint's contents are checked at --resume: NaN written into the momentum, the
# weights or AdamW's exp_avg_sq with the checksum made valid again is refused by the
# value check (1 rank, --zero 1 on 2 ranks, --pipeline-stages 2, --clip-grad-norm),
# naming file, tensor and index; a flipped exponent bit in every momentum value or 64
# random bytes in the weights by the checksum; a weights file of step 5 renamed to
# ckpt-10 by the step check. The refusal names the earlier checkpoint that loads, and
# its command resumes from it (an older step only: not an abandoned run's higher one).
# A `latest` that is a directory or holds a NUL byte is refused; without `latest` the
# newest good checkpoint is resumed from; a resume at --max-steps is refused.
# clipped_steps, skipped_steps and the loss scale after a resume are the uninterrupted
# run's. Every mpirun runs under timeout.
set -u
. "$(dirname "$0")/testlib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
edit=(python3 "$here/ckpt_edit.py")
# 500 samples: 16 steps per epoch of 1 x 32, 8 of 2 x 32; checkpoints at steps 5 and 10.
common=(--model mlp --data synthetic:1,12,12,4,500 --threads 1 --seed 7 --epochs 2 --batch-size 32
        --quiet)
steps() { sed -n 's/.*steps=\([0-9]*\).*/\1/p' "$1"; }
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" "$2"; }

# make NAME RUNNER... -- FLAGS...: DIR $tmp/NAME holds ckpt-5 and ckpt-10 of a run with FLAGS.
make_ckpt() {
  local name=$1; shift
  local run=()
  while [ "$1" != -- ]; do run+=("$1"); shift; done
  shift
  "${run[@]}" "$herd" train "${common[@]}" "$@" --max-steps 10 --checkpoint-every-steps 5 \
    --checkpoint-dir "$tmp/$name" >/dev/null 2>&1
}
# refused NAME DIR TENSOR RUNNER... -- FLAGS...: --resume exits 1 naming the state or
# weights file of ckpt-10, TENSOR and an index.
refused() {
  local what=$1 dir=$2 file=$3 tensor=$4; shift 4
  local run=()
  while [ "$1" != -- ]; do run+=("$1"); shift; done
  shift
  "${run[@]}" "$herd" train "${common[@]}" "$@" --checkpoint-dir "$dir" --resume >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  check "$what: refused, exit 1 (got $rc: $(tail -c 300 "$tmp/err"))" test $rc -eq 1
  check "$what: names $file, tensor '$tensor' and the index" \
    grep -q "$dir/$file': tensor '$tensor' holds nan at index [0-9]" "$tmp/err"
}
# nan_cases NAME RUNNER... -- FLAGS...: NaN in the momentum, then in the weights.
nan_cases() {
  local name=$1; shift
  make_ckpt "$name" "$@" || { check "$name: the run that makes the checkpoints" false; return; }
  local run=() flags
  while [ "$1" != -- ]; do run+=("$1"); shift; done
  shift
  cp -r "$tmp/$name" "$tmp/$name.m"
  "${edit[@]}" "$tmp/$name.m/ckpt-10.state.safetensors" momentum nan 10 --fix
  refused "$name, NaN in momentum" "$tmp/$name.m" ckpt-10.state.safetensors momentum "${run[@]}" -- "$@"
  cp -r "$tmp/$name" "$tmp/$name.w"
  "${edit[@]}" "$tmp/$name.w/ckpt-10.safetensors" fc2.weight nan 10 --fix
  refused "$name, NaN in weights" "$tmp/$name.w" ckpt-10.safetensors fc2.weight "${run[@]}" -- "$@"
}

nan_cases plain --
nan_cases clip -- --clip-grad-norm 1
if have_mpi; then
  mpirun=(timeout 120 "${mpiexec[@]}" -np 2)
  nan_cases zero "${mpirun[@]}" -- --zero 1
  nan_cases pipeline "${mpirun[@]}" -- --pipeline-stages 2
else
  skipped_part "--zero 1 and --pipeline-stages 2 on 2 ranks (no MPI)"
fi

# AdamW's second moment.
make_ckpt adamw -- --optimizer adamw --lr 0.001
"${edit[@]}" "$tmp/adamw/ckpt-10.state.safetensors" exp_avg_sq nan 10 --fix
refused "AdamW, NaN in exp_avg_sq" "$tmp/adamw" ckpt-10.state.safetensors exp_avg_sq -- \
  --optimizer adamw --lr 0.001

# The checksum: an exponent bit flipped in every momentum value, 64 random bytes in the weights.
for c in "flipexp:ckpt-10.state.safetensors:momentum" "random64:ckpt-10.safetensors:-"; do
  IFS=: read -r op file tensor <<<"$c"
  rm -rf "$tmp/sum" && cp -r "$tmp/plain" "$tmp/sum"
  "${edit[@]}" "$tmp/sum/$file" "$tensor" "$op"
  "$herd" train "${common[@]}" --checkpoint-dir "$tmp/sum" --resume >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "$op: refused, exit 1 (got $rc)" test $rc -eq 1
  check "$op: a checksum mismatch naming $file" grep -q "sum/$file': checksum mismatch" "$tmp/err"
done

# A weights file of step 5 renamed to ckpt-10: the pair disagrees.
rm -rf "$tmp/mix" && cp -r "$tmp/plain" "$tmp/mix"
cp "$tmp/mix/ckpt-5.safetensors" "$tmp/mix/ckpt-10.safetensors"
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/mix" --resume >"$tmp/out" 2>"$tmp/err"
rc=$?
check "step-5 weights as ckpt-10: refused, exit 1 (got $rc)" test $rc -eq 1
check "step-5 weights as ckpt-10: names both files and steps" grep -q \
  "mix/ckpt-10.safetensors' holds the weights of step 5 but '$tmp/mix/ckpt-10.state.safetensors' the state of step 10" \
  "$tmp/err"

# The refusal names the earlier checkpoint that loads; its command resumes from it.
cmd=$(grep -o "run printf 'ckpt-[0-9]*\\\\n' > '[^']*'" "$tmp/err" | sed 's/^run //')
check "the refusal names ckpt-5 as the one that loads" grep -q "mix/ckpt-5' passes every check" "$tmp/err"
check "the suggested command is given" test -n "$cmd"
eval "$cmd"
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/mix" --resume >"$tmp/out" 2>"$tmp/err"
rc=$?
check "resumed from ckpt-5 as suggested: exit 0, 32 steps (got $rc, $(steps "$tmp/out"))" \
  test $rc -eq 0 -a "$(steps "$tmp/out")" = 32

# `latest` that is a directory.
rm -rf "$tmp/ld" && cp -r "$tmp/plain" "$tmp/ld" && rm "$tmp/ld/latest" && mkdir "$tmp/ld/latest"
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/ld" --resume >"$tmp/out" 2>"$tmp/err"
rc=$?
check "latest a directory: refused, exit 1 (got $rc)" test $rc -eq 1
check "latest a directory: says so" grep -q "ld/latest' is a directory" "$tmp/err"

# `latest` with a NUL byte after the name: refused, not read as the name before it.
rm -rf "$tmp/ln" && cp -r "$tmp/plain" "$tmp/ln" && printf 'ckpt-5\0junk' >"$tmp/ln/latest"
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/ln" --resume >"$tmp/out" 2>"$tmp/err"
rc=$?
check "latest with a NUL byte: refused, exit 1 (got $rc)" test $rc -eq 1
check "latest with a NUL byte: says so" grep -q "ln/latest' should hold one checkpoint name .* a NUL byte" "$tmp/err"

# No `latest` (deleted, or a kill between a first checkpoint's files and it): the newest
# checkpoint that passes every check is resumed from, said in a warning; the run ends as
# the uninterrupted one (32 steps), ckpt-10 not pruned by a fresh start.
rm -rf "$tmp/nl" && cp -r "$tmp/plain" "$tmp/nl" && rm "$tmp/nl/latest"
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/nl" --resume >"$tmp/out" 2>"$tmp/err"
rc=$?
check "no latest: resumed, exit 0, 32 steps (got $rc, $(steps "$tmp/out"))" \
  test $rc -eq 0 -a "$(steps "$tmp/out")" = 32
check "no latest: the warning names ckpt-10" grep -q "nl/latest' is missing; resuming from 'ckpt-10'" "$tmp/err"
rm -rf "$tmp/nl" && mkdir "$tmp/nl" && cp "$tmp/plain/ckpt-10.safetensors" "$tmp/nl/" && \
  cp "$tmp/plain/ckpt-5.state.safetensors" "$tmp/nl/ckpt-10.state.safetensors"
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/nl" --resume >"$tmp/out" 2>"$tmp/err"
rc=$?
check "no latest, no good checkpoint: refused, exit 1 (got $rc)" test $rc -eq 1
check "no latest, no good checkpoint: says how many, files kept" \
  bash -c "grep -q 'none of the 1 checkpoints' '$tmp/err' && test -e '$tmp/nl/ckpt-10.safetensors'"

# A checkpoint at --max-steps: nothing left, refused (not one step more).
rm -rf "$tmp/ms" && cp -r "$tmp/plain" "$tmp/ms"
"$herd" train "${common[@]}" --max-steps 10 --checkpoint-dir "$tmp/ms" --resume >"$tmp/out" 2>"$tmp/err"
rc=$?
check "resume at --max-steps: refused, exit 1 (got $rc)" test $rc -eq 1
check "resume at --max-steps: says so, latest unchanged" \
  bash -c "grep -q 'is at step 10 and --max-steps is 10: nothing is left to train' '$tmp/err' && test \"\$(cat '$tmp/ms/latest')\" = ckpt-10"

# The fallback is an older step of this run, never an abandoned run's higher one: a new
# run of the same model, data and seed in plain's directory writes ckpt-3, damaged.
rm -rf "$tmp/ab" && cp -r "$tmp/plain" "$tmp/ab"
"$herd" train "${common[@]}" --max-steps 3 --checkpoint-every-steps 3 --checkpoint-dir "$tmp/ab" \
  >/dev/null 2>&1
truncate -s 100 "$tmp/ab/ckpt-3.state.safetensors"
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/ab" --resume >"$tmp/out" 2>"$tmp/err"
rc=$?
check "damaged ckpt-3 among an older run's ckpt-5 and ckpt-10: refused (got $rc)" test $rc -eq 1
check "... offering neither ckpt-5 nor ckpt-10" bash -c "! grep -q 'passes every check' '$tmp/err' && \
  grep -q 'No older checkpoint' '$tmp/err'"

# The counters survive a resume: 14 steps against 7 + 7, every step clipped, the loss
# scale doubling each clean step (capped), one overflow injected on rank 0 (ZeRO's
# agreed scaler) before the checkpoint.
if have_mpi; then
  cnt=("${common[@]}" --clip-grad-norm 0.5 --loss-scale dynamic --loss-scale-init 1e36
       --loss-scale-window 3 --zero 1)
  HERD_TEST_FAIL_AT=overflow:0 "${mpirun[@]}" "$herd" train "${cnt[@]}" --max-steps 14 >"$tmp/full" 2>&1
  HERD_TEST_FAIL_AT=overflow:0 "${mpirun[@]}" "$herd" train "${cnt[@]}" --max-steps 7 \
    --checkpoint-dir "$tmp/cnt" >/dev/null 2>&1
  "${mpirun[@]}" "$herd" train "${cnt[@]}" --max-steps 14 --checkpoint-dir "$tmp/cnt" --resume \
    >"$tmp/res" 2>&1
  for f in clipped_steps skipped_steps loss_scale; do
    check "$f after a resume: the uninterrupted run's ($(field $f "$tmp/full") vs $(field $f "$tmp/res"))" \
      test -n "$(field $f "$tmp/full")" -a "$(field $f "$tmp/full")" = "$(field $f "$tmp/res")"
  done
  check "the injected overflow was skipped" test "$(field skipped_steps "$tmp/full")" = 1
else
  skipped_part "counters across a resume (needs 2 ranks for the injected overflow)"
fi
finish
