#!/usr/bin/env bash
# The stall inspector and failure handling under mpirun (a late rank, one that never
# joins, one stopped, one killed, one that leaves early): tests/mpi_faults.sh MPI_FAULTS_BINARY
set -u
prog=$1
. "$(dirname "$0")/testlib.sh" # the launcher, "${mpiexec[@]}", and $tmp
[ ${#mpiexec[@]} -gt 0 ] || skip_all "herd's MPI launcher (HERD_MPIEXEC, set by ctest) is not set"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
out=$tmp/out
fail() { echo "FAIL: $*"; echo "--- output:"; cat "$out"; exit 1; }
# Runs mpirun -np $1 $prog $2 [$3] under timeout 60; sets rc and secs.
run() {
  local start=$(date +%s.%N)
  timeout 60 "${mpiexec[@]}" -np "$1" "$prog" "${@:2}" >"$out" 2>&1
  rc=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc)
}

# Rank 1 computes 3 s before joining; warnings after 1 s, and the job completes.
run 3 warn
[ $rc -eq 0 ] || fail "warn: exit $rc"
grep -Eq "herd: warning: collective #2 \(allreduce 'bucket 3', 4000 bytes\) pending for [0-9]+ s on rank 0; ranks not yet arrived: 1 on [^ ]+ \(last: 'epoch 1 step 2: forward' [0-9]+ s ago\)$" "$out" \
  || fail "warn: rank 0's report naming rank 1"
[ "$(grep -c 'on rank 0; ranks not yet arrived' "$out")" -eq 1 ] || fail "warn: one report only"
grep -Eq "herd: warning: rank 2 on host .*: collective #2 .* pending for [0-9]+ s; ranks not yet arrived: 1 (on|\()" "$out" \
  || fail "warn: rank 2's own warning, naming rank 1"
echo "warn: ok (${secs} s)"

# Rank 1 never joins: the job ends within ~10 s, naming rank 1.
run 2 timeout
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "timeout: exit $rc"
(( $(echo "$secs < 15" | bc) )) || fail "timeout: took $secs s"
grep -q "herd: error: rank 0 on host .*: collective #2 .*did not complete within 3 s (stall timeout); ranks not yet arrived: 1 on .*epoch 1 step 2: forward" "$out" \
  || fail "timeout: message naming rank 1"
echo "timeout: ok, mpirun exit $rc after ${secs} s"

# The same with a blocking collective, which the waiting ranks run on their own thread
# (the communication thread idle): they serve the stall inspector themselves.
run 3 warn blocking
[ $rc -eq 0 ] || fail "warn blocking: exit $rc"
grep -Eq "herd: warning: collective #2 \(allreduce_f64 'metrics', 8000 bytes\) pending for [0-9]+ s on rank 0; ranks not yet arrived: 1 on [^ ]+ \(last: 'epoch 1 step 2: forward' [0-9]+ s ago\)$" "$out" \
  || fail "warn blocking: rank 0's report naming rank 1"
grep -Eq "herd: warning: rank 2 on host .*: collective #2 .* pending for [0-9]+ s; ranks not yet arrived: 1 (on|\()" "$out" \
  || fail "warn blocking: rank 2's own warning, naming rank 1"
echo "warn blocking: ok (${secs} s)"
run 2 timeout blocking
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "timeout blocking: exit $rc"
(( $(echo "$secs < 15" | bc) )) || fail "timeout blocking: took $secs s"
grep -q "herd: error: rank 0 on host .*: collective #2 (allreduce_f64 'metrics', 8000 bytes) did not complete within 3 s (stall timeout); ranks not yet arrived: 1 on .*epoch 1 step 2: forward" "$out" \
  || fail "timeout blocking: message naming rank 1"
echo "timeout blocking: ok, mpirun exit $rc after ${secs} s"

# Rank 0 stops (SIGSTOP): rank 1 names it and ends the job at the timeout (6 s).
run 2 stop0
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "stop0: exit $rc"
(( $(echo "$secs < 15" | bc) )) || fail "stop0: took $secs s"
# Rank 0 may have asked rank 1 for its status before it stopped (a slow first collective).
grep -Eq "herd: warning: rank 1 on host .*: collective #2 .* ranks unreachable: 0 on .* \(no answer for [0-9]+ s, (last heard at [0-9:]+ UTC|and none before); on this host, so the process is stopped or hung\)$" "$out" \
  || fail "stop0: rank 1's warning naming rank 0"
grep -Eq "herd: error: rank 1 on host .*: collective #2 .*did not complete within 6 s \(stall timeout\); ranks unreachable: 0 on .* \(no answer for [0-9]+ s, (last heard at [0-9:]+ UTC|and none before); on this host, so the process is stopped or hung\); ending the job$" "$out" \
  || fail "stop0: rank 1's abort naming rank 0"
echo "stop0: ok, mpirun exit $rc after ${secs} s"

# A rank that frees its communicator (its program ends) while the others start another
# collective: rank 0 ends the job at once, naming it, not after the 30 s timeout.
# ended NAME SECS [PATTERN]: the job ended non-zero (not timeout's 124) within SECS, its
# output matching PATTERN.
ended() {
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "$1: exit $rc"
  (( $(echo "$secs < $2" | bc) )) || fail "$1: took $secs s"
  [ -z "${3:-}" ] || grep -Eq "$3" "$out" || fail "$1: the message"
  echo "$1: ok, mpirun exit $rc after ${secs} s"
}
run 3 leave
ended leave 15 "herd: error: rank 0 on host .*: rank 1 on .* left the job after 1 collectives .* while rank [02] waits for it in collective #2 \(allreduce 'bucket 3', 4000 bytes\), which cannot complete"
run 2 leave0
ended leave0 15 "herd: error: rank 0 on host .*: rank 0 on .* left the job after 1 collectives .* while rank 1 waits for it in collective #2"

# Rank 1 is killed: mpirun must end the job, non-zero, within 30 s.
run 2 kill
ended kill 30
