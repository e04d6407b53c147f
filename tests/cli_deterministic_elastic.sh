#!/usr/bin/env bash
# --deterministic under herd run --max-restarts --elastic-batch keep (docs/determinism.md):
# lenet5 and mlp, a global batch of 96 (12 slices of 8) started on 4 ranks x 24; a rank killed with
# kill -9 once a checkpoint is published, discovery then offering 3 slots (3 x 16 x 2), and
# again once the 3 ranks published one, offering 2 (2 x 24 x 2). The job ends 0 after 2
# restarts on the weights of one process trained without a stop, byte for byte
# (cli_deterministic shows that without the flag even 2 ranks do not). A repeat pass
# (testlib.sh) kills once, to 3 ranks, in 50 steps. The job sleeps 50 ms a step (no CPU:
# HERD_TEST_STEP_DELAY_MS), or beside the other passes a kill could land after it ended.
set -u
. "$(dirname "$0")/testlib.sh"
have_mpi || skip_all "herd built without MPI, or its launcher (HERD_MPIEXEC, set by ctest) missing"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
seed_random
samples=9600 K=2 ranks="4, 3 and 2 ranks" # 100 steps of 96, two kills
repeat_pass && samples=4800 K=1 ranks="4 and 3 ranks"
run=("$herd" run --mpirun "$HERD_MPIEXEC" --threads-per-rank 1)
common=(--data "synthetic:1,28,28,10,$samples" --test-samples 96 --epochs 1 --seed 5
        --lr 0.05 --momentum 0.9 --eval-every 0 --threads 1 --quiet)
# The step of the latest checkpoint in DIR.
latest() { sed -n 's/^ckpt-\([0-9]*\)$/\1/p' "$1/latest" 2>/dev/null; }
# kill_in DIR ATTEMPT FILE SUP: once that attempt has published a checkpoint of its own (one
# newer than the latest when it first recorded a step: the one it resumed from), creates
# FILE (discovery then offers fewer slots) and kills one of its ranks at random (kill_rank,
# while herd run SUP runs); false after 120 s. Checkpoints every 2 steps leave the kill most of the run: waiting for a
# step past the first checkpoint after the first step this loop saw raced a fast job to
# its end (under MPICH beside the other passes, 30 steps ended before a kill).
kill_in() {
  local t base="" ck pids
  for t in $(seq 1 6000); do
    ck=$(latest "$1")
    if [ -z "$base" ] && [ -n "$(progress "$1" "$2")" ]; then base=${ck:-0}; fi
    [ -n "$base" ] && [ -n "$ck" ] && [ "$ck" -gt "$base" ] && break
    sleep 0.02
  done
  [ "$t" -lt 6000 ] || return 1
  touch "$3"
  kill_rank 9 "$1" "$4"
}
# elastic MODEL DIR FLAGS...: the job on 4 slots, then 3, then 2, killed K times; sets rc (the
# job's exit status) and killed (the kills sent).
elastic() {
  local model=$1 dir=$2; shift 2
  cat >"$dir.discover" <<DISC
#!/bin/sh
if [ -e "$dir.two" ]; then echo localhost:2; elif [ -e "$dir.three" ]; then echo localhost:3; else echo localhost:4; fi
DISC
  chmod +x "$dir.discover"
  HERD_TEST_STEP_DELAY_MS=50 timeout 500 "${run[@]}" -np 4 --min-np 2 --max-restarts $K \
    --host-discovery "$dir.discover" --elastic-batch keep -x HERD_TEST_STEP_DELAY_MS -- train --model "$model" "${common[@]}" --batch-size 24 --checkpoint-dir "$dir" \
    --checkpoint-every-steps 2 --save "$dir.st" "$@" >"$dir.out" 2>"$dir.err" &
  local sup=$!
  killed=0
  kill_in "$dir" 1 "$dir.three" $sup && killed=1
  [ $K -gt 1 ] && kill_in "$dir" 2 "$dir.two" $sup && killed=2
  wait $sup
  rc=$?
}

for model in lenet5 mlp; do
  "$herd" train --model $model "${common[@]}" --batch-size 8 --grad-accum 12 --deterministic \
    --save "$tmp/$model.st" >/dev/null 2>&1
  check "$model, one process x 12 micro-batches of 8, --deterministic: exit 0" test $? -eq 0
  d=$tmp/$model.job
  elastic $model "$d" --deterministic
  check "$model: $K kills sent while training ($killed)" test "$killed" -eq $K
  check "$model: the job ends 0 ($rc)" test "$rc" -eq 0
  check "$model: herd run restarted it $K times" test "$(grep -c "^herd: restart [0-9]*/$K " "$d.err")" -eq $K
  check "$model: restart 1 relaunches on 3 ranks" grep -q "^herd: restart 1/$K .*relaunching on 3 rank" "$d.err"
  check "$model: the global batch 96 kept as 3 x 16 x 2" grep -q 'global batch 96 kept as 3 x 16 x 2' "$d.err"
  if [ $K -gt 1 ]; then
    check "$model: restart 2 relaunches on 2 ranks" grep -q "^herd: restart 2/$K .*relaunching on 2 rank" "$d.err"
    check "$model: the global batch 96 kept as 2 x 24 x 2" grep -q 'global batch 96 kept as 2 x 24 x 2' "$d.err"
  fi
  grep '^herd: warning: restart [0-9]*: resumed at step' "$d.err"
  check "$model: train resumed $K times from a checkpoint" \
    test "$(grep -c '^herd: warning: restart [0-9]*: resumed at step [1-9]' "$d.err")" -eq $K
  check "$model on $ranks: the one-process weights byte for byte" cmp "$tmp/$model.st" "$d.st"
  [ $fails -eq 0 ] || tail -n 30 "$d.err"
done
finish
