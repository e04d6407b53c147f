#!/usr/bin/env bash
# --resume through the CLI: at another rank count, batch, --grad-accum or
# --train-samples the run continues the epoch's permutation where it stopped (and
# refuses only what cannot be continued); a 2-rank resume gives the uninterrupted
# run's weights bit for bit; one metrics line per epoch; and a process killed in the
# middle of any checkpoint file leaves `latest` naming a checkpoint that loads and
# resumes to the uninterrupted weights (herd eval given the directory loads it). Every
# mpirun runs under timeout.
# Under the sanitizers, a finished run resumed, the metrics after a resume and a restart
# after training ended: the other parts reach no line of herd's code that the pass's other
# tests do not (clang's coverage of each process, 2026-12-07: tests/repeat_passes.txt).
set -u
. "$(dirname "$0")/testlib.sh"
have_mpi || skip_all "herd built without MPI, or its launcher (HERD_MPIEXEC, set by ctest) missing"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun=(timeout 120 "${mpiexec[@]}")
# 500 samples: 16 steps per epoch at 1 rank x 32, 8 at 2 ranks x 32 (or 1 x 32 x grad-accum 2).
common=(--model mlp --data synthetic:1,12,12,4,500 --threads 1 --eval-every 1 --seed 7 --epochs 3
        --batch-size 32 --quiet)
steps() { sed -n 's/.*steps=\([0-9]*\).*/\1/p' "$1"; }
epochs() { sed -n 's/.*epochs=\([0-9]*\).*/\1/p' "$1"; }

if ! sanitizer_pass; then
# 2 ranks: stopped mid-epoch 2, resumed, the weights of the uninterrupted run bit for bit.
"${mpirun[@]}" -np 2 "$herd" train "${common[@]}" --save "$tmp/full2.st" >"$tmp/out" 2>"$tmp/err"
check "2 ranks uninterrupted: 24 steps" test "$(steps "$tmp/out")" = 24
"${mpirun[@]}" -np 2 "$herd" train "${common[@]}" --checkpoint-dir "$tmp/ck2" --max-steps 11 >"$tmp/out" 2>&1
"${mpirun[@]}" -np 2 "$herd" train "${common[@]}" --checkpoint-dir "$tmp/ck2" --resume \
  --save "$tmp/res2.st" >"$tmp/out" 2>"$tmp/err"
check "2 ranks resumed at step 11: exits 0, 24 steps in all" test "$(steps "$tmp/out")" = 24
check "2 ranks resumed: the uninterrupted run's weights, bit for bit" cmp -s "$tmp/full2.st" "$tmp/res2.st"

# 1 rank -> 2 ranks: 11 steps of 32 leave 148 of epoch 1's samples: 3 steps of 64, then 8 per epoch.
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/ck12" --max-steps 11 >"$tmp/out" 2>&1
"${mpirun[@]}" -np 2 "$herd" train "${common[@]}" --checkpoint-dir "$tmp/ck12" --resume \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
check "1 -> 2 ranks: exits 0 ($(tail -n 1 "$tmp/err"))" test $rc -eq 0
check "1 -> 2 ranks: the rest of epoch 1 (3 steps) and 2 epochs of 8: 30 steps" test "$(steps "$tmp/out")" = 30
check "1 -> 2 ranks: 3 epochs" test "$(epochs "$tmp/out")" = 3

# 1 rank x 64 -> 2 ranks x 32 (the same global batch, no batch norm): the same samples in
# every step, so the weights are the uninterrupted 2-rank run's up to rounding. A
# resume at another place of the permutation would be far off.
"$herd" train "${common[@]}" --batch-size 64 --checkpoint-dir "$tmp/ck64" --max-steps 5 >"$tmp/out" 2>&1
"${mpirun[@]}" -np 2 "$herd" train "${common[@]}" --checkpoint-dir "$tmp/ck64" --resume \
  --save "$tmp/res64.st" >"$tmp/out" 2>"$tmp/err"
check "1 x 64 -> 2 x 32: 24 steps" test "$(steps "$tmp/out")" = 24
check "1 x 64 -> 2 x 32: the uninterrupted 2-rank weights up to rounding" python3 - "$tmp/full2.st" "$tmp/res64.st" <<'PY'
import json, struct, sys
def floats(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n]); data = raw[8 + n:]
    out = []
    for name in sorted(k for k in head if k != "__metadata__"):
        a, b = head[name]["data_offsets"]
        out += struct.unpack("<%df" % ((b - a) // 4), data[a:b])
    return out
x, y = floats(sys.argv[1]), floats(sys.argv[2])
err = max(abs(a - b) for a, b in zip(x, y)) / max(abs(a) for a in x)
print("max difference / max weight: %.3g" % err)
sys.exit(not (len(x) == len(y) and err < 1e-4))
PY

# 2 ranks -> 1: 3 steps of 64 leave 308 samples: 10 steps of 32, then 16 per epoch.
"${mpirun[@]}" -np 2 "$herd" train "${common[@]}" --checkpoint-dir "$tmp/ck21" --max-steps 3 >"$tmp/out" 2>&1
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/ck21" --resume >"$tmp/out" 2>"$tmp/err"
rc=$?
check "2 -> 1 rank: exits 0 ($(tail -n 1 "$tmp/err"))" test $rc -eq 0
check "2 -> 1 rank: 3 + 10 + 32 = 45 steps" test "$(steps "$tmp/out")" = 45

# Another --grad-accum: 5 steps of 32 leave 340 samples: 6 steps of 2 x 32, then 8 per epoch.
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/ckga" --max-steps 5 >"$tmp/out" 2>&1
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/ckga" --resume --grad-accum 2 >"$tmp/out" 2>"$tmp/err"
rc=$?
check "--grad-accum 1 -> 2: exits 0 ($(tail -n 1 "$tmp/err"))" test $rc -eq 0
check "--grad-accum 1 -> 2: 5 + 6 + 16 = 27 steps" test "$(steps "$tmp/out")" = 27

# Another --train-samples: refused mid-epoch (another permutation), continued at an epoch end.
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/ckts" --max-steps 5 >"$tmp/out" 2>&1
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/ckts" --resume --train-samples 400 >"$tmp/out" 2>"$tmp/err"
rc=$?
check "--train-samples mid-epoch: refused, exit 1" test $rc -eq 1
check "--train-samples mid-epoch: says why and what to try" \
  grep -q "whose permutation differs, so the epoch cannot be continued: resume with the same data and --train-samples" "$tmp/err"
fi
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/ckts2" --max-steps 16 >"$tmp/out" 2>&1
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/ckts2" --resume --train-samples 400 >"$tmp/out" 2>"$tmp/err"
check "--train-samples at an epoch end: 16 + 2 x 13 = 42 steps" test "$(steps "$tmp/out")" = 42
"$herd" train "${common[@]}" --checkpoint-dir "$tmp/ckts2" --resume >"$tmp/out" 2>"$tmp/err"
rc=$?
check "a finished run resumed: exits 1" test $rc -eq 1
check "a finished run resumed: says nothing is left to train" grep -q "nothing is left to train; raise --epochs" "$tmp/err"

# Metrics: one line per epoch after a mid-epoch resume, the steps once each, and the
# resumed epoch's figures those of the whole epoch (the uninterrupted run's).
"$herd" train "${common[@]}" --log-every 4 --metrics "$tmp/full.jsonl" >"$tmp/out" 2>&1
"$herd" train "${common[@]}" --log-every 4 --checkpoint-dir "$tmp/ckm" --max-steps 21 \
  --metrics "$tmp/m.jsonl" >"$tmp/out" 2>&1
"$herd" train "${common[@]}" --log-every 4 --checkpoint-dir "$tmp/ckm" --resume \
  --metrics "$tmp/m.jsonl" >"$tmp/out" 2>&1
check "metrics: one epoch line per epoch, in order" \
  test "$(python3 -c 'import json,sys; print([r["epoch"] for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "epoch"])' "$tmp/m.jsonl")" = "[1, 2, 3]"
check "metrics: every step line once, steps increasing" python3 -c '
import json, sys
steps = [r["step"] for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "step"]
sys.exit(not (steps == sorted(set(steps)) and steps[-1] == 48))' "$tmp/m.jsonl"
check "metrics: the resumed epoch's train_loss and train_acc are the whole epoch's" python3 -c '
import json, sys
def ep(p): return {r["epoch"]: (r["train_loss"], r["train_acc"]) for r in map(json.loads, open(p)) if r["kind"] == "epoch"}
a, b = ep(sys.argv[1]), ep(sys.argv[2])
sys.exit(not (a == b))' "$tmp/full.jsonl" "$tmp/m.jsonl"

# Atomicity: killed (SIGKILL) in the middle of each file of both epochs' checkpoints
# (weights, state, latest), `latest` names a checkpoint that loads, and --resume ends
# with the uninterrupted weights. The stale temporary file is removed and reported.
if ! sanitizer_pass; then
atom=(--model mlp --data synthetic:1,12,12,4,500 --threads 1 --seed 7 --epochs 2 --batch-size 64 --quiet)
"$herd" train "${atom[@]}" --save "$tmp/ref.st" >/dev/null 2>&1
for n in 1 2 3 4 5 6; do
  rm -rf "$tmp/cka"
  HERD_TEST_KILL_IN_WRITE=$n "$herd" train "${atom[@]}" --checkpoint-dir "$tmp/cka" >/dev/null 2>&1
  rc=$?
  check "write $n: killed mid-file (exit $rc)" test $rc -eq 137
  check "write $n: a temporary file was left" bash -c "ls '$tmp/cka' | grep -q '\.tmp\.'"
  if [ "$n" -le 3 ]; then
    check "write $n: no checkpoint was published yet" test ! -e "$tmp/cka/latest"
    "$herd" eval --model mlp --data synthetic:1,12,12,4,500 --threads 1 --checkpoint "$tmp/cka" \
      >/dev/null 2>"$tmp/err"
    check "write $n: herd eval on the directory says it holds no checkpoint" \
      grep -q "holds no checkpoint ('$tmp/cka/latest' is missing)" "$tmp/err"
  else
    check "write $n: latest names the first epoch's checkpoint" test "$(cat "$tmp/cka/latest")" = ckpt-8
    "$herd" eval --model mlp --data synthetic:1,12,12,4,500 --threads 1 --checkpoint "$tmp/cka" \
      >/dev/null 2>"$tmp/err"
    check "write $n: latest's weights load (herd eval on the directory: exit $?)" \
      grep -q "^herd eval: $tmp/cka/ckpt-8.safetensors (the newest" "$tmp/err"
  fi
  "$herd" train "${atom[@]}" --checkpoint-dir "$tmp/cka" --resume --save "$tmp/after.st" >/dev/null 2>"$tmp/err"
  check "write $n: --resume exits 0 and reports the removed temporary" \
    grep -q "removed 1 temporary file left in" "$tmp/err"
  check "write $n: --resume ends with the uninterrupted weights" cmp -s "$tmp/ref.st" "$tmp/after.st"
  check "write $n: no temporary is left" bash -c "! ls '$tmp/cka' | grep -q '\.tmp\.'"
done
fi

# A rank lost after training ended (in the final save, or on the way out): herd run's
# restart finds every epoch done (or --max-steps reached), ends 0 and saves the
# checkpoint's weights; a resume by hand of a finished run is still refused, naming --epochs.
fin=(--model mlp --data synthetic:1,12,12,4,200 --threads 1 --epochs 2 --batch-size 20 --quiet)
"$herd" train "${fin[@]}" --checkpoint-dir "$tmp/fin" --save "$tmp/fin.st" >/dev/null 2>&1
HERD_RUN_SUPERVISED=1 HERD_RUN_RESTARTS=1 "$herd" train "${fin[@]}" --checkpoint-dir "$tmp/fin" \
  --resume --save "$tmp/fin.again.st" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "a restart after training ended: exit 0 ($rc)" test $rc -eq 0
check "... said so" grep -q "restart 1: .*has finished all 2 epochs" "$tmp/err"
check "... and saves the finished run's weights" cmp -s "$tmp/fin.st" "$tmp/fin.again.st"
"$herd" train "${fin[@]}" --checkpoint-dir "$tmp/fin" --resume >/dev/null 2>"$tmp/err"
check "a resume by hand of a finished run: refused, naming --epochs" grep -q "nothing is left to train; raise --epochs" "$tmp/err"
# The same where --max-steps ended it: the restart trains no step (was one more each time).
"$herd" train "${fin[@]}" --max-steps 7 --checkpoint-dir "$tmp/finm" --save "$tmp/finm.st" >/dev/null 2>&1
HERD_RUN_SUPERVISED=1 HERD_RUN_RESTARTS=1 "$herd" train "${fin[@]}" --max-steps 7 --checkpoint-dir "$tmp/finm" \
  --resume --save "$tmp/finm.again.st" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "a restart after --max-steps ended training: exit 0 ($rc), said so" \
  bash -c "test $rc -eq 0 && grep -q 'restart 1: .*is at step 7 and --max-steps is 7' '$tmp/err'"
check "... the finished run's weights, latest unchanged" \
  bash -c "cmp -s '$tmp/finm.st' '$tmp/finm.again.st' && test \"\$(cat '$tmp/finm/latest')\" = ckpt-7"

finish
