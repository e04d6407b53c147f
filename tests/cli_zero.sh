#!/usr/bin/env bash
# ZeRO (--zero 1|2) through the CLI under mpirun: 60 steps end on plain data
# parallelism's weights (bitwise where the sums run in the same order, 2 and 3 ranks,
# SGD and AdamW, with and without accumulation and loss scaling), each rank holds 1/N
# of the optimizer state, clipping matches one process, a checkpoint holds whole
# tensors and resumes on other rank counts as if never stopped, ZeRO inside pipeline
# stage groups, the timeline shows the reduce-scatters and all-gathers, and bad input
# is refused.
# The second argument names the device (cpu by default): on "sim", the simulated
# device (the CPU's arithmetic behind memory the host cannot touch), the same runs
# train on device buffers through the staged communicator, and each ZeRO run also
# ends bitwise on the CPU's weights. Parts whose features a device build does not
# offer are skipped, named; the refusals of bad input are the CPU run's alone.
set -u
. "$(dirname "$0")/testlib.sh"
have_mpi || skip_all "herd built without MPI, or its launcher (HERD_MPIEXEC, set by ctest) missing"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun=("${mpiexec[@]}")
dev=${2:-cpu}
common=(--model lenet5 --data synthetic:1,28,28,10,2400 --test-samples 240 --threads 1 --eval-every 0 --quiet)
train() { local np=$1; shift; timeout 180 "${mpirun[@]}" -np "$np" "$herd" train "${common[@]}" --device "$dev" "$@"; }
on_cpu() { local np=$1; shift; timeout 180 "${mpirun[@]}" -np "$np" "$herd" train "${common[@]}" --device cpu "$@"; }
# refused OUT: the run said the device does not offer a feature (not a failure here).
refused() { grep -q "not supported\|does not support" "$1"; }

# The same arithmetic as plain data parallelism, accumulated micro-batches included
# (reduced once, on the last): bitwise on 2 ranks, where a sum of two is the same in any
# order. On 3 the reduce-scatter's ring adds in another order than the allreduce, so
# within 1e-6, at learning rates where such rounding does not grow into different
# training (at --lr 0.02, plain data parallelism on 3 ranks and one process with the
# same global batch part by 2e-2 after 100 steps). A repeat pass (testlib.sh) runs 2
# ranks and AdamW only: 3 ranks and SGD run the same code.
nps=(2 3)
opts=("sgd --momentum 0.9 --lr 0.005" "adamw --lr 0.0002")
extras=("" "--grad-accum 2 --loss-scale dynamic")
repeat_pass && nps=(2) opts=("${opts[1]}") extras=("")
# Only the sanitizer pass repeats this test (tests/repeat_passes.txt). There it runs ZeRO
# on 2 ranks (above) and the parts whose lines of herd's code no other test of that pass
# reaches: the timeline's events and the refusals of bad input (clang's coverage, each
# process alone, 2026-12-06). The wires, overflow, clipping, checkpoints, pipeline stages
# and --sync-bn parts run code that pass's other tests run under ZeRO (cli_deterministic,
# cli_ckpt_integrity, cli_ckpt_steps, cli_tensor_parallel, cli_pipeline_gpt).
# Steps of the runs below; a repeat pass (testlib.sh), there for memory errors and the other
# MPI, runs the same code for fewer steps, as does the simulated device (its runs are
# checked bitwise against the CPU's).
steps=60 short=30 ck_samples=360 pp_samples=960
{ repeat_pass || [ "$dev" = sim ]; } && steps=20 short=10 ck_samples=240 pp_samples=320
# On sim the same code runs on device buffers: 2 ranks and SGD (AdamW's update is the
# same backend call on both devices), to keep the suite's time; each run is also checked
# bitwise against the CPU's.
[ "$dev" = sim ] && nps=(2) opts=("${opts[0]}")
for np in "${nps[@]}"; do
  for opt in "${opts[@]}"; do
    for extra in "${extras[@]}"; do
      args=(--epochs 1 --max-steps $steps --batch-size 8 --optimizer $opt $extra)
      what="$np ranks on $dev, ${opt%% *}${extra:+, $extra}"
      train "$np" "${args[@]}" --save "$tmp/plain.st" >"$tmp/plain.out" 2>&1
      rc=$?
      if [ $rc -ne 0 ] && [ "$dev" != cpu ] && refused "$tmp/plain.out"; then
        skipped_part "$what: $(grep -m1 error "$tmp/plain.out")"
        continue
      fi
      check "$what: plain data parallelism trains" test $rc -eq 0
      for z in 1 2; do
        train "$np" "${args[@]}" --zero $z --save "$tmp/z.st" >"$tmp/z.out" 2>&1
        check "$what, --zero $z: exit 0" test $? -eq 0
        if [ "$dev" = sim ]; then
          on_cpu "$np" "${args[@]}" --zero $z --save "$tmp/zcpu.st" >/dev/null 2>&1
          check "$what, --zero $z: bitwise the CPU's weights" cmp -s "$tmp/zcpu.st" "$tmp/z.st"
        fi
        if [ $np = 3 ]; then
          d=$(maxdiff "$tmp/plain.st" "$tmp/z.st")
          check "$what, --zero $z: plain's weights within 1e-6 ($d)" within "$d" 1e-6
        else
          check "$what, --zero $z: bitwise plain's weights" cmp -s "$tmp/plain.st" "$tmp/z.st"
        fi
        check "$what, --zero $z: the same train_loss (4 digits)" \
          test "$(key train_loss "$tmp/z.out")" = "$(key train_loss "$tmp/plain.out")"
        p=$(key optimizer_state_bytes "$tmp/plain.out") s=$(key optimizer_state_bytes "$tmp/z.out")
        check "$what, --zero $z: optimizer state $s bytes <= 1/$np of $p + 1%" \
          awk -v s="$s" -v p="$p" -v n="$np" 'BEGIN { exit !(s > 0 && s <= p / n * 1.01) }'
        g=$(key grad_bytes "$tmp/z.out") pg=$(key grad_bytes "$tmp/plain.out")
        # On a device the gradients stay one whole buffer (backward writes into it).
        if [ $z = 2 ] && [ "$dev" = cpu ]; then
          check "$what, --zero 2: gradients held $g bytes <= 1/$np of $pg + 1%" \
            awk -v s="$g" -v p="$pg" -v n="$np" 'BEGIN { exit !(s > 0 && s <= p / n * 1.01) }'
        fi
      done
    done
  done
done

if ! repeat_pass; then
# The 16-bit wires: each rank casts its slice of the sum the same way.
wires=(fp16 bf16)
for wire in "${wires[@]}"; do
  train 2 --epochs 1 --max-steps $steps --batch-size 8 --compress $wire --save "$tmp/plain.st" >/dev/null 2>&1
  train 2 --epochs 1 --max-steps $steps --batch-size 8 --compress $wire --zero 2 --save "$tmp/z.st" >/dev/null 2>&1
  check "--compress $wire --zero 2: bitwise plain's weights" cmp -s "$tmp/plain.st" "$tmp/z.st"
done

# Overflow found on one rank's slice skips the step on every rank: rank 1 alone finds
# inf in its slice of the first step (HERD_TEST_FAIL_AT=overflow:1), and rank 0's
# summary counts the skip; the weights are those of the same run where rank 0 found it.
ls=(--epochs 1 --max-steps $short --batch-size 8 --loss-scale dynamic)
for who in 0 1; do
  HERD_TEST_FAIL_AT=overflow:$who train 2 "${ls[@]}" --zero 1 --save "$tmp/over$who.st" \
    >"$tmp/over$who.out" 2>&1
  check "overflow on rank $who's slice only: every rank skipped the step" \
    test "$(key skipped_steps "$tmp/over$who.out")" = 1
done
check "... the same weights whichever rank found it" cmp -s "$tmp/over0.st" "$tmp/over1.st"
train 2 "${ls[@]}" --zero 1 --save "$tmp/z.st" >/dev/null 2>&1
check "... not those of a run that skipped nothing" bash -c "! cmp -s '$tmp/z.st' '$tmp/over1.st'"

# Clipping: the norm from each rank's slice, as one process (on the CPU) with the same
# global batch.
timeout 120 "$herd" train "${common[@]}" --device cpu --epochs 1 --max-steps $short --batch-size 8 \
  --grad-accum 2 --clip-grad-norm 0.1 --save "$tmp/one.st" >"$tmp/one.out" 2>&1
train 2 --epochs 1 --max-steps $short --batch-size 8 --zero 1 --clip-grad-norm 0.1 \
  --save "$tmp/z.st" >"$tmp/z.out" 2>&1
check "--clip-grad-norm with --zero 1: every step clipped, as one process" \
  test "$(key clipped_steps "$tmp/z.out")" = $short -a "$(key clipped_steps "$tmp/one.out")" = $short
d=$(maxdiff "$tmp/one.st" "$tmp/z.st")
check "... and one process's weights within 1e-6 ($d)" within "$d" 1e-6

# Checkpoints hold whole tensors: ZeRO's files are plain data parallelism's, bit for bit.
saved=(--epochs 2 --batch-size 6 --optimizer adamw --lr 0.0002)
ckpt=1 # whether this device checkpoints (ZeRO's slices staged through the host)
train 2 "${saved[@]}" --max-steps 30 --checkpoint-dir "$tmp/ckp" >"$tmp/ckp.out" 2>&1
if [ $? -ne 0 ] && [ "$dev" != cpu ] && refused "$tmp/ckp.out"; then
  ckpt=0
  skipped_part "checkpoints on $dev: $(grep -m1 error "$tmp/ckp.out")"
fi
if [ $ckpt = 1 ]; then
  train 2 "${saved[@]}" --max-steps 30 --checkpoint-dir "$tmp/ckz" --zero 2 >/dev/null 2>&1
  check "a ZeRO checkpoint's state file is plain data parallelism's" \
    cmp -s "$tmp/ckp/ckpt-30.state.safetensors" "$tmp/ckz/ckpt-30.state.safetensors"
  check "... and so is its weights file" \
    cmp -s "$tmp/ckp/ckpt-30.safetensors" "$tmp/ckz/ckpt-30.safetensors"

  # Saved with 3 ranks under --zero 1 (global batch 12), resumed with 3, 2 (--zero 2 and
  # without) and 1 rank at the same global batch. With 3 ranks: bitwise the run never
  # stopped; with 2, ZeRO-2 resumes bitwise as plain data parallelism does from the same
  # file. Fewer ranks add the gradients in another order: with SGD the same losses (to
  # the 4 digits printed) and the weights within 1e-6 of the never-stopped run over these
  # 60 steps (past ~120 the orders part for good even without ZeRO: plain 3 and 1 ranks
  # were 1e-3 apart after 150 steps, measured); AdamW divides by the root of each
  # gradient's running square, so the rounding of gradients near zero moves weights by
  # up to lr x steps (measured: 2e-3 after 200 steps at --lr 0.0002, in conv1/conv2),
  # and only the exact checks are made for it.
  for opt in "${opts[@]}"; do
    o=${opt%% *}
    ck=(--epochs 2 --optimizer $opt --data synthetic:1,28,28,10,$ck_samples)
    train 3 "${ck[@]}" --batch-size 4 --zero 1 --save "$tmp/full.st" >"$tmp/full.out" 2>&1
    train 3 "${ck[@]}" --batch-size 4 --zero 1 --max-steps 30 --checkpoint-dir "$tmp/ck3" >/dev/null 2>&1
    for v in "3 4 --zero 1" "2 6 --zero 2" "2 6" "1 12"; do
      set -- $v
      np=$1 b=$2
      shift 2
      rm -rf "$tmp/ckr" && cp -r "$tmp/ck3" "$tmp/ckr"
      res="$tmp/res_$np$*.st"
      train "$np" "${ck[@]}" --batch-size "$b" "$@" --checkpoint-dir "$tmp/ckr" --resume \
        --save "$res" >"$tmp/res.out" 2>&1
      cp "$tmp/res.out" "${res%.st}.out"
      what="$o: saved by 3 ranks with --zero 1, resumed by $np ${*:-without ZeRO}"
      check "$what: exit 0" test $? -eq 0
      if [ $np = 3 ]; then
        check "$what: bitwise the never-stopped weights" cmp -s "$tmp/full.st" "$res"
      elif [ $o = sgd ]; then
        check "$what: the never-stopped run's train_loss" \
          test "$(key train_loss "$tmp/res.out")" = "$(key train_loss "$tmp/full.out")"
        d=$(maxdiff "$tmp/full.st" "$res")
        check "$what: the never-stopped weights within 1e-6 ($d)" within "$d" 1e-6
      fi
    done
    # (it failed once in 40-odd suite runs, 2026-12-06, not reproduced since: the note says
    # what differed, should it fail again)
    same_bytes "$o: resumed by 2 with --zero 2: bitwise as plain data parallelism resumed" \
      "$tmp/res_2--zero 2.st" "$tmp/res_2.st" \
      "train_loss $(key train_loss "$tmp/res_2--zero 2.out") and $(key train_loss "$tmp/res_2.out")"
    rm -rf "$tmp/ck3"
  done
fi

# Inside pipeline stage groups: 2 stages x 2 replicas, each stage's optimizer state
# sharded between its 2 replicas: bitwise the same pipeline without ZeRO, clipping and
# loss scaling included; its checkpoint (the optimizer state through each stage's first
# replica) is the plain pipeline's, and resumes on the plain pipeline bitwise.
pp=(--data synthetic:1,28,28,10,$pp_samples --epochs 2 --batch-size 16 --micro-batches 2 --pipeline-stages 2)
ppopts=("adamw --lr 0.0002" "sgd --lr 0.005 --loss-scale dynamic --clip-grad-norm 0.1")
for opt in "${ppopts[@]}"; do
  train 4 "${pp[@]}" --optimizer $opt --save "$tmp/pp.st" >"$tmp/pp.out" 2>&1
  if [ "$dev" = sim ]; then
    on_cpu 4 "${pp[@]}" --optimizer $opt --save "$tmp/ppcpu.st" >/dev/null 2>&1
    check "2 stages x 2 replicas on sim, ${opt%% *}: bitwise the CPU's pipeline" \
      cmp -s "$tmp/ppcpu.st" "$tmp/pp.st"
  fi
  for z in 1 2; do
    train 4 "${pp[@]}" --optimizer $opt --zero $z --save "$tmp/ppz.st" >"$tmp/ppz.out" 2>&1
    check "2 stages x 2 replicas, ${opt%% *}, --zero $z: bitwise the pipeline without ZeRO" \
      cmp -s "$tmp/pp.st" "$tmp/ppz.st"
  done
done
check "... every step clipped" grep -q "clipped_steps=$((pp_samples / 16)) " "$tmp/ppz.out"
pa=(--optimizer adamw --lr 0.0002)
if [ $ckpt = 1 ]; then
  train 4 "${pp[@]}" "${pa[@]}" --zero 1 --max-steps 12 --checkpoint-dir "$tmp/ckpz" >/dev/null 2>&1
  train 4 "${pp[@]}" "${pa[@]}" --max-steps 12 --checkpoint-dir "$tmp/ckpp" >/dev/null 2>&1
  check "2 stages x 2 replicas with --zero 1: the checkpoint's state file is the plain pipeline's" \
    cmp -s "$tmp/ckpz/ckpt-12.state.safetensors" "$tmp/ckpp/ckpt-12.state.safetensors"
  train 4 "${pp[@]}" "${pa[@]}" --zero 2 --checkpoint-dir "$tmp/ckpz" --resume --save "$tmp/ppr.st" \
    >/dev/null 2>&1
  train 4 "${pp[@]}" "${pa[@]}" --save "$tmp/pp.st" >/dev/null 2>&1
  check "... resumed with --zero 2: bitwise the never-stopped plain pipeline" cmp -s "$tmp/pp.st" "$tmp/ppr.st"
fi
fi

# The timeline: each bucket's reduce-scatter and all-gather on the communication track,
# and the all-gathers still running after their step ended (the training thread went
# on to the next step; its forward waits per layer for its own bucket only).
train 2 --model resnet20 --data synthetic:3,32,32,10,64 --epochs 1 --max-steps 3 --batch-size 8 \
  --zero 1 --timeline "$tmp/trace.json" >/dev/null 2>&1
check "timeline: reduce-scatter and all-gather events, no allreduce" python3 - "$tmp/trace.json" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
names = {e.get("name", "") for e in ev if e.get("cat") == "comm"}
sys.exit(0 if any(n.startswith("reduce-scatter bucket") for n in names)
         and any(n.startswith("all-gather bucket") for n in names)
         and not any(n.startswith("allreduce bucket") for n in names) else 1)
PY
check "timeline: all-gathers launched in a step and ending after it" python3 - "$tmp/trace.json" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
steps = [e for e in ev if e.get("cat") == "step"]
late = 0
for a in (e for e in ev if e.get("cat") == "comm" and e["name"].startswith("all-gather")):
    launched, end = a["ts"] - a["args"]["queued_us"], a["ts"] + a["dur"]
    late += any(s["pid"] == a["pid"] and s["ts"] <= launched <= s["ts"] + s["dur"] < end
                for s in steps)
sys.exit(0 if late > 0 else 1)
PY

if ! repeat_pass; then
# With batch norm, --sync-bn and --check-replicas: the replicas stay bitwise equal.
train 2 --model resnet20 --data synthetic:3,32,32,10,64 --epochs 1 --batch-size 8 --zero 2 \
  --sync-bn --check-replicas >"$tmp/bn.out" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ "$dev" != cpu ] && refused "$tmp/bn.out"; then
  skipped_part "--sync-bn and --check-replicas on $dev: $(grep -m1 error "$tmp/bn.out")"
else
  check "--zero 2 with --sync-bn and --check-replicas: exit 0" test $rc -eq 0
fi
fi

# Bad input, refused before training on every rank (whatever the device: on the CPU).
[ "$dev" = cpu ] || finish
"$herd" train "${common[@]}" --zero 3 >"$tmp/bad.out" 2>&1
check "--zero 3: exit 2 naming what is offered" \
  bash -c "[ $? -eq 2 ] && grep -q -- '--zero 3 (sharding the parameters as well) is not offered; use --zero 1' '$tmp/bad.out'"
"$herd" train "${common[@]}" --zero x >"$tmp/bad.out" 2>&1
check "--zero x: exit 2" bash -c "[ $? -eq 2 ] && grep -q -- \"--zero is 1 or 2, got 'x'\" '$tmp/bad.out'"
train 1 --epochs 1 --zero 1 >"$tmp/bad.out" 2>&1
check "--zero with one rank: refused, saying why" \
  bash -c "[ $? -ne 0 ] && grep -q 'this job has one; start several' '$tmp/bad.out'"
train 2 --epochs 1 --batch-size 8 --zero 1 --pipeline-stages 2 >"$tmp/bad.out" 2>&1
check "--zero with 2 stages on 2 ranks (one replica): refused on every rank" \
  bash -c "[ $? -ne 0 ] && [ \$(grep -c -- 'and 2 ranks in 2 stages give one; start at least 4 ranks' '$tmp/bad.out') -ge 2 ]"
repeat_pass && finish
# A checkpoint whose optimizer state lacks a tensor the optimizer needs: named (its
# checksum re-made, so the check of the tensors is what objects).
python3 "$here/ckpt_edit.py" "$tmp/ckz/ckpt-30.state.safetensors" exp_avg_sq rename exp_avg_sx --fix
train 2 "${saved[@]}" --zero 2 --checkpoint-dir "$tmp/ckz" --resume >"$tmp/bad.out" 2>&1
check "a checkpoint without the optimizer's exp_avg_sq: refused, naming the tensor" \
  bash -c "[ $? -ne 0 ] && grep -q \"lacks optimizer state 'exp_avg_sq'\" '$tmp/bad.out'"
train 2 --epochs 2 --batch-size 6 --optimizer sgd --zero 1 --checkpoint-dir "$tmp/ckp" --resume \
  >"$tmp/bad.out" 2>&1
check "an AdamW checkpoint resumed with SGD under --zero: refused, naming both" \
  bash -c "[ $? -ne 0 ] && grep -q \"was saved with optimizer 'adamw' but this run uses 'sgd'\" '$tmp/bad.out'"

finish
