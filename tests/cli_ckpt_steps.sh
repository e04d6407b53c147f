#!/usr/bin/env bash
# Checkpoints inside epochs and what elastic restarts build on, through the CLI:
# --checkpoint-every-steps / --checkpoint-every-seconds leave the weights untouched bit
# for bit and resume from a step inside an epoch to the uninterrupted weights; a
# process killed while the background thread writes leaves `latest` at the previous
# checkpoint; --elastic-ranks with --elastic-batch keep equals a resume by hand with the
# same global batch; restart accounting (progress record, restarts= lost_steps= in the
# summary and --metrics); --keep-checkpoints 3 and 0 (the writer's thread, ZeRO's save).
# Every mpirun runs under timeout.
# Under the sanitizers, the kill, the restart accounting and the elastic batch alone: the
# other parts reach no line of herd's code that the pass's other tests do not (clang's
# coverage of each process, 2026-12-07: tests/repeat_passes.txt).
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
common=(--model mlp --data synthetic:1,12,12,4,500 --threads 1 --seed 7 --epochs 3 --batch-size 32
        --optimizer adamw --lr 0.002 --quiet)
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" "$2"; }

# One process, 16 steps per epoch: a checkpoint every 5 steps changes nothing.
"$herd" train "${common[@]}" --save "$tmp/full.st" >"$tmp/out" 2>&1
if ! sanitizer_pass; then
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/ck" --checkpoint-every-steps 5 --save "$tmp/ck.st" >"$tmp/out" 2>&1
check "every 5 steps: exits 0" test $? -eq 0
check "every 5 steps: the weights of a run without checkpoints, bit for bit" cmp -s "$tmp/full.st" "$tmp/ck.st"
check "every 5 steps: the last two kept (45 and 48)" test "$(ls "$tmp/ck" | grep -c '^ckpt-4[58]\.')" = 4

# Resumed from step 10, inside the first epoch: the uninterrupted weights.
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/mid" --checkpoint-every-steps 5 --max-steps 13 \
  --keep-checkpoints 3 >/dev/null 2>&1
check "--keep-checkpoints 3: steps 5, 10 and 13 kept (2 files each)" \
  test "$(ls "$tmp/mid" | grep -c '^ckpt-\(5\|10\|13\)\.')" = 6
rm -f "$tmp/mid"/ckpt-13.*
echo ckpt-10 >"$tmp/mid/latest"
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/mid" --resume --save "$tmp/mid.st" >"$tmp/out" 2>&1
check "resumed at step 10 of 16: 48 steps in all" test "$(field steps "$tmp/out")" = 48
check "resumed at step 10: the uninterrupted weights, bit for bit" cmp -s "$tmp/full.st" "$tmp/mid.st"

# Seconds: 7 steps take longer than 1 ms, so a checkpoint is made before the last.
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/sec" --checkpoint-every-seconds 0.001 --max-steps 7 \
  --save "$tmp/sec.st" >/dev/null 2>&1
check "every 0.001 s: a checkpoint before step 7 kept beside it" \
  test "$(ls "$tmp/sec" | grep -c '^ckpt-[1-6]\.safetensors$')" = 1
check "every 0.001 s: latest names step 7" test "$(cat "$tmp/sec/latest")" = ckpt-7
fi

# Killed in the background write of step 10's weights (the 4th file: 3 per checkpoint):
# latest names step 5, and the resume ends on the uninterrupted weights.
HERD_TEST_KILL_IN_WRITE=4 "$herd" train "${common[@]}" --checkpoint-dir "$tmp/kw" \
  --checkpoint-every-steps 5 >/dev/null 2>&1
rc=$?
check "killed in a background write (exit $rc)" test $rc -eq 137
check "killed in a background write: latest names ckpt-5" test "$(cat "$tmp/kw/latest")" = ckpt-5
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/kw" --resume --save "$tmp/kw.st" >/dev/null 2>&1
check "killed in a background write: resumed to the uninterrupted weights" cmp -s "$tmp/full.st" "$tmp/kw.st"

# Restart accounting, as herd run --max-restarts sets it up: the first attempt records
# step 13; a restart from step 10 counts 3 lost steps.
HERD_RUN_SUPERVISED=1 HERD_RUN_RESTARTS=0 "$herd" train "${common[@]}" --checkpoint-dir "$tmp/rs" \
  --checkpoint-every-steps 5 --max-steps 13 >"$tmp/out" 2>&1
check "attempt 1: restarts=0 in the summary" test "$(field restarts "$tmp/out")" = 0
check "attempt 1: progress records step 13" grep -q '^herd-progress step=13 ' "$tmp/rs/progress"
rm -f "$tmp/rs"/ckpt-13.*
echo ckpt-10 >"$tmp/rs/latest"
HERD_RUN_SUPERVISED=1 HERD_RUN_RESTARTS=1 "$herd" train "${common[@]}" --checkpoint-dir "$tmp/rs" \
  --checkpoint-every-steps 5 --resume --metrics "$tmp/rs.jsonl" --log-every 1 --save "$tmp/rs.st" >"$tmp/out" 2>&1
check "restart 1: restarts=1 lost_steps=3 in the summary" \
  test "$(field restarts "$tmp/out") $(field lost_steps "$tmp/out")" = "1 3"
check "restart 1: recovery_s > 0" python3 -c "import sys; sys.exit(not float(sys.argv[1]) > 0)" \
  "$(field recovery_s "$tmp/out")"
check "restart 1: --metrics lines carry restarts and lost_steps" \
  grep -q '"restarts":1,"lost_steps":3' "$tmp/rs.jsonl"
check "restart 1: the uninterrupted weights" cmp -s "$tmp/full.st" "$tmp/rs.st"
HERD_RUN_SUPERVISED=1 HERD_RUN_RESTARTS=0 "$herd" train "${common[@]}" --max-steps 2 >"$tmp/out" 2>&1
check "supervised without --checkpoint-dir: no restart fields needed, exits 0" test $? -eq 0

check "--checkpoint-every-steps without --checkpoint-dir refused (exit 2)" \
  bash -c '"$0" train --model mlp --checkpoint-every-steps 5 >/dev/null 2>&1; test $? -eq 2' "$herd"
check "--elastic-batch other refused (exit 2)" \
  bash -c '"$0" train --model mlp --elastic-batch half >/dev/null 2>&1; test $? -eq 2' "$herd"

if have_mpi; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  mpirun=(timeout 120 "${mpiexec[@]}")
  # 3 ranks x 16 x 2 (global batch 96) to step 3, then 2 ranks told the batch was meant
  # for 3: the global batch is kept as 2 x 16 x 3, as a resume by hand with those sizes.
  el=(--model mlp --data synthetic:1,12,12,4,500 --threads 1 --seed 7 --epochs 2 --batch-size 16
      --grad-accum 2 --lr 0.01)
  "${mpirun[@]}" -np 3 "$herd" train "${el[@]}" --quiet --checkpoint-dir "$tmp/e3" --max-steps 3 >/dev/null 2>&1
  check "3 ranks to step 3: a checkpoint" test "$(cat "$tmp/e3/latest" 2>/dev/null)" = ckpt-3
  cp -r "$tmp/e3" "$tmp/e3b"
  "${mpirun[@]}" -np 2 "$herd" train "${el[@]}" --checkpoint-dir "$tmp/e3" --resume --elastic-ranks 3 \
    --save "$tmp/keep.st" >"$tmp/out" 2>&1
  check "keep: exits 0" test $? -eq 0
  check "keep: says the global batch 96 is kept as 2 x 16 x 3" grep -q 'global batch 96 kept as 2 x 16 x 3' "$tmp/out"
  if ! sanitizer_pass; then
  "${mpirun[@]}" -np 2 "$herd" train "${el[@]}" --grad-accum 3 --checkpoint-dir "$tmp/e3b" --resume \
    --save "$tmp/hand.st" >/dev/null 2>&1
  check "keep: the weights of a resume by hand with --grad-accum 3, bit for bit" cmp -s "$tmp/keep.st" "$tmp/hand.st"
  fi
  "${mpirun[@]}" -np 2 "$herd" train "${el[@]}" --max-steps 1 --elastic-ranks 3 --elastic-batch scale >"$tmp/out" 2>&1
  check "scale: per-rank batch kept, lr 0.01 x 64/96" grep -q 'per-rank batch 16 kept, global batch 64 (was 96), lr 0.00666667' "$tmp/out"
  sanitizer_pass && finish
  # ZeRO's checkpoints are collective: inside epochs too, and the weights stay the same.
  zr=(--model mlp --data synthetic:1,12,12,4,500 --threads 1 --seed 7 --epochs 2 --batch-size 32
      --optimizer adamw --lr 0.002 --zero 1 --quiet)
  "${mpirun[@]}" -np 2 "$herd" train "${zr[@]}" --save "$tmp/z.st" >/dev/null 2>&1
  "${mpirun[@]}" -np 2 "$herd" train "${zr[@]}" --checkpoint-dir "$tmp/zk" --checkpoint-every-steps 3 \
    --keep-checkpoints 0 --save "$tmp/zk.st" >/dev/null 2>&1
  check "--zero 1 every 3 steps: the weights without checkpoints, and step 15's checkpoint" \
    bash -c "cmp -s '$tmp/z.st' '$tmp/zk.st' && test -e '$tmp/zk/ckpt-15.state.safetensors'"
  check "--keep-checkpoints 0: every one kept (step 3's too)" test -e "$tmp/zk/ckpt-3.state.safetensors"
  "${mpirun[@]}" -np 2 "$herd" train "${el[@]}" --batch-size 15 --grad-accum 1 --elastic-ranks 3 >"$tmp/out" 2>&1
  check "keep: a global batch of 45 on 2 ranks refused, naming scale" grep -q 'cannot be kept on 2 replicas.*--elastic-batch scale' "$tmp/out"
else
  skipped_part "elastic batch across ranks: herd built without MPI, or its launcher missing"
fi
finish
