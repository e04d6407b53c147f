#!/usr/bin/env bash
# A diverging run (mlp at --lr 1000: the loss turns inf/NaN within a few steps) without a
# loss scaler: exit 1 naming the step and the tensor, no --save file, checkpoints free of
# NaN, a --timeline finished up to the failure; --on-nonfinite skip finishes with the
# steps counted, its --json line valid JSON; 2 ranks, plain, --zero 1
# and 2 pipeline stages stop together (no hang); and --device sim, whose memory the host cannot read.
set -u
. "$(dirname "$0")/testlib.sh"
data="synthetic:1,28,28,10,512"
diverge() { "$herd" train --model mlp --data "$data" --lr 1000 --max-steps 40 --batch-size 32 --threads 1 "$@"; }
finite() { # finite FILE...: every tensor of these safetensors files holds finite values
  python3 - "$@" <<'PY'
import json, math, struct, sys
for path in sys.argv[1:]:
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    for name, t in json.loads(raw[8:8 + n]).items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        a, b = t["data_offsets"]
        vals = struct.unpack("<%df" % ((b - a) // 4), raw[8 + n + a:8 + n + b])
        if not all(math.isfinite(v) for v in vals):
            sys.exit("%s: %s holds inf or NaN" % (path, name))
PY
}

diverge --checkpoint-dir "$tmp/ck" --checkpoint-every-steps 1 --save "$tmp/f.st" >"$tmp/out" 2>"$tmp/err"
rc=$?
cat "$tmp/err" | tail -1
check "divergence: exit 1" test $rc -eq 1
check "... naming the step and the tensor" \
  grep -qE "^herd: error: .*training diverged at step [0-9]+: (the loss is not finite|the gradient of '[a-z0-9_.]+' holds inf or NaN)" "$tmp/err"
check "... no --save file" test ! -e "$tmp/f.st"
check "... no summary" test ! -s "$tmp/out"
check "... the checkpoints written hold no NaN" bash -c "ls '$tmp'/ck/*.safetensors >/dev/null && $(declare -f finite); finite '$tmp'/ck/*.safetensors"

diverge --on-nonfinite skip --save "$tmp/s.st" >"$tmp/out" 2>"$tmp/err"
rc=$?
tail -1 "$tmp/out"
skipped=$(sed -n 's/.*skipped_steps=\([0-9]*\).*/\1/p' "$tmp/out")
check "--on-nonfinite skip: exit 0" test $rc -eq 0
check "... skipped_steps counted ($skipped)" test "${skipped:-0}" -gt 0
check "... the weights saved are finite" bash -c "$(declare -f finite); finite '$tmp/s.st'"
# --json stays JSON when a figure is not finite (null, as --metrics writes it).
diverge --on-nonfinite skip --max-steps 10 --json --quiet >"$tmp/out" 2>"$tmp/err"
check "--json with a NaN loss: one line that parses as JSON" python3 -c '
import json, sys
line = open(sys.argv[1]).read()
d = json.loads(line)
assert "nan" not in line and d["steps"] == 10, line' "$tmp/out"

# A divergence is a handled failure: the --timeline trace up to it is a whole file
# that says so, and herd plot draws it.
diverge --timeline "$tmp/dv.json" >/dev/null 2>&1
check "--timeline after a divergence: valid JSON, its steps, 'ended' by a failure" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
steps = [e for e in d["traceEvents"] if e.get("cat") == "step"]
assert steps and d["otherData"]["ended"].startswith("by a failure"), d["otherData"]' "$tmp/dv.json"
"$herd" plot --timeline "$tmp/dv.json" -o "$tmp/dv.png" >/dev/null 2>&1
check "... herd plot draws it" test -s "$tmp/dv.png"

diverge --on-nonfinite sometimes >/dev/null 2>"$tmp/err"
check "--on-nonfinite takes stop or skip (exit 2)" bash -c "test $? -eq 2 && grep -q 'on-nonfinite is stop or skip' '$tmp/err'"

diverge --device sim >/dev/null 2>"$tmp/err"
check "--device sim: exit 1 naming the step" bash -c "test $? -eq 1 && grep -q 'training diverged at step' '$tmp/err'"

if have_mpi; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
  for zero in "" "--zero 1" "--pipeline-stages 2"; do
    # shellcheck disable=SC2086
    timeout 120 "${mpiexec[@]}" -np 2 "$herd" train --model mlp --data "$data" --lr 1000 \
      --max-steps 40 --batch-size 32 --threads 1 $zero >"$tmp/out" 2>"$tmp/err"
    rc=$?
    check "2 ranks ${zero:-plain}: exit 1, no hang ($rc)" test $rc -eq 1
    check "... both ranks name the step (${zero:-plain})" \
      test "$(grep -c 'training diverged at step' "$tmp/err")" -eq 2
  done
else
  skipped_part "2 ranks under mpirun (herd built without MPI, or no launcher)"
fi

finish
