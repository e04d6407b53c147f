#!/usr/bin/env bash
# A whole host lost mid-training under herd run's supervision, on the test cluster
# (tests/netcluster.sh): node2's link is cut and stays cut, and node2 leaves the host
# discovery. herd run must relaunch the job on node1 alone from the latest checkpoint
# (saved inside the epoch every 20 steps) and training must run again within
# comm-timeout + 30 s of the cut; the job then ends with exit 0 on one rank, one
# restart, at most 20 steps lost. The cut-off rank on node2 must exit too.
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
steps_logged() { local n; n=$(grep -c '"kind":"step"' "$tmp/m.jsonl" 2>/dev/null); echo "${n:-0}"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# The hosts herd run may use: node1, and node2 until it is taken down.
cat >"$tmp/discover" <<EOF
#!/bin/sh
echo node1:1
[ -e "$tmp/node2-gone" ] || echo node2:1
EOF
chmod +x "$tmp/discover"

# Short steps, no evaluation: a collective is pending within milliseconds of the cut.
# The first attempt ends when mpirun notices the lost host (herd run's keepalive, about
# 15 s) or at rank 0's stall timeout (8 s, then the launcher's 10 s grace).
# The epochs (63 steps each) outlast the 80 steps before the cut by far: training stops
# at the cut, so they need not cover the recovery, only leave steps for after it.
timeout_s=8
bound=$((timeout_s + 30))
epochs=40
repeat_pass && epochs=20
nc_exec node1 timeout -k 5 240 "$herd" run -np 2 --min-np 1 --max-restarts 1 \
  --host-discovery "$tmp/discover" --threads-per-rank 1 "${NC_MPI_FLAGS[@]}" -- \
  train --model mlp --data synthetic:1,12,12,4,4000 --batch-size 32 --epochs $epochs \
  --eval-every 0 --quiet --checkpoint-dir "$tmp/ck" --checkpoint-every-steps 20 \
  --metrics "$tmp/m.jsonl" --log-every 10 --stall-warning 5 --comm-timeout $timeout_s \
  >"$tmp/out" 2>"$tmp/err" &
job=$!
# Training under way on both hosts and into its second epoch: rank 0 has written 8 step
# lines (80 steps; slow to come under ASan), so the checkpoint resumed from is one
# saved inside an epoch.
for _ in $(seq 1 900); do
  [ "$(steps_logged)" -ge 8 ] && break
  kill -0 $job 2>/dev/null || break
  sleep 0.1
done
check "training under way before the cut" grep -q '"kind":"step"' "$tmp/m.jsonl"
check "rank 1's herd process found on node2" test -n "$(herd_on node2)"
check "the job is still running before the cut" kill -0 $job
touch "$tmp/node2-gone"
nc_link_down node2
cut=$(now)

# Within comm-timeout + 30 s of the cut: herd run relaunches, and the restarted attempt
# trains (its step lines carry "restarts":1).
relaunch="" first=""
deadline=$(awk -v c="$cut" -v b="$bound" 'BEGIN { printf "%.3f", c + b }')
while awk -v d="$deadline" -v n="$(now)" 'BEGIN { exit !(n < d) }'; do
  [ -z "$relaunch" ] && grep -q '^herd: restart 1/1 ' "$tmp/err" && relaunch=$(since "$cut")
  [ -z "$first" ] && grep -q '"kind":"step".*"restarts":1' "$tmp/m.jsonl" 2>/dev/null && first=$(since "$cut")
  [ -n "$relaunch" ] && [ -n "$first" ] && break
  kill -0 $job 2>/dev/null || break
  sleep 0.1
done
echo "cut -> relaunch: ${relaunch:-none} s; cut -> first step line of the restarted attempt: ${first:-none} s (bound $bound s)"
check "herd run relaunched within comm-timeout + 30 s of the cut" test -n "$relaunch"
check "herd run says it relaunches on 1 rank, on node1" grep -Eq \
  '^herd: restart 1/1 after .*: relaunching on 1 rank\(s\) \(node1:1\)$' "$tmp/err"
check "training ran again on node1 within comm-timeout + 30 s of the cut" test -n "$first"

# The rest of the training on one rank, then exit 0.
timeout 200 tail --pid=$job -f /dev/null
kill -0 $job 2>/dev/null && kill $job
wait $job
rc=$?
check "the job ends with exit 0 ($rc)" test $rc -eq 0
summary=$(grep '^model=' "$tmp/out" | tail -n 1)
echo "summary: $summary"
check "the summary says ranks=1" grep -q ' ranks=1 ' <<<"$summary"
check "the summary says restarts=1" grep -q ' restarts=1 ' <<<"$summary"
lost=$(sed -n 's/.* lost_steps=\([0-9]*\).*/\1/p' <<<"$summary")
check "at most 20 steps (one checkpoint interval) lost (${lost:-none})" test "${lost:-99}" -le 20
recovery=$(sed -n 's/.* recovery_s=\([0-9.]*\).*/\1/p' <<<"$summary")
check "recovery_s within comm-timeout + 30 s (${recovery:-none})" within "${recovery:-999}" $bound
steps=$(sed -n 's/.* steps=\([0-9]*\).*/\1/p' <<<"$summary")
last=$(grep '"kind":"step"' "$tmp/m.jsonl" | tail -n 1 | sed -n 's/.*"step":\([0-9]*\),.*/\1/p')
total=$((epochs * 63)) # 4000 samples, a global batch of 64: 63 steps an epoch
check "the restarted attempt trained to the end: last step line ${last:-none}, steps=${steps:-none} of $total" \
  test "${last:-0}" -eq $total -a "${steps:-0}" -eq $total
grep '^herd: restart' "$tmp/err"

# The cut-off side: rank 1 on node2 ends at its own comm-timeout.
timeout 30 bash -c "while [ -n \"\$(for p in \$(ip netns pids $(nc_field node2 2)); do
  grep -lx herd /proc/\$p/comm 2>/dev/null; done)\" ]; do sleep 0.2; done"
check "rank 1 on the cut-off node2 exited too" test -z "$(herd_on node2)"
[ $fails -eq 0 ] || cat "$tmp/err"
finish
