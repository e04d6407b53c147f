#!/usr/bin/env bash
# Ranks agree or stop, under mpirun -np 2 through the CLI: every flag that changes the
# collectives or the update is compared at start (a difference names the rank, the
# field and both values), including a difference deep in a long model; --check-replicas
# stops a job whose replicas diverged (a test hook flips one bit on rank 1), on the CPU
# and on the simulated device; a stopped rank (SIGSTOP, rank 1 and rank 0) is named in
# the stall warning and the job aborts non-zero after --comm-timeout. Every mpirun runs
# under timeout; no timing assertions beyond generous bounds.
set -u
. "$(dirname "$0")/testlib.sh"
have_mpi || skip_all "herd built without MPI, or its launcher (HERD_MPIEXEC, set by ctest) missing"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun=("${mpiexec[@]}")
common=(train --data synthetic:1,12,12,4,500 --threads 1 --epochs 2 --batch-size 64 --quiet)

# mismatch NAME FIELD "FLAGS OF RANK 0" "FLAGS OF RANK 1" [MODEL0 MODEL1]
mismatch() {
  local name=$1 field=$2 model0=${5:-mlp} model1=${6:-mlp}
  local -a f0 f1
  read -r -a f0 <<<"$3"
  read -r -a f1 <<<"$4"
  local start=$(date +%s)
  timeout 60 "${mpirun[@]}" -np 1 "$herd" "${common[@]}" --model "$model0" "${f0[@]}" : \
    -np 1 "$herd" "${common[@]}" --model "$model1" "${f1[@]}" >"$tmp/out" 2>"$tmp/err"
  local rc=$? took=$(( $(date +%s) - start ))
  check "$name: non-zero exit within 30 s (exit $rc, ${took}s)" test $rc -ne 0 -a $rc -ne 124 -a $took -le 30
  check "$name: names rank 1 and the field $field" grep -q "rank 1 has $field=" "$tmp/err"
  grep -q "MPI_ERR_TRUNCATE" "$tmp/err" && check "$name: no MPI_ERR_TRUNCATE" false
}
mismatch "--bucket-mb" bucket_mb "--bucket-mb 1" "--bucket-mb 2"
mismatch "--train-samples" train_data "" "--train-samples 400"
check "the values of both ranks are shown" grep -q "rank 1 has train_data=400 samples.* but rank 0 has train_data=500 samples" "$tmp/err"
# Every field goes through the same comparison: a repeat pass (testlib.sh: sanitizers,
# MPICH) checks the two above.
if ! repeat_pass; then
  mismatch "--eval-every" eval_every "--eval-every 1" "--eval-every 2"
  mismatch "--check-replicas" check_replicas "" "--check-replicas"
  mismatch "--nesterov" nesterov "" "--nesterov"
  mismatch "--decoupled-decay" decoupled_decay "" "--decoupled-decay"
  mismatch "--warmup-epochs" warmup_epochs "" "--warmup-epochs 1"
  mismatch "--milestones" milestones "--schedule step --milestones 1" "--schedule step --milestones 2"
  mismatch "--label-smoothing" label_smoothing "" "--label-smoothing 0.1"
  mismatch "--max-steps" max_steps "" "--max-steps 3"
  mismatch "--grad-accum" grad_accum "" "--grad-accum 2"
  mismatch "--tensor-parallel" tensor_parallel "" "--tensor-parallel 2"
  mismatch "--test-samples" test_data "" "--test-samples 400"
fi

# The waits' tuning variables are read strictly: a unit or a typo is refused at start,
# naming it, rather than read as 0.
HERD_MPI_SPIN_US=5ms timeout 60 "${mpirun[@]}" -np 2 "$herd" "${common[@]}" --model mlp \
  >"$tmp/out" 2>"$tmp/err"
check "HERD_MPI_SPIN_US=5ms: refused (exit $?), naming the variable and its value" \
  grep -q "HERD_MPI_SPIN_US='5ms' is not a time in microseconds" "$tmp/err"

# Two 80-layer models that differ only in the width of the last hidden layer: long
# past any fixed-size description, the difference is still found and named.
python3 - "$tmp" <<'PY'
import json, sys
for width, name in ((8, "a"), (9, "b")):
    layers = [{"type": "flatten"}]
    for i in range(40):
        out = width if i == 39 else 8
        layers += [{"type": "linear", "name": "a_rather_long_layer_name_to_fill_a_layout_%02d" % i, "out": out},
                   {"type": "relu"}]
    layers.append({"type": "linear", "name": "fc", "out": "classes"})
    json.dump({"name": "deep", "layers": layers}, open("%s/deep_%s.json" % (sys.argv[1], name), "w"))
PY
mismatch "a difference in layer 79 of 82" "layer 7[0-9]" "" "" "$tmp/deep_a.json" "$tmp/deep_b.json"

# --check-replicas with one bit of one weight flipped on rank 1 after step 1, on the
# CPU and on the simulated device (whose parameters the check copies out).
for dev in cpu sim; do
  HERD_TEST_FAIL_AT=diverge:1 timeout 60 "${mpirun[@]}" -np 2 "$herd" "${common[@]}" --model mlp \
    --device $dev --check-replicas >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "--check-replicas on $dev, diverged replica: non-zero exit (exit $rc)" test $rc -ne 0 -a $rc -ne 124
  check "--check-replicas on $dev names the diverged rank" grep -q "replicas diverged at step 1: rank 1 differs from rank 0" "$tmp/err"
  HERD_TEST_FAIL_AT=diverge:1 timeout 60 "${mpirun[@]}" -np 2 "$herd" "${common[@]}" --model mlp \
    --device $dev >"$tmp/out" 2>"$tmp/err"
  check "the same divergence on $dev without --check-replicas goes unnoticed (the hook works)" test $? -eq 0
done

# A rank stops (SIGSTOP from a test hook before its second step): the other side
# names it after --stall-warning and the job aborts non-zero after --comm-timeout.
for stopped in 1 0; do
  start=$(date +%s)
  HERD_TEST_FAIL_AT=stop:$stopped timeout 90 "${mpirun[@]}" -np 2 "$herd" "${common[@]}" \
    --model mlp --stall-warning 1 --comm-timeout 8 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  took=$(( $(date +%s) - start ))
  check "rank $stopped stopped: non-zero exit, not the outer timeout (exit $rc, ${took}s)" \
    test $rc -ne 0 -a $rc -ne 124
  # Before it has been asked for 3 s it may still count as not arrived; then as silent.
  check "rank $stopped stopped: the warning names it" \
    grep -Eq "herd: warning: .*pending for [0-9]+ s.*; ranks (not yet arrived|unreachable): $stopped[ ]" "$tmp/err"
  check "rank $stopped stopped: the abort names it as silent on this host after the 8 s timeout" \
    grep -Eq "herd: error: rank [01] on host .*did not complete within 8 s \(stall timeout\); ranks unreachable: $stopped on [^ ]+ \(no answer for [0-9]+ s, (last heard at [0-9:]+ UTC|and none before); on this host, so the process is stopped or hung\); ending the job$" "$tmp/err"
done
finish
