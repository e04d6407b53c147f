#!/usr/bin/env bash
# --deterministic --sync-bn (docs/determinism.md): batch norm normalises over the global
# batch, its statistics added over the slices in the global batch's order, so the bytes do
# not depend on who holds which slice. resnet20 on 8x8 images, 100 steps of 48 samples in
# slices of 4, as 1 process x 16 x 3 (--grad-accum 3), 1 x 48 x 1, 1 x 24 x 2 at --threads
# 2 and 1 x 48 x 1 at --threads 3 (the slices' layers on threads), 2 ranks x 24 x 1, 3 x 8 x 2, 4 x 12 x 1 and 6 x 8 x 1, with --zero 2 on 2 ranks, with
# --clip-grad-norm and dynamic loss scaling on 3 ranks, and stopped on 2 ranks and
# resumed on 3, and on 3 ranks of the simulated device (--device sim, 25 steps): the one-process
# bytes, weights and running statistics. The statistics are
# the global batch's: after 2 steps the weights lie within rounding of one slice of 48
# (batch norm over all of it), where slices of 4 without --sync-bn do not. A repeat
# pass (testlib.sh) trains 10 steps: 1 x 16 x 3, 3 x 8 x 2 and the resume. With
# --pipeline-stages (every slice of the replica's step through a stage together): 2
# stages, and for the first 25 steps 2 stages x 2 replicas with --zero 2, 3 stages under
# GPipe, the simulated device, clipping with dynamic loss scaling, stopped on 2 stages and
# resumed without (as the simulated device on 3 ranks above); and a model
# whose later stage holds a batch norm and dropout (tests/models/bndrop.json); the repeat
# pass keeps the first two and the dropout; under the sanitizers, only the resume and the
# two pipeline runs reach lines of herd's code that the pass's other tests do not (clang's
# coverage of each process, 2026-12-07: tests/repeat_passes.txt), so that pass runs those.
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
samples=4800 stop_at=10
# The combinations of other features (ZeRO inside stages, 3 stages, the simulated device,
# clipping inside stages, a resume from stages) train the first steps of the same run.
first_steps=25 first=(--max-steps 25)
repeat_pass && samples=480 stop_at=4
rn() { # rn NP BATCH ACCUM OUT [FLAGS...]: NP 1 is one process
  local np=$1 batch=$2 accum=$3 out=$4; shift 4
  local launch=(); [ "$np" -gt 1 ] && launch=(timeout 300 "${mpiexec[@]}" -np "$np")
  "${launch[@]}" "$herd" train --model resnet20 --data "synthetic:3,8,8,10,$samples" \
    --test-samples 32 --epochs 1 --batch-size "$batch" --grad-accum "$accum" --seed 5 --lr 0.05 \
    --momentum 0.9 --threads 1 --deterministic --slice-size 4 --sync-bn --save "$out" "$@"
}

rn 1 16 3 "$tmp/one" >"$tmp/out" 2>&1
check "resnet20 --sync-bn, 1 process x 16 x 3, --deterministic: exit 0" test $? -eq 0
check "... said at start: batch norm over the global batch" \
  grep -q "sync-bn: batch norm normalises over the global batch" "$tmp/out"
check "... the saved file holds the running statistics" grep -qa '"layer3.2.bn2.running_var"' "$tmp/one"
if ! repeat_pass; then
  rn 1 48 1 "$tmp/one.b48" --quiet >/dev/null 2>&1
  check "1 process x 48 x 1: the same bytes" cmp "$tmp/one" "$tmp/one.b48"
  # Threads run the slices' layers at once, batch norm's sums still in slice order.
  rn 1 24 2 "$tmp/one.t2" --threads 2 >"$tmp/out" 2>&1
  check "1 process x 24 x 2, --threads 2: the same bytes" cmp "$tmp/one" "$tmp/one.t2"
  check "... said: the slices' layers on 2 threads" \
    grep -q "deterministic: 2 threads each run whole slices (layer by layer: --sync-bn)" "$tmp/out"
  rn 1 48 1 "$tmp/one.t3" --quiet --threads 3 >/dev/null 2>&1
  check "1 process x 48 x 1, --threads 3: the same bytes" cmp "$tmp/one" "$tmp/one.t3"
  # The global batch's statistics: 2 steps against one slice of 48 (batch norm over it
  # without --sync-bn), where slices of 4 without --sync-bn normalise over each slice.
  short=(--max-steps 2 --quiet)
  rn 1 48 1 "$tmp/s.sync" "${short[@]}" >/dev/null 2>&1
  rn1() { "$herd" train --model resnet20 --data "synthetic:3,8,8,10,$samples" --test-samples 32 \
    --epochs 1 --batch-size 48 --seed 5 --lr 0.05 --momentum 0.9 --threads 1 --deterministic "$@"; }
  rn1 --slice-size 48 --save "$tmp/s.whole" "${short[@]}" >/dev/null 2>&1
  rn1 --slice-size 4 --save "$tmp/s.ghost" "${short[@]}" >/dev/null 2>&1
  sync_d=$(maxdiff "$tmp/s.sync" "$tmp/s.whole") ghost_d=$(maxdiff "$tmp/s.ghost" "$tmp/s.whole")
  check "2 steps: within 1e-5 of one slice of 48 (got $sync_d)" within "$sync_d" 1e-5
  check "... where slices of 4 without --sync-bn are not within 1e-3 (got $ghost_d)" \
    bash -c "! awk -v d='$ghost_d' 'BEGIN { exit !(d <= 1e-3) }'"
fi

if have_mpi; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  runs=("3 8 2" "2 24 1" "4 12 1" "6 8 1")
  repeat_pass && runs=("3 8 2")
  sanitizer_pass && runs=()
  for r in "${runs[@]}"; do
    read -r np batch accum <<<"$r"
    rn "$np" "$batch" "$accum" "$tmp/n$np" --quiet >"$tmp/out" 2>&1 || tail -3 "$tmp/out"
    check "$np ranks x $batch x $accum: the one-process bytes (weights, running statistics)" \
      cmp "$tmp/one" "$tmp/n$np"
  done
  rn 2 24 1 "$tmp/stopped" --quiet --checkpoint-dir "$tmp/ck" --max-steps "$stop_at" >"$tmp/out" 2>&1 ||
    tail -3 "$tmp/out"
  rn 3 8 2 "$tmp/resumed" --quiet --checkpoint-dir "$tmp/ck" --resume >"$tmp/out" 2>&1 ||
    tail -3 "$tmp/out"
  check "stopped at step $stop_at on 2 ranks x 24, resumed on 3 x 8 x 2: the one-process bytes" \
    cmp "$tmp/one" "$tmp/resumed"
  if ! repeat_pass; then
    rn 2 24 1 "$tmp/z2" --quiet --zero 2 >"$tmp/out" 2>&1 || tail -3 "$tmp/out"
    check "2 ranks x 24 with --zero 2: the one-process bytes" cmp "$tmp/one" "$tmp/z2"
    more=(--clip-grad-norm 0.3 --loss-scale dynamic --loss-scale-init 1024 --quiet)
    rn 1 16 3 "$tmp/one.clip" "${more[@]}" >/dev/null 2>&1
    rn 3 8 2 "$tmp/n3.clip" "${more[@]}" >"$tmp/out" 2>&1 || tail -3 "$tmp/out"
    check "3 ranks with --clip-grad-norm and dynamic loss scaling: the one-process bytes" \
      cmp "$tmp/one.clip" "$tmp/n3.clip"
    check "... and clipping changed them" bash -c "! cmp -s '$tmp/one' '$tmp/one.clip'"
    rn 1 16 3 "$tmp/one.first" --quiet "${first[@]}" >/dev/null 2>&1
    rn 3 8 2 "$tmp/n3.sim" --quiet --device sim "${first[@]}" >"$tmp/out" 2>&1 || tail -3 "$tmp/out"
    check "3 ranks on --device sim (device memory), $first_steps steps: the one-process CPU bytes" \
      cmp "$tmp/one.first" "$tmp/n3.sim"
  fi
else
  skipped_part "several ranks under mpirun (herd built without MPI, or no launcher)"
fi

# Pipeline stages: each stage runs the replica's slices of the step together, its batch
# norms summed over the stage's replicas in the global batch's order.
if have_mpi; then
  # 2 stages for 100 steps; their combinations with ZeRO, 3 stages and the simulated device
  # for the first steps of the same run.
  pp=("2 16 3 --pipeline-stages 2 --micro-batches 4" "4 8 3 --pipeline-stages 2 --micro-batches 2 --zero 2")
  repeat_pass || pp+=("3 16 3 --pipeline-stages 3 --micro-batches 4 --pp-schedule gpipe"
                      "2 16 3 --pipeline-stages 2 --micro-batches 4 --device sim")
  for r in "${pp[@]}"; do
    read -r np batch accum flags <<<"$r"
    ref=$tmp/one len=()
    if [ "$np" != 2 ] || [[ $flags == *sim* ]] && ! repeat_pass; then
      ref=$tmp/one.first len=("${first[@]}")
    fi
    # shellcheck disable=SC2086
    rn "$np" "$batch" "$accum" "$tmp/pp" $flags "${len[@]}" >"$tmp/out" 2>&1 || tail -3 "$tmp/out"
    check "$np ranks x $batch x $accum, $flags${len[*]:+, $first_steps steps}: the one-process bytes" \
      cmp "$ref" "$tmp/pp"
  done
  check "... said at start: the stages take turns" grep -q "stages take turns" "$tmp/out"
  if ! repeat_pass; then
    rn 1 16 3 "$tmp/one.clip.first" "${more[@]}" "${first[@]}" >/dev/null 2>&1
    rn 4 8 3 "$tmp/pp.clip" --pipeline-stages 2 --micro-batches 2 "${more[@]}" "${first[@]}" >"$tmp/out" 2>&1 ||
      tail -3 "$tmp/out"
    check "2 stages x 2 replicas, clipping and dynamic loss scaling, $first_steps steps: the one-process bytes" \
      cmp "$tmp/one.clip.first" "$tmp/pp.clip"
    rn 2 16 3 "$tmp/pp.stopped" --quiet --pipeline-stages 2 --micro-batches 4 \
      --checkpoint-dir "$tmp/ckpp" --max-steps "$stop_at" >"$tmp/out" 2>&1 || tail -3 "$tmp/out"
    rn 3 8 2 "$tmp/pp.resumed" --quiet --checkpoint-dir "$tmp/ckpp" --resume "${first[@]}" >"$tmp/out" 2>&1 ||
      tail -3 "$tmp/out"
    check "stopped at step $stop_at on 2 stages, resumed on 3 ranks without stages to step $first_steps: the one-process bytes" \
      cmp "$tmp/one.first" "$tmp/pp.resumed"
  fi
  sanitizer_pass && finish
  # Dropout after batch norm in the later stage: its stream is the whole model's layer's.
  bd() { # bd NP OUT [FLAGS...]
    local np=$1 out=$2; shift 2
    local launch=(); [ "$np" -gt 1 ] && launch=(timeout 300 "${mpiexec[@]}" -np "$np")
    "${launch[@]}" "$herd" train --model "$here/models/bndrop.json" --data "synthetic:1,12,12,4,480" \
      --test-samples 32 --epochs 1 --batch-size 16 --grad-accum 3 --seed 5 --lr 0.05 --momentum 0.9 \
      --threads 1 --deterministic --slice-size 4 --sync-bn --quiet --save "$out" "$@"
  }
  bd 1 "$tmp/bd.1" >/dev/null 2>&1
  bd 2 "$tmp/bd.pp" --pipeline-stages 2 --micro-batches 4 --stage-split drop1 >"$tmp/out" 2>&1 ||
    tail -3 "$tmp/out"
  check "batch norm and dropout, the second stage from the first dropout: the one-process bytes" \
    cmp "$tmp/bd.1" "$tmp/bd.pp"
fi
finish
