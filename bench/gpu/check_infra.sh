#!/usr/bin/env bash
# Phase times and several ranks on one GPU (issue 25), about two minutes on one GPU:
#   1. herd bench train (resnet50, resnet20) on the device: forward, backward, exposed
#      communication and optimizer from the device timer add up to no more than the
#      step, and backward, the larger half of the arithmetic, is the longer phase;
#   2. herd train's metrics: the same within the step; a --timeline of bench train
#      checked by tests/check_timeline.py (printed, not required: layer events are the
#      host's launch times, phases the device's);
#   3. 2 ranks on one GPU: each says which GPU it took, rank 0 names the ranks sharing
#      it and reduces through MPI, the job ends as the same job on 2 CPU ranks does
#      (within rounding), bench train runs, and herd doctor warns of the sharing.
# usage: bench/gpu/check_infra.sh HERD [DEVICE]   (DEVICE: cuda, the default; sim checks
# the script itself without a GPU). MPIEXEC (default: mpiexec.hydra -launcher fork) starts
# the 2-rank jobs. With the bundle of ../shared/tools/gpu/bundle.sh BUILD mpiexec.hydra
# hydra_pmi_proxy, BUILD configured with -DHERD_MPI=mpich, on the device machine:
#   . .dev/env.sh && PATH=$PWD/.dev:$PATH LD_LIBRARY_PATH=$HL bench/gpu/check_infra.sh .dev/herd
# (MPICH's UCX finds its shared-memory module when .dev/ucx holds libuct_cma.so.0 and
# UCX_MODULE_DIR=$PWD/.dev/ucx).
# QUICK=1: small models and data (for checking the script on a CPU with sim).
# Prints one line per check and exits non-zero when one failed.
set -u
herd=$1
dev=${2:-cuda}
. "$(dirname "$0")/lib.sh"
read -r -a mpiexec <<<"${MPIEXEC:-mpiexec.hydra -launcher fork}"
# phases_within FILE: forward + backward + comm_wait + optimizer <= step (bench: *_ms).
phases_within() {
  awk -v f="$(field forward_ms "$1")" -v b="$(field backward_ms "$1")" \
      -v c="$(field comm_wait_ms "$1")" -v o="$(field optimizer_ms "$1")" \
      -v s="$(field step_ms "$1")" 'BEGIN { exit !(s > 0 && f + b + c + o <= s * 1.0001) }'
}
# python3 keeps its own libraries: not the bundle's LD_LIBRARY_PATH.
py() { env -u LD_LIBRARY_PATH python3 "$@"; }
longer() { awk -v a="$(field "$2" "$1")" -v b="$(field "$3" "$1")" 'BEGIN { exit !(a > b) }'; }

"$herd" --version
command -v nvidia-smi >/dev/null && nvidia-smi -L

# ---- 1. bench train: the device's phases
runs=("resnet50 synthetic:3,224,224,1000,512 64 20" "resnet20 synthetic:3,32,32,10,4096 128 40")
[ "${QUICK:-0}" = 1 ] && runs=("resnet20 synthetic:3,32,32,10,256 16 4")
for run in "${runs[@]}"; do
  read -r model data batch steps <<<"$run"
  "$herd" bench train --device "$dev" --model "$model" --data "$data" --batch-size "$batch" \
    --steps "$steps" --warmup 5 >"$tmp/$model.out" 2>"$tmp/$model.err"
  rc=$?
  tail -n 2 "$tmp/$model.out"
  check "$model bench on $dev: exits 0 ($rc)" test $rc -eq 0
  check "$model: forward+backward+comm+optimizer <= step_ms" phases_within "$tmp/$model.out"
  check "$model: backward ($(field backward_ms "$tmp/$model.out") ms) longer than forward ($(field forward_ms "$tmp/$model.out") ms)" \
    longer "$tmp/$model.out" backward_ms forward_ms
done
small=4096; [ "${QUICK:-0}" = 1 ] && small=256
"$herd" bench train --device "$dev" --model resnet20 --data synthetic:3,32,32,10,$small \
  --batch-size 16 --steps 5 --warmup 1 --timeline "$tmp/tl.json" >/dev/null 2>&1
echo "timeline of resnet20 on $dev (informational): $(py "$here/tests/check_timeline.py" "$tmp/tl.json" --ranks 1 --steps 6 2>&1 | head -n 4 | tr '\n' ' ')"

# ---- 2. herd train's metrics
"$herd" train --device "$dev" --model resnet20 --data synthetic:3,32,32,10,$((small / 2)) \
  --epochs 1 --batch-size 64 --metrics "$tmp/m.jsonl" --log-every 1 --quiet >"$tmp/train.out" 2>"$tmp/train.err"
check "resnet20 train on $dev: exits 0" test $? -eq 0
py - "$tmp/m.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
keys = ("data_wait_ms", "forward_ms", "backward_ms", "comm_wait_ms", "optimizer_ms")
steps = [r for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "step"]
bad = [r for r in steps if sum(r[k] for k in keys) > r["step_ms"] * 1.0001]
last = steps[-1] if steps else {}
print("%s: train metrics: phases within step_ms in %d of %d points (last: step %.2f ms, %s)" % (
    "ok" if steps and not bad else "FAIL", len(steps) - len(bad), len(steps),
    last.get("step_ms", -1), ", ".join("%s %.2f" % (k, last.get(k, -1)) for k in keys)))
sys.exit(0 if steps and not bad else 1)
PY

# ---- 3. two ranks on one GPU
two=(--model lenet5 --data synthetic:1,28,28,10,1024 --epochs 1 --batch-size 32 --seed 3)
timeout 300 "${mpiexec[@]}" -np 2 "$herd" train "${two[@]}" --device "$dev" >"$tmp/two.out" 2>"$tmp/two.err"
rc=$?
grep -E "local rank|share GPU|gradients reduced" "$tmp/two.err"
tail -n 1 "$tmp/two.out"
check "2 ranks on $dev: exit 0 ($rc)" test $rc -eq 0
timeout 300 "${mpiexec[@]}" -np 2 "$herd" train "${two[@]}" --device cpu >"$tmp/twocpu.out" 2>/dev/null
check "2 ranks on $dev end where 2 on the cpu do (train_loss $(field train_loss "$tmp/two.out") / $(field train_loss "$tmp/twocpu.out"))" \
  awk -v a="$(field train_loss "$tmp/two.out")" -v b="$(field train_loss "$tmp/twocpu.out")" \
  'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-3 * (b < 0 ? -b : b) + 1e-6) }'
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$dev" = cuda ] && [ "$gpus" -eq 1 ]; then
  check "each rank says which GPU it took" grep -q "local rank 1 of 2: GPU 0 of 1" "$tmp/two.err"
  check "rank 0 names the ranks sharing GPU 0 and reduces through MPI" \
    grep -q "ranks 0,1 on host .* share GPU 0 (.*): NCCL cannot put two ranks on one GPU, so gradients are reduced by MPI through host memory" "$tmp/two.err"
  check "... once" test "$(grep -c "share GPU" "$tmp/two.err")" -eq 1
  timeout 300 "${mpiexec[@]}" -np 2 "$herd" doctor >"$tmp/doc.out" 2>&1
  grep gpus_per_host "$tmp/doc.out" | head -n 2
  check "herd doctor under 2 ranks warns that they share GPU 0" \
    grep -q "local ranks 0,1 share GPU 0" "$tmp/doc.out"
else
  echo "skipped: the GPU-sharing lines (device $dev, $gpus GPU(s) listed)"
fi
timeout 300 "${mpiexec[@]}" -np 2 "$herd" bench train --device "$dev" --model resnet20 \
  --data synthetic:3,32,32,10,$small --batch-size 16 --steps 4 --warmup 1 >"$tmp/twob.out" 2>"$tmp/twob.err"
rc=$?
tail -n 1 "$tmp/twob.out"
check "2-rank bench on $dev: exits 0 ($rc)" test $rc -eq 0
check "2-rank bench: phases within the step" phases_within "$tmp/twob.out"

summary check_infra
