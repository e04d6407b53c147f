#!/usr/bin/env bash
# A network partition longer than --comm-timeout on the test cluster (tests/netcluster.sh):
# node2's link is cut mid-training under herd run and stays cut. The whole job, launcher
# included, must end non-zero within comm-timeout + 15 s of the cut (the outer timeout
# enforces it), rank 0 must name rank 1 on node2 as unreachable (not as "not yet
# arrived"), and the cut-off rank on node2 must exit too.
set -u
. "$(dirname "$0")/testlib.sh"
. "$here/netcluster.sh"
have_mpi || skip_all "no mpirun (apt-get install openmpi-bin), or herd built without MPI"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
nc_up 2
herd_on() { # herd_on HOST: the PIDs of herd processes on HOST
  local p
  for p in $(nc_pids "$1"); do [ "$(cat /proc/$p/comm 2>/dev/null)" = herd ] && echo "$p"; done
}

# herd run, so that its default launcher settings (keepalive) are what is tested; the
# cluster's own launch settings are --mca pairs it passes on.
nc_hostfile "$tmp/hosts" 1
# Short steps and no evaluation: a collective is pending within milliseconds of the
# cut, so herd's timeout (8 s) comes before mpirun's keepalive notices (10-15 s).
timeout_s=8
nc_exec node1 timeout -k 5 150 "$herd" run -np 2 --hostfile "$tmp/hosts" --threads-per-rank 1 \
  "${NC_MPI_FLAGS[@]}" -- train --model mlp --data synthetic:1,12,12,4,4000 --batch-size 32 --epochs 100000 \
  --eval-every 0 --quiet --metrics "$tmp/m.jsonl" --log-every 20 --stall-warning 5 \
  --comm-timeout $timeout_s >"$tmp/out" 2>"$tmp/err" &
job=$!
# Training under way: rank 0 has written a few step lines (slow to come under ASan).
for _ in $(seq 1 600); do
  [ "$(grep -c '"kind":"step"' "$tmp/m.jsonl" 2>/dev/null)" -ge 3 ] && break
  sleep 0.1
done
check "training under way before the cut" grep -q '"kind":"step"' "$tmp/m.jsonl"
check "rank 1's herd process found on node2" test -n "$(herd_on node2)"
check "the job is still running before the cut" kill -0 $job
nc_link_down node2

# The bound: comm-timeout + 15 s from the cut, for mpirun and everything it started on node1.
timeout $((timeout_s + 15)) tail --pid=$job -f /dev/null
check "the whole job (launcher included) ended within comm-timeout + 15 s of the cut" test $? -eq 0
kill -0 $job 2>/dev/null && kill $job
wait $job
rc=$?
check "job exits non-zero, not by its own timeout ($rc)" test $rc -ne 0 -a $rc -ne 124
check "rank 0 names rank 1 on node2 as unreachable, and why" grep -Eq \
  "^herd: error: rank 0 on host node1: collective #[0-9]+ \(.*\) did not complete within $timeout_s s \(stall timeout\); ranks unreachable: 1 on node2 \(no answer for [0-9]+ s, (last heard at [0-9]{2}:[0-9]{2}:[0-9]{2} UTC|and none before); the network between the hosts may be down, or the process is stopped\); ending the job in 10 s" \
  "$tmp/err"
check "rank 1 is never said not to have arrived" bash -c "! grep -q 'not yet arrived: 1 ' '$tmp/err'"
check "mpirun noticed the lost host (herd run's keepalive)" grep -q "lost communication with a remote daemon" "$tmp/err"
[ $fails -eq 0 ] || cat "$tmp/err"

# The cut-off side: rank 1 ends at its own comm-timeout (after the launcher's grace),
# with node2 still cut off from node1.
timeout 30 bash -c "while [ -n \"\$(for p in \$(ip netns pids $(nc_field node2 2)); do
  grep -lx herd /proc/\$p/comm 2>/dev/null; done)\" ]; do sleep 0.2; done"
check "rank 1 on the cut-off node2 exited too" test -z "$(herd_on node2)"
finish
