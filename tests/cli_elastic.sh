#!/usr/bin/env bash
# Fault-tolerant runs under herd run --max-restarts, on this machine:
#  - a random rank killed with kill -9 at random moments, 10 times in one job (3 in a
#    repeat pass, testlib.sh): the job ends 0 with the weights of a run never stopped,
#    bit for bit (resuming is bitwise), and each failure loses at most the steps since
#    the last checkpoint;
#  - a rank killed in the middle of a checkpoint's background write: the restart uses
#    the previous complete checkpoint and ends on the same weights;
#  - elastic: 4 ranks, one killed, the discovery command then offers 3: the global batch
#    (64) does not split over 3, so the job goes on with 2 and the batch kept, and ends as
#    a resume by hand on 2 ranks with --grad-accum 2 from the same checkpoint;
#  - elastic pipelines: 2 pipelines of 2 stages, one rank killed, 3 slots offered: the
#    restart runs one whole pipeline with the global batch kept.
# Every job runs under timeout.
set -u
. "$(dirname "$0")/testlib.sh"
have_mpi || skip_all "herd built without MPI, or its launcher (HERD_MPIEXEC, set by ctest) missing"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
seed_random
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" "$2" | tail -n 1; }
run=("$herd" run --mpirun "$HERD_MPIEXEC" --threads-per-rank 1)
# The jobs this test kills sleep 20 ms a step (no CPU): alone a job here trained 315 steps
# in under 4 s, and under MPICH beside the other passes jobs ended before the polling
# below sent their kills (which can lag a second there: about 50 steps at this pace).
slow=(-x HERD_TEST_STEP_DELAY_MS)
delay=(env HERD_TEST_STEP_DELAY_MS=20)
# wait_step DIR ATTEMPT [AHEAD]: waits until that attempt has trained a step, then
# AHEAD more steps; false after 60 s.
wait_step() {
  local t first="" now
  for t in $(seq 1 3000); do
    now=$(progress "$1" "$2")
    [ -z "$first" ] && first=$now
    [ -n "$now" ] && [ "$now" -ge $((first + ${3:-0})) ] && return 0
    sleep 0.02
  done
  return 1
}

# 1. Ten kills, each after a random number (0-29) of steps into an attempt, of a random
# rank. 2016 samples, global batch 32: 63 steps per epoch, 16 epochs: more steps than
# ten attempts take, each up to 29 steps and the polling's lag. A repeat pass (sanitizers,
# MPICH) kills 3 times in 5 epochs: the same paths.
S=20 K=10 epochs=16
repeat_pass && K=3 epochs=5
job=(train --model lenet5 --data synthetic:1,28,28,10,2016 --test-samples 400 --threads 1 --seed 3 --epochs $epochs --batch-size 16
     --lr 0.01 --eval-every 0 --quiet)
timeout 300 "${run[@]}" -np 2 -- "${job[@]}" --save "$tmp/ref.st" >"$tmp/ref.out" 2>"$tmp/ref.err"
check "the run never stopped: exits 0" test $? -eq 0
timeout 600 "${delay[@]}" "${run[@]}" -np 2 --max-restarts $K "${slow[@]}" -- "${job[@]}" --checkpoint-dir "$tmp/k" \
  --checkpoint-every-steps $S --save "$tmp/k.st" >"$tmp/k.out" 2>"$tmp/k.err" &
sup=$!
killed=0
for i in $(seq 1 $K); do
  wait_step "$tmp/k" "$i" $((RANDOM % 30)) || break
  kill_rank 9 "$tmp/k" $sup || break
  killed=$((killed + 1))
done
wait $sup
rc=$?
check "$K kills sent while training ($killed)" test "$killed" -eq $K
check "the job ends 0 after $K restarts ($rc)" test $rc -eq 0
check "herd run restarted it $K times" test "$(grep -c "^herd: restart [0-9]*/$K " "$tmp/k.err")" -eq $K
check "the summary says restarts=$K" test "$(field restarts "$tmp/k.out")" = $K
check "the never-stopped run's weights, bit for bit" cmp -s "$tmp/ref.st" "$tmp/k.st"
# Each restart's lost steps, as train logs them.
lost=$(sed -n 's/^herd: warning: restart [0-9]*: resumed at step [0-9]*: \([0-9]*\) step(s) lost.*/\1/p' "$tmp/k.err" |
       sort -n | tail -n 1)
echo "most steps lost by one failure: $lost; in all: $(field lost_steps "$tmp/k.out")"
check "train logged $K restarts" test "$(grep -c '^herd: warning: restart [0-9]*: resumed at step' "$tmp/k.err")" -eq $K
# A kill during a checkpoint's background write loses the steps trained meanwhile too.
check "no failure lost more than $S steps, plus a write's ($lost)" test "${lost:-999}" -le $((2 * S))
[ $fails -eq 0 ] || tail -n 30 "$tmp/k.err"

# 2. Killed in the middle of step 40's weights file (the 4th write: 3 per checkpoint),
# in the first attempt only: the restart resumes from step 20. This and 2b train 120
# steps (--max-steps), against a never-stopped run of 120.
short=("${job[@]}" --max-steps 120)
timeout 300 "${run[@]}" -np 2 -- "${short[@]}" --save "$tmp/ref120.st" >/dev/null 2>"$tmp/ref120.err"
check "the run never stopped, 120 steps: exits 0" test $? -eq 0
HERD_TEST_KILL_IN_WRITE=4 timeout 300 "${run[@]}" -np 2 --max-restarts 1 -x HERD_TEST_KILL_IN_WRITE -- \
  "${short[@]}" --checkpoint-dir "$tmp/w" --checkpoint-every-steps $S --save "$tmp/w.st" \
  >"$tmp/w.out" 2>"$tmp/w.err"
check "killed in a background write: the job ends 0 after 1 restart" \
  test $? -eq 0 -a "$(field restarts "$tmp/w.out")" = 1
check "killed in a background write: resumed from step 20" grep -q 'restart 1: resumed at step 20:' "$tmp/w.err"
check "killed in a background write: the never-stopped run's weights" cmp -s "$tmp/ref120.st" "$tmp/w.st"

# 2b. A rank stopped (SIGSTOP) hangs the job: past --comm-timeout herd ends it, naming
# the rank, and herd run relaunches it from the last checkpoint.
timeout 300 "${delay[@]}" "${run[@]}" -np 2 --max-restarts 1 "${slow[@]}" -- "${short[@]}" --checkpoint-dir "$tmp/h" \
  --checkpoint-every-steps $S --stall-warning 1 --comm-timeout 3 --save "$tmp/h.st" >"$tmp/h.out" 2>"$tmp/h.err" &
sup=$!
wait_step "$tmp/h" 1 $((RANDOM % 30))
kill_rank STOP "$tmp/h" $sup
wait $sup
rc=$?
check "hung rank: the job ends 0 after 1 restart ($rc)" test $rc -eq 0 -a "$(field restarts "$tmp/h.out")" = 1
check "hung rank: herd run names the stalled rank" grep -Eq '^herd: restart 1/1 after rank [01] on [^ ]+ \((unreachable at|stalled past) the stall timeout\)' "$tmp/h.err"
check "hung rank: the never-stopped run's weights" cmp -s "$tmp/ref120.st" "$tmp/h.st"
[ $fails -eq 0 ] || tail -n 30 "$tmp/h.err"

# 3. Elastic: 4 ranks x 16 (global batch 64); a rank killed once training is under way,
# and discovery then offers 3 slots: 64 does not split over 3 (train would refuse it), so
# herd run relaunches on 2. A resume by hand on 2 ranks from the checkpoint the restart
# used (made again: 4 ranks trained to that step) ends on the same weights.
cat >"$tmp/discover" <<DISC
#!/bin/sh
if [ -e "$tmp/two" ]; then echo localhost:3; else echo localhost:4; fi
DISC
chmod +x "$tmp/discover"
el=(train --model mlp --data synthetic:1,12,12,4,2000 --threads 1 --seed 5 --epochs 3 --batch-size 16
    --lr 0.01 --eval-every 0)
# 60 ms a step: at 20 ms this job's 60 steps once ended before the kill under MPICH
# beside the other passes (2026-11-28).
timeout 300 env HERD_TEST_STEP_DELAY_MS=60 "${run[@]}" -np 4 --min-np 2 --max-restarts 1 --host-discovery "$tmp/discover" "${slow[@]}" -- \
  "${el[@]}" --checkpoint-dir "$tmp/e" --checkpoint-every-steps 5 --save "$tmp/e.st" \
  >"$tmp/e.out" 2>"$tmp/e.err" &
sup=$!
# Killed once a checkpoint is published (under ASan the first steps are slow, and a kill
# before it would test a restart from scratch instead).
for t in $(seq 1 3000); do [ -e "$tmp/e/latest" ] && break; sleep 0.02; done
wait_step "$tmp/e" 1 1
touch "$tmp/two"
kill_rank 9 "$tmp/e" $sup
wait $sup
rc=$?
check "elastic: the job ends 0 ($rc)" test $rc -eq 0
check "elastic: 3 slots offered, relaunched on 2 ranks" grep -q '^herd: restart 1/1 .*relaunching on 2 rank' "$tmp/e.err"
check "elastic: ... saying why" grep -q 'does not split into whole micro-batches over 3 rank(s); over 2 it does' "$tmp/e.err"
check "elastic: the global batch 64 kept as 2 x 16 x 2" grep -q 'global batch 64 kept as 2 x 16 x 2' "$tmp/e.err"
check "elastic: ranks=2 in the summary" test "$(field ranks "$tmp/e.out")" = 2
from=$(sed -n 's/^herd: warning: restart 1: resumed at step \([0-9]*\):.*/\1/p' "$tmp/e.err")
echo "the restart resumed at step ${from:-?}"
if [ -n "$from" ] && [ "$from" -gt 0 ]; then
  timeout 300 "${mpiexec[@]}" -np 4 "$herd" "${el[@]}" --quiet --checkpoint-dir "$tmp/e-hand" \
    --max-steps "$from" >/dev/null 2>&1
  timeout 300 "${mpiexec[@]}" -np 2 "$herd" "${el[@]}" --grad-accum 2 --checkpoint-dir "$tmp/e-hand" \
    --resume --quiet --save "$tmp/hand.st" >/dev/null 2>&1
fi
check "elastic: a resume by hand on 2 ranks with --grad-accum 2 ends on the same weights" \
  cmp -s "$tmp/e.st" "$tmp/hand.st"
[ $fails -eq 0 ] || tail -n 30 "$tmp/e.err"

# 4. Elastic pipelines: 4 ranks as 2 pipelines of 2 stages (global batch 32); a rank killed
# and discovery then offering 3 slots: the restart runs whole pipelines only (2 ranks, not
# the 3 train would refuse) and keeps the global batch as 1 x 16 x 2. The first attempt,
# at the size the batch was given for, is no elastic fit at all.
cat >"$tmp/discover-pp" <<DISC
#!/bin/sh
if [ -e "$tmp/three" ]; then echo localhost:3; else echo localhost:4; fi
DISC
chmod +x "$tmp/discover-pp"
timeout 300 "${delay[@]}" "${run[@]}" -np 4 --min-np 2 --max-restarts 1 --host-discovery "$tmp/discover-pp" "${slow[@]}" -- \
  train --model mlp --data synthetic:1,12,12,4,2000 --threads 1 --seed 5 --epochs 2 --batch-size 16 \
  --lr 0.01 --eval-every 0 --pipeline-stages 2 --checkpoint-dir "$tmp/p" --checkpoint-every-steps 5 \
  >"$tmp/p.out" 2>"$tmp/p.err" &
sup=$!
for t in $(seq 1 3000); do [ -e "$tmp/p/latest" ] && break; sleep 0.02; done
wait_step "$tmp/p" 1 1
touch "$tmp/three"
kill_rank 9 "$tmp/p" $sup
wait $sup
rc=$?
check "elastic pipelines: the job ends 0 ($rc)" test $rc -eq 0
check "elastic pipelines: 3 slots relaunch 2 ranks (whole pipelines)" \
  grep -q '^herd: restart 1/1 .*relaunching on 2 rank' "$tmp/p.err"
check "elastic pipelines: the first attempt keeps its own batch (no elastic fit)" \
  bash -c "[ \$(grep -c 'elastic: ' '$tmp/p.err') -eq 1 ]"
check "elastic pipelines: the global batch 32 kept as 1 x 16 x 2" \
  grep -q 'global batch 32 kept as 1 x 16 x 2' "$tmp/p.err"
[ $fails -eq 0 ] || tail -n 30 "$tmp/p.err"
finish
