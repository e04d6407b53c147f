#!/usr/bin/env bash
# --device sim from the CLI: the same training as --device cpu (one rank and, with MPI,
# two, whose gradients go through the staged communicator), its memory cap, and its
# refusal of precisions it does not simulate. Library-level equality, bit for bit, is
# tests/test_backend_sim.c's. Under the sanitizers, of the language model's runs and those
# under the launcher only 2 stages x 2 tensor parts on sim resumed from one process's
# checkpoint: the others reach no line of herd's code that the pass's other tests do not
# (clang's coverage of each process, 2026-12-07: tests/repeat_passes.txt).
set -u
. "$(dirname "$0")/testlib.sh"
data="synthetic:1,12,12,4,256"
train() { "$herd" train --model mlp --data "$data" --epochs 1 --batch-size 32 --threads 1 --json "$@"; }
# The summary's values that must not depend on the device (no timings, names or memory).
results() { python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(" ".join("%s=%s" % (k, d[k]) for k in ("steps", "train_loss", "train_acc", "test_loss", "test_acc")))' "$1"; }

"$herd" train --help >"$tmp/help" 2>&1
check "train --help documents --device sim" grep -q "sim: a simulated device for tests" "$tmp/help"

train --device cpu >"$tmp/cpu.json" 2>"$tmp/err"
check "mlp trains on the cpu" test $? -eq 0
train --device sim >"$tmp/sim.json" 2>"$tmp/err"
check "mlp trains on sim" test $? -eq 0
check "the header names the device" grep -q "herd: device sim, precision fp32" "$tmp/err"
check "the summary names the device" grep -q '"device": "sim"' "$tmp/sim.json"
check "sim ends where the cpu does ($(results "$tmp/sim.json"))" \
  test "$(results "$tmp/sim.json")" = "$(results "$tmp/cpu.json")"

train --device sim --gpu-memory-limit 1M >/dev/null 2>"$tmp/err"
check "--gpu-memory-limit 1M on sim exits 1 at the first allocation over it" \
  bash -c "test $? -eq 1 && grep -q 'memory limit reached' '$tmp/err'"
train --device sim --gpu-memory-limit 64M >/dev/null 2>"$tmp/err"
check "--gpu-memory-limit 64M on sim trains" test $? -eq 0
train --device sim --memory-limit 1M >/dev/null 2>"$tmp/err"
check "--memory-limit 1M on sim exits 1" bash -c "test $? -eq 1 && grep -q 'memory limit reached' '$tmp/err'"
train --device sim --precision bf16 >/dev/null 2>"$tmp/err"
check "--precision bf16 on sim exits 1 naming sim" \
  bash -c "test $? -eq 1 && grep -q 'not available on the sim backend' '$tmp/err'"

# A language model behind device memory: embeddings, layer norm, attention, GELU and the
# tied head on sim give the CPU's bytes (one rank here, two pipeline stages below).
gpt=()
if [ -d /usr/share/common-licenses ]; then
  token_corpus
  gpt=(train --model gpt-nano --data "tokens:$tmp/t_train.bin,256" --seq-len 32 --batch-size 8
       --max-steps 6 --epochs 1 --optimizer adamw --lr 0.003 --threads 1 --seed 3 --test-samples 16
       --quiet)
fi
if [ ${#gpt[@]} -gt 0 ] && sanitizer_pass; then
  if have_mpi; then
    "$herd" "${gpt[@]}" --max-steps 3 --device sim --checkpoint-dir "$tmp/ck2.sim" \
      --checkpoint-every-steps 3 >/dev/null 2>&1
    timeout 300 "${mpiexec[@]}" -np 4 "$herd" "${gpt[@]}" --tensor-parallel 2 --pipeline-stages 2 \
      --device sim --checkpoint-dir "$tmp/ck2.sim" --save "$tmp/gpt.pptp.sim.st" >"$tmp/err2" 2>&1
    check "2 stages x 2 tensor parts on sim, resumed from one process's checkpoint: exit 0" test $? -eq 0
  fi
  finish
elif [ ${#gpt[@]} -gt 0 ]; then
  "$herd" "${gpt[@]}" --device cpu --save "$tmp/gpt.cpu.st" >/dev/null 2>&1
  "$herd" "${gpt[@]}" --device sim --save "$tmp/gpt.sim.st" >"$tmp/err" 2>&1
  check "gpt-nano on sim gives the CPU's bytes" cmp "$tmp/gpt.cpu.st" "$tmp/gpt.sim.st"
else
  skipped_part "gpt-nano on sim (no /usr/share/common-licenses to tokenise)"
fi

if have_mpi; then
  if [ ${#gpt[@]} -gt 0 ]; then
    for d in cpu sim; do
      timeout 300 "${mpiexec[@]}" -np 2 "$herd" "${gpt[@]}" --pipeline-stages 2 --device $d \
        --save "$tmp/gpt.pp.$d.st" >"$tmp/err2" 2>&1
    done
    check "gpt-nano in 2 pipeline stages on sim (the tied table exchanged in device memory): the CPU's bytes" \
      cmp "$tmp/gpt.pp.cpu.st" "$tmp/gpt.pp.sim.st"
    # Tensor parallelism on device memory: the group's sums through the staged
    # communicator, the vocabulary-parallel loss's stats through the host, the parts of a
    # checkpoint gathered at T = 2 and handed out again from one saved at T = 1.
    for d in cpu sim; do
      timeout 300 "${mpiexec[@]}" -np 2 "$herd" "${gpt[@]}" --tensor-parallel 2 --device $d \
        --save "$tmp/gpt.tp.$d.st" >"$tmp/err2" 2>&1
      "$herd" "${gpt[@]}" --max-steps 3 --device $d --checkpoint-dir "$tmp/ck1.$d" \
        --checkpoint-every-steps 3 >/dev/null 2>&1
      cp -r "$tmp/ck1.$d" "$tmp/ck2.$d"
      timeout 300 "${mpiexec[@]}" -np 2 "$herd" "${gpt[@]}" --tensor-parallel 2 --device $d \
        --checkpoint-dir "$tmp/ck1.$d" --save "$tmp/gpt.tpres.$d.st" >"$tmp/err2" 2>&1
    done
    check "gpt-nano at --tensor-parallel 2 on sim: the CPU's bytes" \
      cmp "$tmp/gpt.tp.cpu.st" "$tmp/gpt.tp.sim.st"
    check "... and resumed at T = 2 from a checkpoint of one process: the CPU's bytes" \
      cmp "$tmp/gpt.tpres.cpu.st" "$tmp/gpt.tpres.sim.st"
    check "... which are the uninterrupted run's" cmp "$tmp/gpt.tp.sim.st" "$tmp/gpt.tpres.sim.st"
    # 2 stages x 2 parts resumed from the one-process checkpoint: each stage part's
    # tensors handed out, and gathered for --save, through the host.
    for d in cpu sim; do
      timeout 300 "${mpiexec[@]}" -np 4 "$herd" "${gpt[@]}" --tensor-parallel 2 --pipeline-stages 2 \
        --device $d --checkpoint-dir "$tmp/ck2.$d" --save "$tmp/gpt.pptp.$d.st" >"$tmp/err2" 2>&1
    done
    check "2 stages x 2 tensor parts on sim, resumed from one process's checkpoint: the CPU's bytes" \
      cmp "$tmp/gpt.pptp.cpu.st" "$tmp/gpt.pptp.sim.st"
  fi
  timeout 300 "${mpiexec[@]}" -np 2 "$herd" train --model mlp --data "$data" --epochs 1 \
    --batch-size 16 --threads 1 --json --device cpu >"$tmp/cpu2.json" 2>"$tmp/err2"
  check "2 ranks train on the cpu" test $? -eq 0
  timeout 300 "${mpiexec[@]}" -np 2 "$herd" train --model mlp --data "$data" --epochs 1 \
    --batch-size 16 --threads 1 --json --device sim >"$tmp/sim2.json" 2>"$tmp/err2"
  check "2 ranks train on sim" test $? -eq 0
  check "... reducing through host memory" grep -q "gradients reduced by MPI through host memory" "$tmp/err2"
  check "2 ranks on sim end where 2 on the cpu do ($(results "$tmp/sim2.json"))" \
    test "$(results "$tmp/sim2.json")" = "$(results "$tmp/cpu2.json")"
else
  skipped_part "2 ranks on sim (no MPI launcher)"
fi

finish
