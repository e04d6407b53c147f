#!/usr/bin/env bash
# --memory-limit from the CLI on the CPU: refusals (a bad size, both limits at once, the
# model's parameters or its optimizer state over the cap) with their message and exit
# code, the summary's memory_peak_mib and the breakdown line that adds up to it, bench
# train's cap, and under mpirun every rank's peak and one rank over its own cap.
set -u
. "$(dirname "$0")/testlib.sh"
data="synthetic:1,28,28,10,256"
train() { "$herd" train --data "$data" --epochs 1 --batch-size 32 --threads 1 --device cpu "$@"; }

train --model mlp --memory-limit 12Q >/dev/null 2>"$tmp/err"
check "a bad size is a usage error" bash -c "test $? -eq 2 && grep -q 'memory-limit takes a size' '$tmp/err'"
train --model mlp --memory-limit 512K >/dev/null 2>"$tmp/err"
check "a limit under 1M is a usage error" test $? -eq 2
"$herd" train --model mlp --device cuda --memory-limit 1G --gpu-memory-limit 1G >/dev/null 2>"$tmp/err"
check "--memory-limit with --gpu-memory-limit is a usage error" \
  bash -c "test $? -eq 2 && grep -q 'give one' '$tmp/err'"

# mlp holds 2.6 MiB of parameters: a 1 MiB cap refuses them while building the model.
train --model mlp --memory-limit 1M >"$tmp/out" 2>"$tmp/err"
rc=$?
check "model over the limit: exit 1" test $rc -eq 1
check "... saying what did not fit and the cap" \
  grep -q "^herd: error: cannot build the model: out of memory: memory limit reached: allocating 2.6 MiB of parameters on top of the 0.0 MiB herd holds exceeds --memory-limit 1.0 MiB" "$tmp/err"
check "... and no summary" test ! -s "$tmp/out"

# widemlp: 140.5 MiB each of parameters, gradients and SGD momentum; 300M holds the
# first two, the momentum is refused before the first step.
train --model widemlp --data synthetic:1,28,28,10,64 --memory-limit 300M >"$tmp/out" 2>"$tmp/err"
rc=$?
check "widemlp under 300M: exit 1" test $rc -eq 1
check "... refusing the optimizer state, with what is held" \
  grep -q "optimizer state 'momentum' (147275816 bytes): memory limit reached: allocating 140.5 MiB of optimizer state on top of the 280.9 MiB herd holds exceeds --memory-limit 300.0 MiB" "$tmp/err"
check "... before any step" bash -c "! grep -q '^epoch' '$tmp/err'"

train --model lenet5 --memory-limit 64M >"$tmp/out" 2>"$tmp/err"
check "lenet5 under 64M trains" test $? -eq 0
peak=$(sed -n 's/.*memory_peak_mib=\([0-9.]*\).*/\1/p' "$tmp/out")
check "summary has memory_peak_mib ($peak), within the limit" \
  awk -v p="$peak" 'BEGIN { exit !(p > 1 && p <= 64) }'
line=$(grep '^herd: peak memory ' "$tmp/err")
echo "$line"
check "the breakdown line names the peak" bash -c "[[ '$line' == 'herd: peak memory $peak MiB: parameters '* ]]"
# Its five parts, each rounded to 0.1 MiB, add up to the peak.
sum=$(sed 's/^[^:]*: //' <<<"$line" | tr ',' '\n' | awk '{ s += $NF } END { print s }')
check "the breakdown adds up to the peak ($sum vs $peak)" \
  awk -v s="$sum" -v p="$peak" 'BEGIN { d = s - p; exit !(d < 0.3 && d > -0.3) }'
train --model lenet5 --memory-limit 64M --quiet --json >"$tmp/out" 2>"$tmp/err"
check "--json has memory_peak_mib" grep -q '"memory_peak_mib": [0-9]' "$tmp/out"
check "--quiet prints no breakdown" bash -c "! grep -q 'peak memory' '$tmp/err'"

# Checkpoints' host memory counts too: the background writer's copies (mlp: parameters
# and momentum, 2.6 MiB each) and a resume's read buffers (each file's tensors, and the
# larger file read whole: 7.7 MiB). mlp trains in 8.2 MiB at --batch-size 32, so a 12M
# cap refuses both.
train --model mlp --checkpoint-dir "$tmp/mck" --checkpoint-every-steps 2 >"$tmp/out" 2>"$tmp/err"
check "the writer's copies are in the breakdown (checkpoint buffers 5.1 MiB)" \
  grep -q "^herd: peak memory [0-9.]* MiB: .*, checkpoint 5.1$" "$tmp/err"
train --model mlp --epochs 2 --checkpoint-dir "$tmp/mck" --resume >"$tmp/out" 2>"$tmp/err"
check "a resume's read buffers are in the breakdown (7.7 MiB)" \
  grep -q "^herd: peak memory [0-9.]* MiB: .*, checkpoint 7.7$" "$tmp/err"
train --model mlp --memory-limit 12M >/dev/null 2>&1
check "mlp trains under 12M without checkpoints" test $? -eq 0
train --model mlp --memory-limit 12M --checkpoint-dir "$tmp/mck2" --checkpoint-every-steps 2 >/dev/null 2>"$tmp/err"
check "12M refuses the writer's copies: exit 1 naming them" \
  bash -c "test $? -eq 1 && grep -q 'of checkpoint buffers on top of .* exceeds --memory-limit 12.0 MiB' '$tmp/err'"
train --model mlp --epochs 2 --memory-limit 12M --checkpoint-dir "$tmp/mck" --resume >/dev/null 2>"$tmp/err"
check "12M refuses the resume's read buffers: exit 1 naming the files" \
  bash -c "test $? -eq 1 && grep -q \"resuming from '.*ckpt-16.safetensors'.*7.7 MiB of checkpoint buffers .* exceeds --memory-limit 12.0 MiB\" '$tmp/err'"

"$herd" bench train --model mlp --data "$data" --device cpu --steps 1 --warmup 0 \
  --memory-limit 1M >/dev/null 2>"$tmp/err"
check "bench train over the limit: exit 1 naming it" \
  bash -c "test $? -eq 1 && grep -q 'exceeds --memory-limit 1.0 MiB' '$tmp/err'"
"$herd" bench train --model mlp --data "$data" --device cpu --steps 1 --warmup 0 \
  --memory-limit 64M >/dev/null 2>&1
check "bench train within the limit: exit 0" test $? -eq 0

# What a rank holds, in the summaries: mlp on 1x28x28 with 10 classes has 669706
# parameters (2678824 bytes); SGD keeps one momentum buffer, AdamW two moments.
train --model mlp >"$tmp/out" 2>/dev/null
check "summary: param_bytes, grad_bytes, optimizer_state_bytes (SGD)" \
  grep -q "param_bytes=2678824 grad_bytes=2678824 optimizer_state_bytes=2678824" "$tmp/out"
train --model mlp --optimizer adamw >"$tmp/out" 2>/dev/null
check "... AdamW: two moments" grep -q "optimizer_state_bytes=5357648" "$tmp/out"
"$herd" bench train --model mlp --data "$data" --device cpu --steps 2 --warmup 1 >"$tmp/out" 2>/dev/null
check "bench train reports them too" \
  grep -q "param_bytes=2678824 grad_bytes=2678824 optimizer_state_bytes=2678824" "$tmp/out"

if have_mpi; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
  timeout 120 "${mpiexec[@]}" -np 2 "$herd" train --model mlp --data "$data" --epochs 1 \
    --batch-size 32 --threads 1 --device cpu --memory-limit 64M >"$tmp/out" 2>"$tmp/err"
  check "2 ranks under 64M each: exit 0" test $? -eq 0
  line=$(grep '^herd: peak memory per rank' "$tmp/err")
  echo "$line"
  check "one line of per-rank peaks, ranks 0 and 1" \
    bash -c "test $(grep -c 'peak memory per rank' "$tmp/err") -eq 1 && [[ '$line' == *' 0: '*', 1: '* ]]"
  max=$(grep -oE '[0-9]+: [0-9.]+' <<<"$line" | awk '$2 > m { m = $2 } END { print m }')
  peak=$(sed -n 's/.*memory_peak_mib=\([0-9.]*\).*/\1/p' "$tmp/out")
  check "memory_peak_mib ($peak) is the largest of them ($max)" \
    awk -v p="$peak" -v m="$max" 'BEGIN { exit !(p == m && p > 0) }'
  # Rank 1 alone over its cap: it fails building the model and the job ends.
  timeout 60 "${mpiexec[@]}" -np 1 "$herd" train --model mlp --data "$data" --threads 1 --device cpu : \
    -np 1 "$herd" train --model mlp --data "$data" --threads 1 --device cpu --memory-limit 1M \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "one rank over its limit stops the job (exit $rc)" test $rc -ne 0 -a $rc -ne 124
  check "... naming the limit" grep -q "exceeds --memory-limit 1.0 MiB" "$tmp/err"
else
  skipped_part "every rank's peak under mpirun (herd built without MPI, or no launcher)"
fi

finish
