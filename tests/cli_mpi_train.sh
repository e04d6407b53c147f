#!/usr/bin/env bash
# Data-parallel training through the CLI under mpirun: a 2-rank run, an uneven last
# batch, herd eval over 2 ranks as one process, the configuration mismatch checks, a killed rank, and the bench's scaling
# figures. Every mpirun runs under timeout, so a hang fails the test instead of CI.
set -u
. "$(dirname "$0")/testlib.sh"
have_mpi || skip_all "herd built without MPI, or its launcher (HERD_MPIEXEC, set by ctest) missing"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun=("${mpiexec[@]}")
# 500 samples, 2 ranks x 64: the last step's 116 samples are split 58 + 58.
data="synthetic:1,12,12,4,500"
common=(--model mlp --data "$data" --threads 1 --eval-every 1)

timeout 120 "${mpirun[@]}" -np 2 "$herd" train "${common[@]}" --epochs 2 --batch-size 64 \
  --check-replicas --log-every 1 --save "$tmp/w2.st" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "2-rank training exits 0 (uneven last batch, replicas checked)" test $rc -eq 0
check "one summary line, from rank 0" test "$(grep -c 'test_acc=' "$tmp/out")" -eq 1
check "summary says ranks=2" grep -q "ranks=2" "$tmp/out"
check "progress printed once per epoch" test "$(grep -c '^epoch 2/2  ' "$tmp/err")" -eq 1
check "steps per epoch are 4 (500 / 128, last batch kept)" grep -q "step 4/4" "$tmp/err"
acc=$(sed -n 's/.*test_acc=\([0-9.]*\).*/\1/p' "$tmp/out")
check "2 ranks learn the synthetic classes (test_acc=$acc)" awk -v a="$acc" 'BEGIN { exit !(a > 0.9) }'

# herd eval under mpirun: each rank evaluates its part; rank 0 prints one line, the
# whole split's figures as one process gives them.
"$herd" eval --model mlp --data "$data" --threads 1 --checkpoint "$tmp/w2.st" >"$tmp/e1" 2>&1
timeout 60 "${mpirun[@]}" -np 2 "$herd" eval --model mlp --data "$data" --threads 1 \
  --checkpoint "$tmp/w2.st" >"$tmp/e2" 2>&1
check "eval on 2 ranks: exit 0, one summary line" \
  bash -c "test $? -eq 0 && test \$(grep -c 'samples=' '$tmp/e2') -eq 1"
check "eval on 2 ranks: the samples, loss and accuracy of one process ($(cat "$tmp/e1") vs $(grep samples= "$tmp/e2"))" \
  python3 -c '
import re, sys
a, b = (dict(re.findall(r"(\w+)=(\S+)", open(p).read())) for p in sys.argv[1:])
assert a["samples"] == b["samples"] and abs(float(a["loss"]) - float(b["loss"])) <= 1e-4 \
    and a["acc"] == b["acc"], (a, b)' "$tmp/e1" "$tmp/e2"

for wire in fp16 bf16; do
  timeout 120 "${mpirun[@]}" -np 2 "$herd" train "${common[@]}" --epochs 2 --batch-size 32 \
    --compress $wire --grad-accum 2 --lr-scaling linear --check-replicas --quiet >"$tmp/out" 2>"$tmp/err"
  rc=$?
  acc=$(sed -n 's/.*test_acc=\([0-9.]*\).*/\1/p' "$tmp/out")
  check "--compress $wire --grad-accum 2 --lr-scaling: trains, replicas identical (test_acc=$acc)" \
    awk -v a="$acc" -v rc=$rc 'BEGIN { exit !(rc == 0 && a > 0.9) }'
done

start=$(date +%s)
timeout 60 "${mpirun[@]}" -np 1 "$herd" train "${common[@]}" --batch-size 32 : \
  -np 1 "$herd" train "${common[@]}" --batch-size 64 >"$tmp/out" 2>"$tmp/err"
rc=$?
took=$(( $(date +%s) - start ))
check "mismatched flags: non-zero exit" test $rc -ne 0 -a $rc -ne 124
check "mismatched flags: ended within 10 s (took ${took}s)" test "$took" -le 10
check "mismatched flags: names the rank and the field" grep -q "rank 1 has batch_size=64" "$tmp/err"

# The timeline is collective: on one rank only it is refused at start, not a hang.
timeout 60 "${mpirun[@]}" -np 1 "$herd" train "${common[@]}" --timeline "$tmp/trace.json" : \
  -np 1 "$herd" train "${common[@]}" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "--timeline on rank 0 only: non-zero exit, no hang" test $rc -ne 0 -a $rc -ne 124
check "--timeline on rank 0 only: names the rank and the field" grep -q "rank 1 has timeline=0" "$tmp/err"

# A rank killed with SIGKILL mid-training ends the whole job, non-zero, within 30 s.
# The ranks are found by this run's own file name: make test runs this script in several
# builds at once, and a pattern shared with another run's ranks once killed those.
# Not under the sanitizers: what the launcher does, and the killed rank checks no leaks;
# its peer's 2 s of training reach no line of herd's code that the pass's other tests do
# not (clang's coverage of each process, 2026-12-07: tests/repeat_passes.txt).
if ! sanitizer_pass; then
timeout 120 "${mpirun[@]}" -np 2 "$herd" train --model lenet5 --data synthetic:1,28,28,10,20000 \
  --epochs 100 --threads 1 --quiet --save "$tmp/victim.st" >"$tmp/out" 2>"$tmp/err" &
job=$!
victim="" ranks=""
for _ in $(seq 1 100); do
  ranks=$(pgrep -f -- "$tmp/victim.st" | while read -r p; do
            [ "$(cat /proc/$p/comm 2>/dev/null)" = herd ] && echo "$p"; done)
  victim=$(echo "$ranks" | tail -n 1)
  [ "$(echo "$ranks" | grep -c .)" -ge 2 ] && break
  sleep 0.1
done
sleep 2
start=$(date +%s)
kill -9 "$victim" 2>/dev/null
wait "$job"
rc=$?
took=$(( $(date +%s) - start ))
check "killed rank: job exits non-zero" test $rc -ne 0 -a $rc -ne 124
check "killed rank: job ended within 30 s (took ${took}s)" test "$took" -le 30
# Hydra names a process, not the rank: the victim, or its peer when that one died first
# (under MPICH's UCX a single copy to the killed rank aborts the peer: seen in make test).
named() {
  local pid
  pid=$(sed -n 's/.*PID \([0-9]*\) RUNNING AT .*/\1/p' "$tmp/out" "$tmp/err" | head -n 1)
  [ -n "$pid" ] && echo "$ranks" | grep -qx "$pid"
}
if "$herd" --version | grep -q "MPI: MPICH"; then
  check "killed rank: Hydra names one of the job's processes" named
else
  check "killed rank: the launcher names the rank" grep -q "rank [0-9]* .*exited on signal 9" "$tmp/err"
fi
# Once seen failing in a loaded run (the job over 0 s after the kill, Hydra naming no
# PID): what the launcher said then, for the next time.
[ "$fails" -eq 0 ] || { echo "victim $victim, rc $rc; the job's output:"; tail -n 20 "$tmp/out" "$tmp/err"; }
fi

timeout 120 "${mpirun[@]}" -np 2 "$herd" bench train --model lenet5 --data synthetic:1,28,28,10,2048 \
  --steps 4 --warmup 1 --batch-size 64 >"$tmp/out" 2>"$tmp/err"
check "bench under mpirun exits 0" test $? -eq 0
check "bench reports scaling and exposed communication" \
  bash -c "grep -q 'scaling_efficiency=' '$tmp/out' && grep -q 'comm_wait_ms=' '$tmp/out' && grep -q 'ranks=2' '$tmp/out'"

finish
