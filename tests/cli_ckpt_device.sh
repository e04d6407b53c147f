#!/usr/bin/env bash
# Checkpoints and resume on a device, through the CLI, on the simulated device ("sim":
# the CPU's arithmetic behind device memory the host cannot read, so a copy the
# checkpoint code forgets faults). A run stopped and resumed on sim ends on the
# uninterrupted run's weights bit for bit; one checkpoint format: a checkpoint written
# on sim resumes on the CPU and the other way round, the files byte for byte the same;
# the background writer (--checkpoint-every-steps), a kill in its write; herd eval and
# --save on sim; a mismatched model refused with the directory untouched; 2 ranks on
# sim, herd run --max-restarts after a kill, and --zero and --pipeline-stages where
# they run on a device. Every mpirun runs under timeout.
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
"$herd" train --help | grep -q -- "--device cpu|cuda|sim" || skip_all "herd has no simulated device"
# bnnet: batch-norm buffers, AdamW: two state tensors. 16 steps per epoch at 1 x 32.
bnnet=$here/models/bnnet.json
common=(--model "$bnnet" --data synthetic:1,12,12,4,500 --threads 1 --seed 7 --epochs 3 --batch-size 32
        --optimizer adamw --lr 0.002 --quiet)
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" "$2"; }

# The uninterrupted runs: the premise of every comparison below is that sim and cpu
# do the same arithmetic.
"$herd" train "${common[@]}" --device cpu --save "$tmp/cpu.st" >"$tmp/out" 2>&1
"$herd" train "${common[@]}" --device sim --save "$tmp/sim.st" >"$tmp/out" 2>&1
check "sim uninterrupted: exits 0, on sim" test "$(field device "$tmp/out")" = sim
check "sim and cpu uninterrupted: the same weights, bit for bit" cmp -s "$tmp/cpu.st" "$tmp/sim.st"

# Stopped inside epoch 1 (the last checkpoint at step 11) and resumed, on each device.
for d in sim cpu; do
  "$herd" train "${common[@]}" --device $d --checkpoint-dir "$tmp/$d" --max-steps 11 >"$tmp/out" 2>"$tmp/err"
  check "$d to step 11: exits 0, latest names ckpt-11 ($(tail -n 1 "$tmp/err"))" \
    test "$(cat "$tmp/$d/latest" 2>/dev/null)" = ckpt-11
done
check "one format: sim's checkpoint files are the CPU's, byte for byte" bash -c \
  "cmp -s '$tmp/sim/ckpt-11.safetensors' '$tmp/cpu/ckpt-11.safetensors' &&
   cmp -s '$tmp/sim/ckpt-11.state.safetensors' '$tmp/cpu/ckpt-11.state.safetensors'"
for from in sim cpu; do
  for to in sim cpu; do
    rm -rf "$tmp/r"
    cp -r "$tmp/$from" "$tmp/r"
    "$herd" train "${common[@]}" --device $to --checkpoint-dir "$tmp/r" --resume --save "$tmp/r.st" \
      >"$tmp/out" 2>"$tmp/err"
    rc=$?
    check "written on $from, resumed on $to: exits 0 ($(tail -n 1 "$tmp/err")), 48 steps" \
      test "$rc $(field steps "$tmp/out")" = "0 48"
    check "written on $from, resumed on $to: the uninterrupted $to run's weights, bit for bit" \
      cmp -s "$tmp/$to.st" "$tmp/r.st"
  done
done

# herd eval on sim: the weights of a sim checkpoint, the CPU's figures exactly.
"$herd" eval --model "$bnnet" --data synthetic:1,12,12,4,500 --device sim --threads 1 \
  --checkpoint "$tmp/sim/ckpt-11.safetensors" >"$tmp/es" 2>"$tmp/err"
check "eval on sim: exits 0 ($(tail -n 1 "$tmp/err"))" test $? -eq 0
"$herd" eval --model "$bnnet" --data synthetic:1,12,12,4,500 --device cpu --threads 1 \
  --checkpoint "$tmp/sim/ckpt-11.safetensors" >"$tmp/ec" 2>&1
check "eval on sim: the CPU's loss and accuracy" test "$(cat "$tmp/es")" = "$(cat "$tmp/ec")"

# The background writer on sim: checkpoints every 5 steps change nothing; resumed from
# step 10, inside epoch 1, the uninterrupted weights.
"$herd" train "${common[@]}" --device sim --checkpoint-dir "$tmp/bg" --checkpoint-every-steps 5 \
  --save "$tmp/bg.st" >"$tmp/out" 2>"$tmp/err"
check "sim every 5 steps: exits 0 ($(tail -n 1 "$tmp/err"))" test $? -eq 0
check "sim every 5 steps: the weights of a run without checkpoints" cmp -s "$tmp/sim.st" "$tmp/bg.st"
check "sim every 5 steps: the last two kept (45 and 48)" test "$(ls "$tmp/bg" | grep -c '^ckpt-4[58]\.')" = 4
"$herd" train "${common[@]}" --device sim --checkpoint-dir "$tmp/mid" --checkpoint-every-steps 5 \
  --max-steps 13 >/dev/null 2>&1
rm -f "$tmp/mid"/ckpt-13.*
echo ckpt-10 >"$tmp/mid/latest"
"$herd" train "${common[@]}" --device sim --checkpoint-dir "$tmp/mid" --resume --save "$tmp/mid.st" >/dev/null 2>&1
check "sim resumed at step 10 of 16: the uninterrupted weights" cmp -s "$tmp/sim.st" "$tmp/mid.st"
# Killed in the background write of step 10's weights (the 4th file): latest names
# step 5, and the resume ends on the uninterrupted weights.
HERD_TEST_KILL_IN_WRITE=4 "$herd" train "${common[@]}" --device sim --checkpoint-dir "$tmp/kw" \
  --checkpoint-every-steps 5 >/dev/null 2>&1
rc=$?
check "sim killed in a background write (exit $rc)" test $rc -eq 137
check "sim killed in a background write: latest names ckpt-5" test "$(cat "$tmp/kw/latest")" = ckpt-5
"$herd" train "${common[@]}" --device sim --checkpoint-dir "$tmp/kw" --resume --save "$tmp/kw.st" >/dev/null 2>&1
check "sim killed in a background write: resumed to the uninterrupted weights" cmp -s "$tmp/sim.st" "$tmp/kw.st"

# Bad input: a checkpoint of another model (mlp) resumed by a bnnet run on sim: exit 1
# naming the file, and the directory's checkpoints as they were.
mlp=(--model mlp --data synthetic:1,12,12,4,500 --threads 1 --seed 7 --epochs 3 --batch-size 32 --quiet)
"$herd" train "${mlp[@]}" --device cpu --checkpoint-dir "$tmp/other" --max-steps 5 >/dev/null 2>&1
(cd "$tmp/other" && ls -l --time-style=+%s.%N && md5sum *) >"$tmp/before"
"$herd" train "${common[@]}" --device sim --checkpoint-dir "$tmp/other" --resume >"$tmp/out" 2>"$tmp/err"
rc=$?
check "another model's checkpoint on sim: exit 1 ($rc)" test $rc -eq 1
check "another model's checkpoint on sim: refused by the run's identity (run.json), naming both models" \
  grep -q "are of another run (started .*): model 'mlp' (.*) there, '.*' (.*) here" "$tmp/err"
(cd "$tmp/other" && ls -l --time-style=+%s.%N && md5sum *) >"$tmp/after"
check "another model's checkpoint on sim: the directory untouched" cmp -s "$tmp/before" "$tmp/after"
# Without run.json (a directory of an older herd) the load's own check refuses it.
rm "$tmp/other/run.json"
"$herd" train "${common[@]}" --device sim --checkpoint-dir "$tmp/other" --resume >"$tmp/out" 2>"$tmp/err"
rc=$?
check "another model's checkpoint on sim, no run.json: exit 1 ($rc)" test $rc -eq 1
check "another model's checkpoint on sim, no run.json: names the file and the cause" \
  grep -q "other/ckpt-5.safetensors'.*was it saved from a different model" "$tmp/err"
"$herd" eval --model "$bnnet" --data synthetic:1,12,12,4,500 --device sim \
  --checkpoint "$tmp/other/ckpt-5.safetensors" >/dev/null 2>"$tmp/err"
rc=$?
check "eval on sim of another model's weights: exit 1 and why ($rc)" \
  bash -c "test $rc -eq 1 && grep -q 'was it saved from a different model' '$tmp/err'"

if have_mpi; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  mpirun=(timeout 120 "${mpiexec[@]}")
  # 2 ranks x 32 on sim (gradients through the staged communicator): 8 steps per epoch.
  # mlp, without batch norm: a resume gives every rank rank 0's running statistics, so
  # with batch norm only the same stop and resume on the CPU is the reference.
  m2=(--model mlp --data synthetic:1,12,12,4,500 --threads 1 --seed 7 --epochs 3 --batch-size 32
      --optimizer adamw --lr 0.002 --quiet)
  "${mpirun[@]}" -np 2 "$herd" train "${m2[@]}" --device sim --save "$tmp/sim2.st" >"$tmp/out" 2>"$tmp/err"
  check "2 ranks on sim uninterrupted: exits 0 ($(tail -n 1 "$tmp/err")), 24 steps" \
    test "$(field steps "$tmp/out")" = 24
  "${mpirun[@]}" -np 2 "$herd" train "${m2[@]}" --device cpu --save "$tmp/cpu2.st" >/dev/null 2>&1
  check "2 ranks: sim's weights are the CPU's" cmp -s "$tmp/cpu2.st" "$tmp/sim2.st"
  "${mpirun[@]}" -np 2 "$herd" train "${m2[@]}" --device sim --checkpoint-dir "$tmp/ck2" --max-steps 11 \
    >/dev/null 2>&1
  "${mpirun[@]}" -np 2 "$herd" train "${m2[@]}" --device sim --checkpoint-dir "$tmp/ck2" --resume \
    --save "$tmp/res2.st" >"$tmp/out" 2>"$tmp/err"
  check "2 ranks on sim resumed at step 11: exits 0 ($(tail -n 1 "$tmp/err")), 24 steps" \
    test "$(field steps "$tmp/out")" = 24
  check "2 ranks on sim resumed: the uninterrupted weights, bit for bit" cmp -s "$tmp/sim2.st" "$tmp/res2.st"
  # Checkpoints every 3 steps from the background writer, with 2 ranks on sim.
  "${mpirun[@]}" -np 2 "$herd" train "${m2[@]}" --device sim --checkpoint-dir "$tmp/bg2" \
    --checkpoint-every-steps 3 --save "$tmp/bg2.st" >/dev/null 2>&1
  check "2 ranks on sim every 3 steps: the weights without checkpoints, and step 24's checkpoint" \
    bash -c "cmp -s '$tmp/sim2.st' '$tmp/bg2.st' && test \"\$(cat '$tmp/bg2/latest')\" = ckpt-24"
  # 2 ranks on cpu stopped, resumed by 2 ranks on sim: the position and state carry
  # across devices as across rank counts.
  "${mpirun[@]}" -np 2 "$herd" train "${m2[@]}" --device cpu --checkpoint-dir "$tmp/x2" --max-steps 11 \
    >/dev/null 2>&1
  "${mpirun[@]}" -np 2 "$herd" train "${m2[@]}" --device sim --checkpoint-dir "$tmp/x2" --resume \
    --save "$tmp/x2.st" >/dev/null 2>&1
  check "2 ranks: written on cpu, resumed on sim: the uninterrupted weights" cmp -s "$tmp/sim2.st" "$tmp/x2.st"
  # With batch norm (buffers broadcast from rank 0's device memory at the resume): the
  # same stop and resume on sim and on the CPU end alike.
  for d in sim cpu; do
    "${mpirun[@]}" -np 2 "$herd" train "${common[@]}" --device $d --checkpoint-dir "$tmp/bn2$d" \
      --max-steps 11 >/dev/null 2>&1
    "${mpirun[@]}" -np 2 "$herd" train "${common[@]}" --device $d --checkpoint-dir "$tmp/bn2$d" --resume \
      --save "$tmp/bn2$d.st" >/dev/null 2>&1
  done
  check "2 ranks with batch norm, stopped and resumed: sim's weights are the CPU's" \
    bash -c "test -s '$tmp/bn2sim.st' && cmp -s '$tmp/bn2sim.st' '$tmp/bn2cpu.st'"
  # herd run --max-restarts: the first attempt killed in the background write of step
  # 6's weights (rank 0 writes; the 4th file), the restart resumes from step 3 on sim.
  rc=0
  HERD_TEST_KILL_IN_WRITE=4 timeout 300 "$herd" run -np 2 --max-restarts 1 -- train "${m2[@]}" \
    --device sim --checkpoint-dir "$tmp/sup" --checkpoint-every-steps 3 --save "$tmp/sup.st" \
    >"$tmp/out" 2>"$tmp/err" || rc=$?
  check "herd run on sim: a killed attempt restarted, the job ends 0 ($rc)" \
    bash -c "test $rc -eq 0 && grep -q '^herd: restart 1/1 ' '$tmp/err' && grep -q 'restarts=1' '$tmp/out'"
  check "herd run on sim: the uninterrupted weights" cmp -s "$tmp/sim2.st" "$tmp/sup.st"
  # --zero 1 on sim, where ZeRO runs on a device: its checkpoints gather the slices.
  zr=("${m2[@]}" --device sim --zero 1)
  "${mpirun[@]}" -np 2 "$herd" train "${zr[@]}" --save "$tmp/z.st" >"$tmp/out" 2>"$tmp/err"
  if grep -q "zero.* on 'sim' is not supported" "$tmp/err"; then
    skipped_part "--zero 1 on sim: ZeRO does not run on a device in this build"
  else
    check "--zero 1 on sim: exits 0 ($(tail -n 1 "$tmp/err"))" test -s "$tmp/z.st"
    "${mpirun[@]}" -np 2 "$herd" train "${zr[@]}" --checkpoint-dir "$tmp/zk" --checkpoint-every-steps 5 \
      --max-steps 11 >/dev/null 2>&1
    "${mpirun[@]}" -np 2 "$herd" train "${zr[@]}" --checkpoint-dir "$tmp/zk" --resume --save "$tmp/zr.st" \
      >/dev/null 2>&1
    check "--zero 1 on sim resumed at step 11: the uninterrupted weights" cmp -s "$tmp/z.st" "$tmp/zr.st"
    "${mpirun[@]}" -np 2 "$herd" train "${m2[@]}" --device cpu --zero 1 --checkpoint-dir "$tmp/zc" \
      --max-steps 11 >/dev/null 2>&1
    "${mpirun[@]}" -np 2 "$herd" train "${zr[@]}" --checkpoint-dir "$tmp/zc" --resume --save "$tmp/zx.st" \
      >/dev/null 2>&1
    check "--zero 1: written on cpu, resumed on sim: the uninterrupted weights" cmp -s "$tmp/z.st" "$tmp/zx.st"
  fi
  # Pipeline stages on sim: the stages' parameters and state gathered to rank 0 for the
  # file, and scattered back at a resume; with --zero 1 (4 ranks) through each stage's
  # first replica. 512 samples: every batch whole.
  p2=(--model mlp --data synthetic:1,12,12,4,512 --threads 1 --seed 7 --epochs 3 --batch-size 32
      --optimizer adamw --lr 0.002 --quiet --device sim --pipeline-stages 2)
  "${mpirun[@]}" -np 2 "$herd" train "${p2[@]}" --save "$tmp/p.st" >"$tmp/out" 2>"$tmp/err"
  if grep -q "pipeline stages on 'sim' are not supported" "$tmp/err"; then
    skipped_part "--pipeline-stages on sim: pipelines do not run on a device in this build"
  else
    for np in 2 4; do
      extra=() && [ $np = 4 ] && extra=(--zero 1)
      "${mpirun[@]}" -np $np "$herd" train "${p2[@]}" "${extra[@]}" --save "$tmp/p$np.st" >/dev/null 2>&1
      "${mpirun[@]}" -np $np "$herd" train "${p2[@]}" "${extra[@]}" --checkpoint-dir "$tmp/pk$np" \
        --checkpoint-every-steps 5 --max-steps 7 >/dev/null 2>&1
      "${mpirun[@]}" -np $np "$herd" train "${p2[@]}" "${extra[@]}" --checkpoint-dir "$tmp/pk$np" --resume \
        --save "$tmp/pr$np.st" >"$tmp/out" 2>"$tmp/err"
      check "2 stages on $np ranks${extra[*]:+ ${extra[*]}} on sim, resumed at step 7: exits 0 ($(tail -n 1 "$tmp/err"))" \
        test -s "$tmp/pr$np.st"
      check "2 stages on $np ranks${extra[*]:+ ${extra[*]}} on sim, resumed: the uninterrupted weights" \
        cmp -s "$tmp/p$np.st" "$tmp/pr$np.st"
    done
  fi
else
  skipped_part "2 ranks on sim: herd built without MPI, or its launcher missing"
fi
finish
