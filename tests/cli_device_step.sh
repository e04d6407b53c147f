#!/usr/bin/env bash
# The step's features on a device, through the CLI: --grad-accum, --clip-grad-norm,
# --loss-scale dynamic, --histograms, and with 2 ranks --sync-bn and --check-replicas,
# on the simulated device ("sim": the CPU's arithmetic behind device memory the host
# cannot touch) against the same runs on the CPU, weights bit for bit. On a GPU the
# same commands with --device cuda check it (its arithmetic differs: tolerances
# replace cmp). Under the sanitizers the histograms alone: the other runs reach no line of
# herd's code that the pass's other tests do not (clang's coverage of each process,
# 2026-12-07: tests/repeat_passes.txt).
set -u
. "$(dirname "$0")/testlib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
common=(train --threads 1 --epochs 2 --batch-size 16 --quiet)
mlp=(--model mlp --data synthetic:1,12,12,4,256)
bn=(--model "$here/models/bnnet.json" --data synthetic:1,16,16,10,480)
# on DEVICE NAME FLAGS...: one process trains; its weights go to $tmp/NAME-DEVICE.st.
on() {
  local dev=$1 name=$2
  shift 2
  "$herd" "${common[@]}" --device "$dev" --save "$tmp/$name-$dev.st" "$@" \
    >"$tmp/$name-$dev.out" 2>"$tmp/$name-$dev.err"
}
# same NAME WHAT FLAGS...: the CPU and sim train alike, to the bit.
same() {
  local name=$1 what=$2
  shift 2
  on cpu "$name" "$@"
  local rc_cpu=$?
  on sim "$name" "$@"
  local rc_sim=$?
  check "$what: exits 0 on cpu and sim ($rc_cpu, $rc_sim: $(tail -n 1 "$tmp/$name-sim.err"))" \
    test $rc_cpu -eq 0 -a $rc_sim -eq 0
  check "$what: sim's weights are the CPU's, bit for bit" cmp -s "$tmp/$name-cpu.st" "$tmp/$name-sim.st"
}

if ! sanitizer_pass; then
same accum "--grad-accum 2" "${mlp[@]}" --grad-accum 2
check "--grad-accum 2 on sim: 8 steps per epoch" grep -q "steps=16 " "$tmp/accum-sim.out"
on sim plain "${mlp[@]}"
check "--grad-accum 2 changed the training (the comparison can tell)" \
  bash -c "test $? -eq 0 && ! cmp -s '$tmp/accum-sim.st' '$tmp/plain-sim.st'"

same clip "--clip-grad-norm with --grad-accum 2" "${mlp[@]}" --grad-accum 2 --clip-grad-norm 0.05
check "--clip-grad-norm on sim clipped every step" grep -q "clipped_steps=16" "$tmp/clip-sim.out"

# The scale grows every 4 clean steps, as on the CPU (a skipped step on sim:
# test_loss_scale).
same scale "--loss-scale dynamic" "${mlp[@]}" --grad-accum 2 --loss-scale dynamic \
  --loss-scale-init 1024 --loss-scale-window 4
check "--loss-scale dynamic on sim: the scale grew 4 times, as on the CPU" \
  bash -c "grep -q 'loss_scale=16384 skipped_steps=0' '$tmp/scale-sim.out' && grep -q 'loss_scale=16384 skipped_steps=0' '$tmp/scale-cpu.out'"
same bnscale "batch norm, --loss-scale dynamic, --clip-grad-norm" "${bn[@]}" --loss-scale dynamic \
  --clip-grad-norm 0.5
fi

# --histograms: the device's weights and gradients are copied out for them; the
# histogram events (all but their wall time) are the CPU's.
for dev in cpu sim; do
  on $dev histo "${mlp[@]}" --grad-accum 2 --logdir "$tmp/tb-$dev" --histograms 4
  check "--histograms on $dev: exit 0" test $? -eq 0
done
check "--histograms on sim: the histogram events are the CPU's" python3 - "$here" "$tmp/tb-cpu" "$tmp/tb-sim" <<'PY'
import glob, sys
sys.path.insert(0, sys.argv[1])
from check_tensorboard import records
def histos(d):
    (path,) = glob.glob(d + "/events.out.tfevents.*")
    rs = records(path)
    # An Event starts with its wall_time (field 1, 8 bytes); the step and the summary follow.
    assert all(r[0] == 0x09 for r in rs)
    return [r[9:] for r in rs if b"weights/" in r or b"grads/" in r]
a, b = histos(sys.argv[2]), histos(sys.argv[3])
print("%d histogram events on the CPU, %d on sim" % (len(a), len(b)))
sys.exit(not (a and a == b))
PY

if sanitizer_pass; then
  : # the ranks' lines are the pass's other tests'
elif have_mpi; then
  mpirun=("${mpiexec[@]}")
  # two DEVICE NAME FLAGS...: 2 ranks train; rank 0 saves $tmp/NAME-DEVICE.st.
  two() {
    local dev=$1 name=$2
    shift 2
    timeout 300 "${mpirun[@]}" -np 2 "$herd" "${common[@]}" --device "$dev" \
      --save "$tmp/$name-$dev.st" "$@" >"$tmp/$name-$dev.out" 2>"$tmp/$name-$dev.err"
  }
  step=(--batch-size 8 --grad-accum 2 --clip-grad-norm 0.5 --loss-scale dynamic)
  two cpu sync "${bn[@]}" "${step[@]}" --sync-bn --check-replicas
  rc_cpu=$?
  two sim sync "${bn[@]}" "${step[@]}" --sync-bn --check-replicas
  rc_sim=$?
  check "2 ranks, --sync-bn --grad-accum 2 --check-replicas: exit 0 on cpu and sim ($rc_cpu, $rc_sim: $(tail -n 1 "$tmp/sync-sim.err"))" \
    test $rc_cpu -eq 0 -a $rc_sim -eq 0
  check "2 ranks with --sync-bn: sim's weights are the CPU's, bit for bit" \
    cmp -s "$tmp/sync-cpu.st" "$tmp/sync-sim.st"
  # Without --sync-bn each rank normalises by its own batch: other weights (the
  # comparison can tell synchronised BN from local).
  two sim local "${bn[@]}" "${step[@]}"
  check "2 ranks on sim without --sync-bn end elsewhere" \
    bash -c "test $? -eq 0 && ! cmp -s '$tmp/sync-sim.st' '$tmp/local-sim.st'"
else
  skipped_part "2 ranks with --sync-bn and --check-replicas on sim (no MPI launcher)"
fi
finish
