#!/usr/bin/env bash
# The GPU training flags from the CLI on any machine: what the CPU refuses (and how),
# dynamic loss scaling on the CPU, the summary's device and precision, --version.
set -u
. "$(dirname "$0")/testlib.sh"
data="synthetic:1,12,12,4,256"
train() { "$herd" train --model mlp --data "$data" --epochs 1 --batch-size 32 --threads 1 --device cpu "$@"; }

"$herd" --version >"$tmp/version"
check "--version names the backends and MPI" bash -c "grep -q 'backends: cpu' '$tmp/version' && grep -q 'MPI' '$tmp/version' && grep -q 'NCCL' '$tmp/version'"

train --precision tf32 >/dev/null 2>"$tmp/err"
check "--precision tf32 on the CPU exits 1" test $? -eq 1
check "... saying the CPU computes in fp32 or bf16" grep -q "computes in fp32 or bf16; --precision tf32 needs --device cuda" "$tmp/err"
train --precision fp8 >/dev/null 2>"$tmp/err"
check "--precision fp8 is a usage error" test $? -eq 2
"$herd" bench train --model mlp --data "$data" --device cpu --precision tf32 --steps 1 >/dev/null 2>"$tmp/err"
check "bench --precision tf32 on the CPU exits 1" bash -c "test $? -eq 1 && grep -q 'needs --device cuda' '$tmp/err'"

train --gpu-memory-limit 1G >/dev/null 2>"$tmp/err"
check "--gpu-memory-limit with the CPU is a usage error" bash -c "test $? -eq 2 && grep -q 'is for GPUs' '$tmp/err'"
"$herd" train --model mlp --device cuda --gpu-memory-limit 12Q >/dev/null 2>"$tmp/err"
check "a bad size is a usage error" bash -c "test $? -eq 2 && grep -q 'gpu-memory-limit takes a size' '$tmp/err'"
train --device tpu >/dev/null 2>"$tmp/err"
check "an unknown device exits 1 naming it" bash -c "test $? -eq 1 && grep -q \"unknown device 'tpu'\" '$tmp/err'"

train --loss-scale dynamic --loss-scale-init 1024 --loss-scale-window 3 --log-every 4 \
  >"$tmp/out" 2>"$tmp/err"
check "--loss-scale dynamic trains on the CPU" test $? -eq 0
last=$(tail -n 1 "$tmp/out")
# 8 clean steps with a window of 3: two doublings.
check "summary has loss_scale=4096 skipped_steps=0 ($last)" bash -c "[[ '$last' == *loss_scale=4096* && '$last' == *skipped_steps=0* ]]"
check "progress lines show the loss scale" grep -q "loss scale 2048 (0 skipped)" "$tmp/err"
check "summary names device and precision" bash -c "[[ '$last' == *device=cpu* && '$last' == *precision=fp32* ]]"
check "the header names the device" grep -q "herd: device cpu, precision fp32" "$tmp/err"
train --loss-scale sometimes >/dev/null 2>&1
check "--loss-scale takes dynamic or none" test $? -eq 2

finish
