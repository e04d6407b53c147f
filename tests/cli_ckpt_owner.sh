#!/usr/bin/env bash
# Checkpoint directories (docs/reliability.md): one owner at a time (a second job is
# refused naming the first's pid and host, the first unharmed; a killed job leaves no
# stale lock; 2 ranks refused together, none left hanging; a supervised restart takes
# the lock over), the run's identity (a --resume of another model, data or seed refused
# naming what differs, another global batch allowed and said; a new run refused where
# another run's checkpoints are), unusable directories refused before the first step,
# and herd run --min-np below what train --zero / --pipeline-stages can run refused.
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
base=(--data synthetic:1,28,28,10,256 --threads 1 --epochs 3 --batch-size 32 --quiet)
mlp=(--model mlp "${base[@]}" --seed 7)
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" "$2"; }
# hold DIR [ARGS...]: a job on DIR that stops itself (SIGSTOP, the "stop" test hook)
# before its second step, holding the directory; its pid in $held once it has the lock.
hold() {
  local dir=$1; shift
  HERD_TEST_FAIL_AT=stop:0 "$herd" train "${mlp[@]}" --checkpoint-dir "$dir" "$@" \
    >"$tmp/held.out" 2>"$tmp/held.err" &
  held=$!
  for _ in $(seq 300); do
    grep -q "pid $held " "$dir/.lock" 2>/dev/null && [ "$(ps -o stat= -p $held | cut -c1)" = T ] && return
    sleep 0.1
  done
  echo "the held job never took the lock"
}

# ---- One owner ----
hold "$tmp/ck"
"$herd" train "${mlp[@]}" --checkpoint-dir "$tmp/ck" --metrics "$tmp/second.jsonl" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "second job on a held directory: exit 1 ($rc)" test $rc -eq 1
check "second job: names the owner's pid and host" \
  grep -q "is in use by another herd job (pid $held on host $(hostname)" "$tmp/err"
check "second job: no step ran (no metrics line, no summary)" \
  bash -c "! test -s '$tmp/second.jsonl' && ! test -s '$tmp/out'"
kill -CONT $held
rc=0
wait $held || rc=$?
check "the first job, unharmed: exit 0 ($rc), 24 steps" \
  bash -c "test $rc -eq 0 && test '$(field steps "$tmp/held.out")' = 24"
check "the first job's checkpoint is its last step's" test "$(cat "$tmp/ck/latest")" = ckpt-24

# A killed owner leaves no lock behind: the next job takes the directory at once.
hold "$tmp/ck"
kill -9 $held
wait $held 2>/dev/null
"$herd" train "${mlp[@]}" --checkpoint-dir "$tmp/ck" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "after a killed owner: the directory is usable at once (exit $rc)" test $rc -eq 0

# ---- The run's identity ----
"$herd" train "${mlp[@]}" --checkpoint-dir "$tmp/id" --max-steps 5 >/dev/null 2>&1
check "run.json records model, data, seed and global batch" python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(not (r["model"] == "mlp" and r["data"] == "synthetic:1,28,28,10,256" and r["seed"] == 7
              and r["global_batch"] == 32 and r["started"].endswith("Z")))' "$tmp/id/run.json"
refused() { # refused NAME WHAT ARGS...: a --resume refused, naming WHAT, the directory as it was
  local name=$1 what=$2; shift 2
  (cd "$tmp/id" && md5sum * | sort) >"$tmp/before"
  "$herd" train "$@" --checkpoint-dir "$tmp/id" --resume >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  check "resume of another $name: exit 1 ($rc)" test $rc -eq 1
  check "resume of another $name: names what differs" grep -q -e "$what" "$tmp/err"
  (cd "$tmp/id" && md5sum * | sort) >"$tmp/after"
  check "resume of another $name: the directory untouched" cmp -s "$tmp/before" "$tmp/after"
}
refused seed "another run (started .*): --seed 7 there, 8 here" --model mlp "${base[@]}" --seed 8
refused model "model 'mlp' (669706 parameters) there, 'lenet5' (61706) here" --model lenet5 "${base[@]}" --seed 7
refused data "data 'synthetic:1,28,28,10,256' there, 'synthetic:1,28,28,10,300' here" \
  --model mlp --data synthetic:1,28,28,10,300 --threads 1 --epochs 3 --batch-size 32 --quiet --seed 7
# A new run (no --resume) where another run's checkpoints are: refused, naming it.
(cd "$tmp/id" && md5sum * | sort) >"$tmp/before"
"$herd" train --model lenet5 "${base[@]}" --seed 7 --checkpoint-dir "$tmp/id" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "a new lenet5 run over mlp's checkpoints: exit 1 ($rc)" test $rc -eq 1
check "a new lenet5 run over mlp's checkpoints: names the other run and what to do" \
  grep -q "holds the checkpoints of another run (model 'mlp', data 'synthetic:1,28,28,10,256', seed 7.*resume that run with its own flags and --resume, or choose another --checkpoint-dir" "$tmp/err"
(cd "$tmp/id" && md5sum * | sort) >"$tmp/after"
check "a new lenet5 run over mlp's checkpoints: the directory untouched" cmp -s "$tmp/before" "$tmp/after"

# ... and mlp's run still resumes, with another global batch (said, not refused).
"$herd" train --model mlp --data synthetic:1,28,28,10,256 --threads 1 --epochs 3 --seed 7 \
  --batch-size 64 --checkpoint-dir "$tmp/id" --resume >"$tmp/out" 2>"$tmp/err"
rc=$?
check "resume with another global batch: allowed (exit $rc), trained to the end" \
  bash -c "test $rc -eq 0 && test '$(field epochs "$tmp/out")' = 3"
check "resume with another global batch: said" \
  grep -q "with a global batch of 64 samples instead of its 32 (allowed" "$tmp/err"

# ---- Unusable directories: refused before the first step ----
touch "$tmp/afile"
for d in "$tmp/afile" /proc/self "$tmp/afile/sub"; do
  rm -f "$tmp/m.jsonl"
  "$herd" train "${mlp[@]}" --checkpoint-dir "$d" --metrics "$tmp/m.jsonl" --log-every 1 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "--checkpoint-dir $d: exit 1 ($rc)" test $rc -eq 1
  check "--checkpoint-dir $d: the message names it" grep -qF "'$d'" "$tmp/err"
  check "--checkpoint-dir $d: no step ran" bash -c "! test -s '$tmp/m.jsonl' && ! test -s '$tmp/out'"
done
"$herd" train "${mlp[@]}" --checkpoint-dir "" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "--checkpoint-dir '': a usage error, exit 2 ($rc)" test $rc -eq 2
check "--checkpoint-dir '': says so" grep -q "checkpoint-dir needs a directory" "$tmp/err"

# ---- herd run: --min-np below the smallest job train can run (nothing launched: --dry-run) ----
minnp() { # minnp NAME WANT-RC WORD RUN-ARGS... -- TRAIN-ARGS...
  local name=$1 want=$2 word=$3; shift 3
  "$herd" run --dry-run "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  check "herd run $name: exit $want ($rc)" test $rc -eq "$want"
  check "herd run $name: says '$word'" grep -q -e "$word" "$tmp/err" "$tmp/out"
}
job=(train --model mlp "${base[@]}" --checkpoint-dir "$tmp/run")
minnp "--min-np 1 with --zero 1" 2 "min-np 1 is below the smallest job train can run: .*so 2 ranks" \
  -np 2 --max-restarts 1 --min-np 1 -- "${job[@]}" --zero 1
minnp "--min-np 1 with --pipeline-stages 2" 2 "pipeline-stages 2 needs a rank per stage, so 2 ranks" \
  -np 2 --max-restarts 1 --min-np 1 -- "${job[@]}" --pipeline-stages 2
minnp "--min-np 3 with --pipeline-stages 2 --zero 1" 2 "needs 2 stages x 2 replicas, so 4 ranks" \
  -np 4 --max-restarts 1 --min-np 3 -- "${job[@]}" --pipeline-stages 2 --zero 1
minnp "-np 1 with --zero 1 (--min-np not given)" 2 "np 1 is below the smallest job" \
  -np 1 --max-restarts 1 -- "${job[@]}" --zero 1
minnp "--min-np 2 with --zero 1" 0 "train" -np 2 --max-restarts 1 --min-np 2 -- "${job[@]}" --zero 1
minnp "-np 3 with --pipeline-stages 2" 2 "np 3 is not a multiple of 2, the ranks of one replica" \
  -np 3 --max-restarts 1 -- "${job[@]}" --pipeline-stages 2
minnp "--max-np 5 with --pipeline-stages 2" 2 "max-np 5 is not a multiple of 2, the ranks of one" \
  -np 4 --max-np 5 --max-restarts 1 -- "${job[@]}" --pipeline-stages 2
minnp "--min-np 2 with --tensor-parallel 2 --zero 1" 2 "needs 2 parts x 2 replicas, so 4 ranks" \
  -np 4 --max-restarts 1 --min-np 2 -- "${job[@]}" --tensor-parallel 2 --zero 1
minnp "-np 6 with --tensor-parallel 4" 2 "np 6 is not a multiple of 4, the ranks of one replica" \
  -np 6 --max-restarts 1 -- "${job[@]}" --tensor-parallel 4

# ---- Under MPI ----
if ! have_mpi; then
  skipped_part "2 ranks refused and a supervised takeover (herd built without MPI, or its launcher missing)"
  finish
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
hold "$tmp/ck2"
timeout 120 "${mpiexec[@]}" -np 2 "$herd" train "${mlp[@]}" --checkpoint-dir "$tmp/ck2" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "2 ranks on a held directory: every rank ends, refused (exit $rc, not 0 nor timeout's 124)" \
  bash -c "test $rc -ne 0 && test $rc -ne 124"
check "2 ranks: rank 0 names the owner" grep -q "is in use by another herd job (pid $held on" "$tmp/err"
check "2 ranks: rank 1 learns it from rank 0" grep -q "rank 0 could not use the checkpoint directory" "$tmp/err"
kill -9 $held
wait $held 2>/dev/null

# Supervised: rank 1 killed once a checkpoint exists; mpirun ends rank 0, the lock's
# owner, and the restarted rank 0 takes the directory over. Not under the sanitizers:
# there its 2,000 steps reach no line of herd's code that the pass's other tests do not
# (clang's coverage, each process alone, 2026-12-06: tests/repeat_passes.txt).
sanitizer_pass && finish
self=$(readlink -f "$herd")
slow=(train --model mlp --data synthetic:1,28,28,10,4096 --threads 1 --epochs 4 --batch-size 16
      --quiet --checkpoint-every-steps 10 --checkpoint-dir "$tmp/sup")
timeout 300 "$herd" run -np 2 --max-restarts 1 -- "${slow[@]}" >"$tmp/out" 2>"$tmp/err" &
run_pid=$!
victim=
for _ in $(seq 600); do
  owner=$(sed -n 's/^pid \([0-9]*\) .*/\1/p' "$tmp/sup/.lock" 2>/dev/null)
  victim=$( (pgrep -f "^$self train .*$tmp/sup" || true) | grep -vx "${owner:-x}" | head -n 1 || true)
  [ -n "$owner" ] && [ -n "$victim" ] && [ -e "$tmp/sup/latest" ] && break
  sleep 0.1
done
[ -n "$victim" ] && kill -9 "$victim"
rc=0
wait $run_pid || rc=$?
check "supervised: rank 1 killed ($victim), the restart took the lock over: exit 0 ($rc)" test $rc -eq 0
check "supervised: one restart, the training finished" \
  bash -c "test '$(field restarts "$tmp/out")' = 1 && test '$(field epochs "$tmp/out")' = 4"
check "supervised: the lock names the restarted rank 0" bash -c "! grep -q 'pid $owner ' '$tmp/sup/.lock'"
finish
