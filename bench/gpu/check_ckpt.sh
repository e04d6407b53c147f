#!/usr/bin/env bash
# Checkpoints and resume on a GPU (issue 25), one process, about a minute:
#   1. a run killed in the middle of a background checkpoint write (HERD_TEST_KILL_IN_WRITE)
#      and resumed ends on the uninterrupted run's weights, bit for bit, when the device
#      repeats itself (checked first: two uninterrupted runs compared);
#   2. a run stopped inside an epoch (--max-steps) and resumed, the same;
#   3. one format: a checkpoint written on the GPU resumes on the CPU and one written on
#      the CPU resumes on the GPU, each one step on, within rounding of the same step on
#      the other device;
#   4. herd eval --device on the GPU's checkpoint gives the CPU's figures within rounding;
#   5. a checkpoint of another model is refused on the GPU, the directory untouched.
# usage: bench/gpu/check_ckpt.sh HERD [DEVICE]   (DEVICE: cuda, the default; sim checks
# the script itself on a machine without a GPU). With the bundle of
# ../shared/tools/gpu/bundle.sh, on the device machine:
#   . .dev/env.sh && LD_LIBRARY_PATH=$HL bench/gpu/check_ckpt.sh .dev/herd
# Prints one line per check and exits non-zero when one failed.
set -u
herd=$1
dev=${2:-cuda}
. "$(dirname "$0")/lib.sh"
"$herd" --version
# mlp (cuBLAS matrix products, deterministic) for the bitwise checks; AdamW: two state
# tensors. 16 steps per epoch.
data=(--data synthetic:1,12,12,4,500 --seed 7 --epochs 3 --batch-size 32 --optimizer adamw --lr 0.002 --quiet)
m=(--model mlp "${data[@]}")

"$herd" train "${m[@]}" --device "$dev" --save "$tmp/full.st" >"$tmp/out" 2>"$tmp/err"
check "$dev uninterrupted: exits 0 ($(tail -n 1 "$tmp/err")), on $dev" test "$(field device "$tmp/out")" = "$dev"
"$herd" train "${m[@]}" --device "$dev" --save "$tmp/full2.st" >/dev/null 2>&1
if cmp -s "$tmp/full.st" "$tmp/full2.st"; then
  same() { cmp -s "$1" "$2"; }
  how="bit for bit"
else # a device that does not repeat itself: resumes are compared within rounding
  echo "note: two uninterrupted runs on $dev differ by $(maxdiff "$tmp/full.st" "$tmp/full2.st")"
  same() { within "$(maxdiff "$1" "$2")" 1e-5; }
  how="within 1e-5"
fi

# 1. Killed in the background write of step 10's weights (the 4th file written).
HERD_TEST_KILL_IN_WRITE=4 "$herd" train "${m[@]}" --device "$dev" --checkpoint-dir "$tmp/kw" \
  --checkpoint-every-steps 5 >/dev/null 2>&1
rc=$?
check "killed in a background write on $dev (exit $rc)" test $rc -eq 137
check "killed: latest names ckpt-5" test "$(cat "$tmp/kw/latest" 2>/dev/null)" = ckpt-5
"$herd" train "${m[@]}" --device "$dev" --checkpoint-dir "$tmp/kw" --resume --save "$tmp/kw.st" >"$tmp/out" 2>"$tmp/err"
check "killed and resumed on $dev: exits 0 ($(tail -n 1 "$tmp/err")), 48 steps" test "$(field steps "$tmp/out")" = 48
check "killed and resumed on $dev: the uninterrupted weights, $how" same "$tmp/kw.st" "$tmp/full.st"

# 2. Stopped at step 11 (inside epoch 1) and resumed.
"$herd" train "${m[@]}" --device "$dev" --checkpoint-dir "$tmp/st" --max-steps 11 >/dev/null 2>&1
"$herd" train "${m[@]}" --device "$dev" --checkpoint-dir "$tmp/st" --resume --save "$tmp/st.st" >/dev/null 2>&1
check "stopped at step 11 and resumed on $dev: the uninterrupted weights, $how" same "$tmp/st.st" "$tmp/full.st"

# 3. One format, both ways, with batch norm (bnnet): each device's step-11 checkpoint
# resumed one step on the other device, against that device's own step 12.
b=(--model "$here/tests/models/bnnet.json" "${data[@]}")
for d in "$dev" cpu; do
  "$herd" train "${b[@]}" --device "$d" --checkpoint-dir "$tmp/b-$d" --max-steps 11 >/dev/null 2>&1
  "$herd" train "${b[@]}" --device "$d" --max-steps 12 --save "$tmp/b12-$d.st" >/dev/null 2>&1
done
for from in "$dev" cpu; do
  to=$([ "$from" = cpu ] && echo "$dev" || echo cpu)
  rm -rf "$tmp/x" && cp -r "$tmp/b-$from" "$tmp/x"
  "$herd" train "${b[@]}" --device "$to" --checkpoint-dir "$tmp/x" --resume --max-steps 12 \
    --save "$tmp/x.st" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  d12=$(maxdiff "$tmp/x.st" "$tmp/b12-$to.st" 2>/dev/null || echo inf)
  check "written on $from, resumed on $to: exits 0 ($(tail -n 1 "$tmp/err")), step 12 within 1e-4 of $to's own ($d12)" \
    bash -c "test $rc -eq 0 && test '$(field steps "$tmp/out")' = 12 && awk -v d='$d12' 'BEGIN { exit !(d <= 1e-4) }'"
done

# 4. herd eval of the GPU's checkpoint on both devices.
for d in "$dev" cpu; do
  "$herd" eval --model "$here/tests/models/bnnet.json" --data synthetic:1,12,12,4,500 --device "$d" \
    --checkpoint "$tmp/b-$dev/ckpt-11.safetensors" --json >"$tmp/eval-$d" 2>"$tmp/err"
done
check "eval on $dev of its checkpoint: the CPU's loss within 1e-4" python3 -c '
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print("  %s: loss %s acc %s; cpu: loss %s acc %s" % (sys.argv[3], a["loss"], a["acc"], b["loss"], b["acc"]))
sys.exit(not abs(a["loss"] - b["loss"]) <= 1e-4 * max(1, abs(b["loss"])))' "$tmp/eval-$dev" "$tmp/eval-cpu" "$dev"

# 5. Another model's checkpoint (mlp's) resumed by a bnnet run on the GPU.
(cd "$tmp/st" && ls -l --time-style=+%s.%N && md5sum -- *) >"$tmp/before"
"$herd" train "${b[@]}" --device "$dev" --checkpoint-dir "$tmp/st" --resume >/dev/null 2>"$tmp/err"
rc=$?
check "another model's checkpoint on $dev: exit 1 ($rc), saying so" \
  bash -c "test $rc -eq 1 && grep -q \"are of another run .*model 'mlp' .* there, 'bnnet' .* here\" '$tmp/err'"
(cd "$tmp/st" && ls -l --time-style=+%s.%N && md5sum -- *) >"$tmp/after"
check "another model's checkpoint on $dev: the directory untouched" cmp -s "$tmp/before" "$tmp/after"

summary "check_ckpt on $dev"
