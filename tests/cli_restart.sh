#!/usr/bin/env bash
# herd run --max-restarts: usage errors refused before anything starts; --host-discovery
# parsed strictly (each bad line named), a failing or hanging command; --dry-run's
# appended flags; the supervisor driven through a fake Open MPI launcher (failures read
# from its stderr, restarts, resizing from discovery and a re-read hostfile, --min-np
# waiting, no restart after a set-up failure, a usage error or SIGTERM); then real
# jobs under herd's MPI: a rank killed with kill -9 and resumed, every attempt killed,
# a set-up failure. Every launch of real ranks runs under timeout.
set -euo pipefail
. "$(dirname "$0")/testlib.sh"
export FAKE_DIR=$tmp
ck=$tmp/ck
train=(train --model mlp --checkpoint-dir "$ck")

# A stand-in for Open MPI's mpirun: says it is one, appends its arguments to calls,
# and runs line k+1 of plan for attempt k (HERD_RUN_RESTARTS, as herd run exports it).
fake=$tmp/fake-mpirun
cat >"$fake" <<'EOF'
#!/usr/bin/env bash
[ "${1:-}" = --version ] && { echo "mpirun (Open MPI) 4.1.4"; exit 0; }
k=$(printf '%s\n' "$@" | sed -n 's/^HERD_RUN_RESTARTS=//p')
echo "$*" >>"$FAKE_DIR/calls"
eval "$(sed -n "$((k + 1))p" "$FAKE_DIR/plan")"
EOF
chmod +x "$fake"
plan() { printf '%s\n' "$@" >"$tmp/plan"; : >"$tmp/calls"; }
killed='echo "mpirun noticed that process rank 1 with PID 42 on node n1 exited on signal 9 (Killed)." >&2; exit 137'
sup() { # sup ARGS...: herd run through the fake launcher; rc, out, err
  rc=0
  "$herd" run --mpirun "$fake" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
}
err_has() { grep -q -e "$1" "$tmp/err"; }
calls() { wc -l <"$tmp/calls"; }

# ---- Usage errors: exit 2, a word of the message, nothing launched ----
usage() { # usage NAME WORD ARGS...
  local name=$1 word=$2; shift 2
  plan 'exit 0'
  sup "$@"
  check "$name: exit 2 ($rc)" test "$rc" -eq 2
  check "$name: says '$word'" err_has "$word"
  check "$name: nothing launched" test "$(calls)" -eq 0
}
usage "--max-restarts with eval" "train" -np 2 --max-restarts 1 -- eval --model mlp
usage "--max-restarts without --checkpoint-dir" "checkpoint-dir" -np 2 --max-restarts 1 -- train --model mlp
usage "--max-restarts -1" "max-restarts" -np 2 --max-restarts -1 -- "${train[@]}"
usage "--max-restarts x" "max-restarts" -np 2 --max-restarts x -- "${train[@]}"
usage "--max-restarts 10001" "from 0 to 10000" -np 2 --max-restarts 10001 -- "${train[@]}"
usage "--min-np above --max-np" "above --max-np" -np 2 --max-restarts 1 --min-np 3 --max-np 2 -- "${train[@]}"
usage "-np above --max-np" "outside" -np 4 --max-restarts 1 --max-np 3 -- "${train[@]}"
usage "-np below --min-np" "outside" -np 1 --max-restarts 1 --min-np 2 --max-np 4 -- "${train[@]}"
usage "--min-np above -H's slots" "min-np 3 is more than the 2 slot(s) -H offers" -np 3 -H a:1,b:1 \
  --max-restarts 1 --min-np 3 --max-np 4 -- "${train[@]}"
usage "-np above -H's slots" "np 3 is more than the 2 slot(s)" -np 3 -H a:1,b:1 --max-restarts 1 --min-np 1 -- "${train[@]}"
printf 'a slots=2\n' >"$tmp/hosts"
usage "--min-np above the hostfile's slots" "more than the 2 slot(s) the hostfile" -np 3 --hostfile "$tmp/hosts" --max-restarts 1 --min-np 3 \
  --max-np 3 -- "${train[@]}"
usage "--min-np 0" "min-np" -np 2 --max-restarts 1 --min-np 0 -- "${train[@]}"
usage "--elastic-batch grow" "keep or scale" -np 2 --max-restarts 1 --elastic-batch grow -- "${train[@]}"
usage "--elastic-timeout -1" "elastic-timeout" -np 2 --max-restarts 1 --elastic-timeout -1 -- "${train[@]}"
usage "--host-discovery with -H" "without -H" -np 2 -H a:2 --max-restarts 1 --host-discovery 'echo a:2' \
  -- "${train[@]}"
for flag in "--min-np 1" "--max-np 2" "--host-discovery true" "--elastic-timeout 5" "--elastic-batch keep"; do
  set -- $flag
  usage "$1 without --max-restarts" "goes with --max-restarts" -np 2 "$1" "$2" -- "${train[@]}"
done

# ---- --dry-run: the first attempt's command, nothing started ----
plan 'exit 0'
sup --dry-run -np 2 --max-restarts 2 -- train --model mlp --checkpoint-dir="$ck"
check "dry run: exit 0" test "$rc" -eq 0
check "dry run: --resume --elastic-batch keep --elastic-ranks 2 appended" \
  err_has "train --model mlp --checkpoint-dir=$ck --threads [0-9]* --resume --elastic-batch keep --elastic-ranks 2\$"
check "dry run: HERD_RUN_RESTARTS=0 and HERD_RUN_SUPERVISED=1 exported" \
  err_has "-x HERD_RUN_RESTARTS=0 -x HERD_RUN_SUPERVISED=1 "
check "dry run: nothing launched" test "$(calls)" -eq 0
check "dry run: the ranks left after a death killed at once (odls_base_sigkill_timeout 0)" \
  err_has "--mca odls_base_sigkill_timeout 0 "
sup --dry-run -np 2 --max-restarts 2 --mca odls_base_sigkill_timeout 3 -- "${train[@]}"
check "dry run: the user's odls_base_sigkill_timeout kept" \
  bash -c "grep -q 'sigkill_timeout 3 ' '$tmp/err' && ! grep -q 'sigkill_timeout 0' '$tmp/err'"
sup --dry-run -np 2 --max-restarts 2 --elastic-batch scale -- "${train[@]}" --resume
check "dry run: --elastic-batch scale, the command's own --resume not doubled" bash -c \
  "grep -q -- '--resume --threads [0-9]* --elastic-batch scale --elastic-ranks 2\$' '$tmp/err'"
sup --dry-run -np 3 --max-restarts 1 --host-discovery 'printf "a:2\n\nb\n"' -- "${train[@]}"
check "dry run with discovery: its hosts as -H ('b' alone: 1 slot)" err_has " -np 3 -H a:2,b:1 "
if [ "$(getconf _NPROCESSORS_ONLN)" -lt 3 ]; then
  sup --dry-run -np 3 --threads-per-rank 1 --max-restarts 1 --host-discovery 'echo localhost:3' -- "${train[@]}"
  check "discovery offering localhost:3 on fewer cores: oversubscribed as a local job" \
    err_has " -np 3 -H localhost:3 --oversubscribe --bind-to none "
fi

# ---- Discovery output parsed strictly; failures named ----
discovery_error() { # discovery_error NAME WORD COMMAND
  plan 'exit 0'
  sup -np 2 --max-restarts 1 --host-discovery "$3" -- "${train[@]}"
  check "discovery $1: exit 1 ($rc)" test "$rc" -eq 1
  check "discovery $1: says '$2'" err_has "$2"
  check "discovery $1: nothing launched" test "$(calls)" -eq 0
}
discovery_error "garbage slots" "line 2 'b:x'" 'printf "a:2\nb:x\n"'
discovery_error "a space inside" "line 3 'c d:1': a space inside" 'printf "a\n\nc d:1\n"'
discovery_error "0 slots" "line 1 'a:0'" 'echo a:0'
discovery_error "too many slots" "line 1 'a:1048577'" 'echo a:1048577'
discovery_error "an empty host" "line 1 ':2'" 'echo :2'
discovery_error "a duplicate" "line 2 'a:2': a host already listed" 'printf "a:1\na:2\n"'
discovery_error "no host" "printed no host" 'printf "\n  \n"'
discovery_error "exit 3" "--host-discovery 'exit 3' exited with status 3" 'exit 3'
start=$(date +%s)
HERD_RUN_DISCOVERY_TIMEOUT=1 discovery_error "sleeping past the timeout" "did not finish within 1 s" \
  'sleep 20; echo a:2'
check "discovery past the timeout: killed after ~1 s, not 20" test $(($(date +%s) - start)) -lt 6

# ---- The supervisor, through the fake launcher ----
plan "$killed" 'exit 0'
sup -np 2 --max-restarts 2 -- "${train[@]}"
check "killed, then fine: exit 0 ($rc)" test "$rc" -eq 0
check "killed, then fine: one restart line" test "$(grep -c '^herd: restart ' "$tmp/err")" -eq 1
check "killed, then fine: restart 1/2 names rank 1 on n1 and SIGKILL" \
  err_has "^herd: restart 1/2 after rank 1 on n1 (killed by SIGKILL): relaunching on 2 rank(s) (this machine)$"
check "killed, then fine: the second attempt has HERD_RUN_RESTARTS=1" \
  bash -c "sed -n 2p '$tmp/calls' | grep -q -- '-x HERD_RUN_RESTARTS=1 -x HERD_RUN_SUPERVISED=1 .* --resume '"
check "the launcher's stderr passed through" err_has "^mpirun noticed that process rank 1"

plan "$killed" "$killed" "$killed" 'exit 0'
sup -np 2 --max-restarts 2 -- "${train[@]}"
check "every attempt fails: the last attempt's code, 137 ($rc)" test "$rc" -eq 137
check "every attempt fails: 3 attempts" test "$(calls)" -eq 3
check "every attempt fails: restarts 1/2 and 2/2" bash -c \
  "grep -q '^herd: restart 1/2 ' '$tmp/err' && grep -q '^herd: restart 2/2 ' '$tmp/err'"
check "every attempt fails: 3 failures listed" err_has "^herd: 3 failure(s):"
check "every attempt fails: each with its time and how" test "$(grep -cE \
  '^herd:   [123]\. [0-9.]+ s after the start \([0-9-]+ [0-9:]+ .*\): rank 1 on n1 \(killed by SIGKILL\)$' \
  "$tmp/err")" -eq 3

plan 'echo "herd-run: failed rank=1 host=n2 step=0 phase=setup: cannot read data" >&2; exit 1' 'exit 0'
sup -np 2 --max-restarts 2 -- "${train[@]}"
check "set-up failure: not restarted, exit 1 ($rc)" bash -c "[ $rc -eq 1 ] && [ $(calls) -eq 1 ]"
check "set-up failure: says why" err_has "not restarting: herd train failed before training began"
check "set-up failure: listed with herd's message" err_has "1\. .*rank 1 on n2 (herd train failed in set-up: cannot read data)"

plan 'echo "herd-run: failed rank=0 host=n0 step=17 phase=training: NaN loss" >&2; exit 1' 'exit 0'
sup -np 2 --max-restarts 1 -- "${train[@]}"
check "training failure: restarted ($rc)" test "$rc" -eq 0
check "training failure: the step and message" err_has "restart 1/1 after rank 0 on n0 (herd train failed at step 17: NaN loss)"

plan 'echo "train: unrecognized option" >&2; exit 2' 'exit 0'
sup -np 2 --max-restarts 2 -- "${train[@]}"
check "launcher exit 2, no failure line: a usage error, not restarted" bash -c "[ $rc -eq 2 ] && [ $(calls) -eq 1 ]"
check "launcher exit 2: says so" err_has "exited with code 2, a usage error"

plan 'printf "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD\nwith errorcode 5.\n" >&2; exit 5' \
  'printf "mpirun detected that one or more processes exited with non-zero status, thus causing\nthe job to be terminated. The first process to do so was:\n\n  Process name: [[123,1],2]\n  Exit code:    7\n" >&2; exit 7'
sup -np 2 --max-restarts 1 -- "${train[@]}"
check "MPI_Abort and non-zero exit read: exit 7 ($rc)" test "$rc" -eq 7
check "MPI_Abort: rank 3, error code 5" err_has "1\. .*: rank 3 (called MPI_Abort with error code 5)$"
check "non-zero exit: rank 2, exit code 7" err_has "2\. .*: rank 2 (exit code 7)$"

# A host lost: rank 0's stall timeout names the unreachable rank; mpirun's lost daemon
# names the host, and outranks it.
stall='herd: error: rank 0 on host n1: collective #9 (allreduce) did not complete within 8 s (stall timeout); ranks unreachable: 1 on n2 (no answer for 9 s); ending the job in 10 s'
plan "echo '$stall' >&2; exit 1" 'exit 0'
sup -np 2 --max-restarts 1 -- "${train[@]}"
check "stall timeout: names rank 1 on n2" err_has "restart 1/1 after rank 1 on n2 (unreachable at the stall timeout):"
plan "echo '$stall' >&2; printf 'ORTE has lost communication with a remote daemon.\n\n  HNP daemon   : [[21815,0],0] on node n1\n  Remote daemon: [[21815,0],1] on node n2\n' >&2; exit 1" 'exit 0'
sup -np 2 --max-restarts 1 -- "${train[@]}"
check "lost daemon: names host n2" err_has "restart 1/1 after n2 (host lost: mpirun's connection to its daemon there broke):"

# srun's notices: "task R: <strsignal's words>" and "tasks R-S: Exited with exit code N".
plan 'echo "srun: error: n3: task 1: Killed" >&2; exit 137' \
  'echo "srun: error: n3: tasks 0-1: Exited with exit code 3" >&2; exit 3'
sup -np 2 --max-restarts 1 -- "${train[@]}"
check "srun: a killed task named, rank 1 on n3 (SIGKILL)" \
  err_has "restart 1/1 after rank 1 on n3 (killed by SIGKILL):"
check "srun: an exit code, the first task named ($rc)" bash -c \
  "[ $rc -eq 3 ] && grep -q '2\\. .*: rank 0 on n3 (exit code 3)\$' '$tmp/err'"

plan 'echo no rank named >&2; exit 1' 'exit 0'
sup -np 2 --max-restarts 1 -- "${train[@]}"
check "no rank named: the launcher's status" err_has "restart 1/1 after the launcher exited with status 1:"

# SIGTERM reaches the launcher's process group and ends supervision: no restart.
plan 'trap "exit 143" TERM; touch "$FAKE_DIR/started"; sleep 30 & wait' 'exit 0'
rm -f "$tmp/started"
rc=0
"$herd" run --mpirun "$fake" -np 2 --max-restarts 3 -- "${train[@]}" >"$tmp/out" 2>"$tmp/err" &
sup_pid=$!
for _ in $(seq 100); do [ -e "$tmp/started" ] && break; sleep 0.1; done
kill -TERM $sup_pid
wait $sup_pid || rc=$?
check "SIGTERM: forwarded, the launcher's 143, no restart ($rc)" bash -c "[ $rc -eq 143 ] && [ $(calls) -eq 1 ]"
check "SIGTERM: says it was asked to stop" err_has "not restarting: herd run was asked to stop"

# Discovery before each attempt: the job shrinks to what is offered, --max-np caps it.
cat >"$tmp/discover" <<'EOF'
#!/bin/sh
# Prints offer.N on its Nth call (the last one from then on).
n=$(($(cat "$FAKE_DIR/asked" 2>/dev/null || echo 0) + 1))
echo $n >"$FAKE_DIR/asked"
last=$(cat "$FAKE_DIR/offers")
cat "$FAKE_DIR/offer.$((n < last ? n : last))"
EOF
chmod +x "$tmp/discover"
offers() { # offers OFFER...: what the discovery command prints on its 1st, 2nd... call
  rm -f "$tmp"/offer.* "$tmp/asked"
  local n=0 o
  for o in "$@"; do n=$((n + 1)); printf "$o" >"$tmp/offer.$n"; done
  echo $n >"$tmp/offers"
}
# A global batch of 48 (4 x 12), which splits over 2, 3, 4 and 6 ranks (--elastic-batch keep).
train12=(train --model mlp --batch-size 12 --checkpoint-dir "$ck")
offers 'a:2\nb:2\n' 'a:2\n' 'a:4\nb:4\n'
plan "$killed" "$killed" 'exit 0'
sup -np 4 --max-np 6 --max-restarts 2 --host-discovery "$tmp/discover" -- "${train12[@]}"
check "discovery: exit 0 ($rc)" test "$rc" -eq 0
check "discovery: attempt 0 on -np 4 -H a:2,b:2" bash -c "sed -n 1p '$tmp/calls' | grep -q -- '-np 4 -H a:2,b:2 '"
check "discovery: attempt 1 shrinks to -np 2 -H a:2" bash -c "sed -n 2p '$tmp/calls' | grep -q -- '-np 2 -H a:2 '"
check "discovery: attempt 2 grows to --max-np 6 on a:4,b:4" bash -c "sed -n 3p '$tmp/calls' | grep -q -- '-np 6 -H a:4,b:4 '"
check "discovery: --elastic-ranks stays the first attempt's 4" \
  bash -c "[ \$(grep -c -- '--elastic-ranks 4\$' '$tmp/calls') -eq 3 ]"
check "discovery: the restart line says where" err_has "restart 1/2 after .*: relaunching on 2 rank(s) (a:2)$"

# --elastic-batch keep: a restart takes only as many of the offered ranks as split train's
# global batch (512: 4 x 128, the default batch) into whole micro-batches: not 3, but 2.
offers 'a:4\n' 'a:3\n'
plan "$killed" 'exit 0'
sup -np 4 --max-restarts 1 --host-discovery "$tmp/discover" -- "${train[@]}"
check "keep: 3 slots offered, attempt 1 on -np 2" bash -c "sed -n 2p '$tmp/calls' | grep -q -- '-np 2 -H a:3 '"
check "keep: ... saying why" err_has "does not split into whole micro-batches over 3 rank(s); over 2 it does"
offers 'a:4\n' 'a:3\n'
plan "$killed" 'exit 0'
sup -np 4 --max-restarts 1 --elastic-batch scale --host-discovery "$tmp/discover" -- "${train[@]}"
check "scale: the 3 slots offered" bash -c "sed -n 2p '$tmp/calls' | grep -q -- '-np 3 -H a:3 '"

# Too few slots after a failure: wait (asking every 2 s) until --min-np is offered.
offers 'a:2\n' 'a:1\n' 'a:1\n' 'a:2\n'
plan "$killed" 'exit 0'
start=$(date +%s)
sup -np 2 --min-np 2 --max-restarts 1 --elastic-timeout 30 --host-discovery "$tmp/discover" -- "${train[@]}"
check "waiting for --min-np: exit 0 once offered ($rc)" test "$rc" -eq 0
check "waiting for --min-np: said once what is offered and needed" \
  test "$(grep -c 'offers 1 slot(s) (a:1), --min-np needs 2: waiting up to 30 s' "$tmp/err")" -eq 1
check "waiting for --min-np: asked again every 2 s (4 asks, ~4 s)" \
  bash -c "[ \$(cat '$tmp/asked') -eq 4 ] && [ $(($(date +%s) - start)) -ge 3 ]"

# Never enough: stop after --elastic-timeout with the message.
offers 'a:1\n'
plan 'exit 0'
start=$(date +%s)
sup -np 2 --min-np 2 --max-restarts 1 --elastic-timeout 3 --host-discovery "$tmp/discover" -- "${train[@]}"
took=$(($(date +%s) - start))
check "--min-np never offered: exit 1 ($rc)" test "$rc" -eq 1
check "--min-np never offered: after ~3 s ($took s)" bash -c "[ $took -ge 2 ] && [ $took -le 8 ]"
check "--min-np never offered: the message" err_has "offers 1 slot(s) (a:1), fewer than --min-np 2, after 3 s"
check "--min-np never offered: nothing launched" test "$(calls)" -eq 0

# Discovery failing during a restart: stop with its message and the failures so far.
offers 'a:2\n' 'a:2\nb:x\n'
plan "$killed" 'exit 0'
sup -np 2 --max-restarts 2 --host-discovery "$tmp/discover" -- "${train[@]}"
check "discovery garbage at a restart: the last attempt's 137 ($rc)" test "$rc" -eq 137
check "discovery garbage at a restart: named, the failure listed" bash -c \
  "grep -q \"line 2 'b:x'\" '$tmp/err' && grep -q '^herd: 1 failure(s):' '$tmp/err' && [ $(calls) -eq 1 ]"

# A hostfile is read again before each attempt (here the launcher edits it).
printf 'a slots=2\nb slots=2\n' >"$tmp/hosts"
plan "printf 'a slots=3\n' >'$tmp/hosts'; $killed" 'exit 0'
sup -np 4 --hostfile "$tmp/hosts" --max-restarts 1 -- "${train12[@]}"
check "hostfile re-read: exit 0 ($rc)" test "$rc" -eq 0
check "hostfile re-read: attempt 1 on its 3 slots" bash -c "sed -n 2p '$tmp/calls' | grep -q -- '-np 3 --hostfile '"

# ---- Real jobs under herd's MPI ----
if ! have_mpi; then
  skipped_part "real restarts (herd built without MPI, or its launcher missing)"
  finish
fi
"$herd" train --help >"$tmp/train-help" # whole (grep -q could end the pipe early)
if ! grep -q -- --elastic-ranks "$tmp/train-help"; then
  skipped_part "real restarts: herd train does not take --elastic-ranks yet"
  finish
fi
self=$(readlink -f "$herd")
# lenet5 long enough to be killed mid-training (375 steps: a few seconds, longer under the
# sanitizers), checkpointed every 20 steps.
job=(train --model lenet5 --data synthetic:1,28,28,10,12000 --epochs 2 --batch-size 32 --quiet
     --eval-every 0 --test-samples 600
     --checkpoint-every-steps 20)
ranks() { pgrep -f "^$self train .*$1" || true; } # the rank processes of the job using dir $1
# kill_rank DIR: waits for a rank of an attempt not yet hit, once the job has a
# checkpoint, kills it (SIGKILL) and prints its pid; the attempt's ranks go to DIR.hit.
kill_rank() {
  local pid
  touch "$1.hit"
  for _ in $(seq 600); do
    pid=$(ranks "$1" | grep -vxF -f "$1.hit" | tail -n 1 || true)
    if [ -n "$pid" ] && [ -e "$1/latest" ]; then
      ranks "$1" >>"$1.hit"
      # Gone between pgrep and kill (an attempt's rank its launcher was ending): look on.
      if kill -9 "$pid" 2>/dev/null; then
        echo "$pid"
        return
      fi
    fi
    sleep 0.1
  done
  echo "no rank to kill"
}

# Under the sanitizers the two killed jobs are left out: the lines of herd's code their
# surviving processes reach run in that pass's other tests (clang's coverage of each
# process, 2026-12-06: tests/repeat_passes.txt); the set-up failure's are this test's own.
if ! sanitizer_pass; then
timeout 300 "$herd" run -np 2 --max-restarts 2 -- "${job[@]}" --checkpoint-dir "$tmp/real1" \
  >"$tmp/out" 2>"$tmp/err" &
run_pid=$!
killed_pid=$(kill_rank "$tmp/real1")
rc=0
wait $run_pid || rc=$?
check "real: a rank killed ($killed_pid), the job ends 0 ($rc)" test "$rc" -eq 0
# Hydra tells of a killed rank on stdout, by PID: herd run names it by the exit status.
how='rank [01] on .* (killed by SIGKILL)'
"$herd" --version | grep -q "MPI: Open MPI" || how='the launcher exited with status'
check "real: one restart line, 1/2, naming how it failed" bash -c \
  "[ \$(grep -c '^herd: restart ' '$tmp/err') -eq 1 ] && grep -q '^herd: restart 1/2 after $how' '$tmp/err'"
check "real: the summary counts the restart" grep -q "restarts=1" "$tmp/out"
[ "$rc" -eq 0 ] || tail -n 20 "$tmp/err"

timeout 300 "$herd" run -np 2 --max-restarts 1 -- "${job[@]}" --checkpoint-dir "$tmp/real2" \
  >"$tmp/out" 2>"$tmp/err" &
run_pid=$!
kill_rank "$tmp/real2" >/dev/null
kill_rank "$tmp/real2" >/dev/null # the second attempt's new ranks ("latest" is there already)
rc=0
wait $run_pid || rc=$?
check "real: every attempt killed: non-zero ($rc)" test "$rc" -ne 0
check "real: every attempt killed: restart 1/1, then 2 failures listed" bash -c \
  "grep -q '^herd: restart 1/1 ' '$tmp/err' && grep -q '^herd: 2 failure(s):' '$tmp/err' && grep -q 'not restarting: no restarts left' '$tmp/err'"
fi

rc=0
HERD_TEST_FAIL_AT=setup:1 timeout 120 "$herd" run -np 2 --max-restarts 2 -- "${job[@]}" \
  --checkpoint-dir "$tmp/real3" >"$tmp/out" 2>"$tmp/err" || rc=$?
check "real: a set-up failure is not restarted ($rc)" bash -c \
  "[ $rc -ne 0 ] && ! grep -q '^herd: restart ' '$tmp/err' && grep -q 'failed before training began' '$tmp/err'"
check "real: herd train's failure line read" grep -q "^herd:   1\. .*rank [01] on .*(herd train failed in set-up: " "$tmp/err"

finish
