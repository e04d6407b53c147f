#!/usr/bin/env bash
# --deterministic (docs/determinism.md): one global batch of 96 samples (12 slices of 8),
# split as 1 rank x 12 micro-batches of 8, 2 x 6, 3 x 4, 4 x 3 and 6 x 2 (ranks x
# --grad-accum; more ranks than cores), and as other --batch-size per rank (1 x 32 x 3,
# 2 x 16 x 3, 3 x 32 x 1, 4 x 24 x 1) and --threads 2, trained 100 steps (10, and up to
# 3 ranks, in a repeat pass: sanitizers, MPICH): the saved weights byte-identical to the one-process run,
# for lenet5 and mlp, and for lenet5 stopped on 2 ranks and resumed on 3 (the checkpoint
# carries the exact sums' grid); lenet5 with --clip-grad-norm and --loss-scale dynamic on 3
# ranks and under --zero 1 on 2 ranks and --zero 2 on 3, and with --compress bf16 on 3;
# slices of 4 (--slice-size) likewise across batch sizes; resnet20 (batch norm over each
# slice, running statistics the mean over the step's slices), 100 steps of 48 8x8 images in
# slices of 4, as 1 x 16 x 3, 1 x 24 x 2 (--threads 2), 3 x 8 x 2 and 4 x 12 x 1 (3 x 8 x 2
# alone, 10 steps, in a repeat pass), and stopped on 2 ranks x 24 and resumed on 3: the same
# bytes, weights and running statistics (cli_deterministic_syncbn trains resnet20 at every
# rank count of issue 27, 1 to 6, under --sync-bn);
# without the flag they are not (so the comparison can fail); lenet5 on the simulated device
# (--device sim) gives the CPU's bytes, and so does mlp, whose CPU run takes its
# micro-batches whole (the linear layers' exact ops) where the device runs slice by slice.
# What it does not cover yet is refused at start, naming the option.
# Under the sanitizers only the commands whose lines of herd's code no other test of that
# pass reaches, and the runs they are compared with (clang's coverage of each process,
# 2026-12-07: tests/repeat_passes.txt): one process of lenet5, mlp, lenet5 on sim, bf16
# compression and clipping on 2 threads, resnet20 on 3 ranks, an elastic restart's
# batch and the refusals.
set -u
. "$(dirname "$0")/testlib.sh"
# 100 steps of 96 (issue 27): a rank count, split or resume that changed any rounding would
# change the weights of the first step after it, and every later one. On 16x16 images: what
# is tested is the sums' order, and 28x28 took 1.5x the CPU (cli_deterministic and
# cli_deterministic_pipeline 84 -> 56 CPU-s alone, 2026-12-07).
samples=9600
# In a repeat pass (testlib.sh: sanitizers, MPICH): 10 steps, and 2 and 3 ranks; the release
# build runs all of it.
splits=("2 6" "3 4" "4 3" "6 2")
repeat_pass && samples=960 splits=("2 6" "3 4")
run1() { # run1 MODEL ACCUM OUT [FLAGS...]: one process
  local model=$1 accum=$2 out=$3; shift 3
  "$herd" train --model "$model" --data "synthetic:1,16,16,10,$samples" --test-samples 480 --epochs 1 --batch-size 8 \
    --grad-accum "$accum" --seed 5 --lr 0.05 --momentum 0.9 --threads 1 --quiet --save "$out" "$@"
}
runn() { # runn NP MODEL ACCUM OUT [FLAGS...]: under the launcher
  local np=$1; shift
  timeout 300 "${mpiexec[@]}" -np "$np" "$herd" train --model "$1" \
    --data "synthetic:1,16,16,10,$samples" --test-samples 480 --epochs 1 --batch-size 8 --grad-accum "$2" --seed 5 \
    --lr 0.05 --momentum 0.9 --threads 1 --quiet --save "$3" "${@:4}"
}

for model in lenet5 mlp; do
  run1 $model 12 "$tmp/$model.1" --deterministic >"$tmp/out" 2>&1
  check "$model, 1 process x 12 micro-batches, --deterministic: exit 0" test $? -eq 0
  sanitizer_pass && continue
  run1 $model 12 "$tmp/$model.plain" >/dev/null 2>&1
  check "... without --deterministic the weights differ (the comparison can fail)" \
    bash -c "! cmp -s '$tmp/$model.1' '$tmp/$model.plain'"
  # Another batch size per rank: its micro-batches of 32 run as slices of 8.
  run1 $model 3 "$tmp/$model.b32" --deterministic --batch-size 32 >/dev/null 2>&1
  check "$model, 1 process x 3 micro-batches of 32: the same bytes" cmp "$tmp/$model.1" "$tmp/$model.b32"
done
# A device (the simulated one: device memory the host cannot read): the exact sums read
# each slice's gradient back; the same kernels give the CPU's bytes.
run1 lenet5 12 "$tmp/lenet5.sim" --deterministic --device sim >/dev/null 2>&1
check "lenet5 on --device sim: the CPU's bytes" cmp "$tmp/lenet5.1" "$tmp/lenet5.sim"
# mlp (linear layers and ReLU) runs its micro-batches whole on the CPU, the linear layers
# adding each slice's gradient to the exact sums from their kernels; on the device it runs
# slice by slice through the same exact ops (backend.h) and the sums' own pass.
"$herd" train --model mlp --data synthetic:1,28,28,10,96 --epochs 1 --batch-size 8 --deterministic \
  --threads 1 --max-steps 1 >"$tmp/out" 2>&1
check "mlp: said its micro-batches run whole" grep -q "deterministic: micro-batches run whole" "$tmp/out"
if ! sanitizer_pass; then
run1 mlp 12 "$tmp/mlp.sim" --deterministic --device sim >/dev/null 2>&1
check "mlp on --device sim, slice by slice: the bytes of the whole micro-batches" \
  cmp "$tmp/mlp.1" "$tmp/mlp.sim"
# Threads run whole slices at once, every kernel on one thread (exact_threads.c): the
# order they finish in does not reach the sums. (lenet5: oneDNN would split its
# convolutions' weight gradients over threads.) 3 threads on 2 cores too.
run1 lenet5 12 "$tmp/lenet5.t2" --deterministic --threads 2 >/dev/null 2>&1
check "lenet5, --threads 2: the same bytes" cmp "$tmp/lenet5.1" "$tmp/lenet5.t2"
"$herd" train --model lenet5 --data synthetic:1,28,28,10,96 --epochs 1 --batch-size 8 --deterministic \
  --threads 2 --max-steps 1 >"$tmp/out" 2>&1
check "... said: 2 threads each run whole slices" grep -q "deterministic: 2 threads each run whole slices" "$tmp/out"
run1 lenet5 12 "$tmp/lenet5.t3" --deterministic --threads 3 >/dev/null 2>&1
check "lenet5, --threads 3: the same bytes" cmp "$tmp/lenet5.1" "$tmp/lenet5.t3"
run1 mlp 12 "$tmp/mlp.t2" --deterministic --threads 2 >/dev/null 2>&1
check "mlp, --threads 2 (its matmuls on two threads at once): the same bytes" cmp "$tmp/mlp.1" "$tmp/mlp.t2"
# Dropout's streams follow the slice, not the thread (a batch-norm and dropout model).
bdt() { "$herd" train --model "$here/models/bndrop.json" --data synthetic:1,12,12,4,480 --test-samples 32 \
  --epochs 1 --batch-size 16 --grad-accum 3 --seed 5 --lr 0.05 --deterministic --slice-size 4 --quiet "$@"; }
bdt --threads 1 --save "$tmp/bd.t1" >/dev/null 2>&1
bdt --threads 2 --save "$tmp/bd.t2" >/dev/null 2>&1
check "batch norm and dropout, --threads 2: the same bytes" cmp "$tmp/bd.t1" "$tmp/bd.t2"
# Slices of 4: micro-batches of 4 x 24 and of 12 x 8 agree.
run1 lenet5 24 "$tmp/s4.a" --deterministic --batch-size 4 --slice-size 4 >/dev/null 2>&1
run1 lenet5 8 "$tmp/s4.b" --deterministic --batch-size 12 --slice-size 4 --threads 2 >/dev/null 2>&1
check "lenet5, --slice-size 4: 1 x 24 x 4 and 1 x 8 x 12 (--threads 2) the same bytes" \
  cmp "$tmp/s4.a" "$tmp/s4.b"
fi

# resnet20: batch norm. The saved file holds the running statistics beside the weights.
# A repeat pass trains 10 steps (resnet20 under the sanitizers is slow; the code path is
# the same).
rn_samples=4800
repeat_pass && rn_samples=480
rn() { # rn NP BATCH ACCUM OUT [FLAGS...]: NP 1 is one process
  local np=$1 batch=$2 accum=$3 out=$4; shift 4
  local launch=(); [ "$np" -gt 1 ] && launch=(timeout 300 "${mpiexec[@]}" -np "$np")
  "${launch[@]}" "$herd" train --model resnet20 --data "synthetic:3,8,8,10,$rn_samples" --test-samples 32 \
    --epochs 1 --batch-size "$batch" --grad-accum "$accum" --seed 5 --lr 0.05 --momentum 0.9 \
    --threads 1 --deterministic --slice-size 4 --save "$out" "$@"
}
rn 1 16 3 "$tmp/rn.1" >"$tmp/out" 2>&1
check "resnet20, 1 process x 16 x 3, --deterministic: exit 0" test $? -eq 0
check "... said at start: batch norm over each slice, the mean over the slices" \
  grep -q "batch norm normalises over each slice of 4 samples.*mean over the step's slices" "$tmp/out"
check "... the saved file holds the running statistics" grep -qa '"layer3.2.bn2.running_var"' "$tmp/rn.1"
if ! repeat_pass; then
  rn 1 24 2 "$tmp/rn.1g2" --quiet --threads 2 >/dev/null 2>&1
  check "resnet20, 1 process x 24 x 2, --threads 2: the same bytes" cmp "$tmp/rn.1" "$tmp/rn.1g2"
fi

if have_mpi; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
  sanitizer_pass && splits=()
  for split in "${splits[@]}"; do
    read -r np accum <<<"$split"
    for model in lenet5 mlp; do
      [ $model = mlp ] && [ "$np" -gt 3 ] && continue # mlp: 3 MB of sums a step, 2 cores
      runn "$np" $model "$accum" "$tmp/$model.$np" --deterministic >"$tmp/out" 2>&1 || tail -3 "$tmp/out"
      check "$model, $np ranks x $accum: the one-process weights byte for byte" \
        cmp "$tmp/$model.1" "$tmp/$model.$np"
    done
  done
  # Other batch sizes per rank (ranks x --batch-size x --grad-accum), one with 2 threads.
  sizes=("2 16 3" "3 32 1" "4 24 1")
  repeat_pass && sizes=("2 16 3")
  sanitizer_pass && sizes=()
  for size in "${sizes[@]}"; do
    read -r np batch accum <<<"$size"
    for model in lenet5 mlp; do
      [ $model = mlp ] && [ "$np" -gt 2 ] && continue
      runn "$np" $model "$accum" "$tmp/$model.$np.b$batch" --deterministic --batch-size "$batch" \
        --threads $((np == 2 ? 2 : 1)) >"$tmp/out" 2>&1 || tail -3 "$tmp/out"
      check "$model, $np ranks x $batch x $accum$([ "$np" = 2 ] && echo ', --threads 2'): the one-process bytes" \
        cmp "$tmp/$model.1" "$tmp/$model.$np.b$batch"
    done
  done
  # ZeRO updates a slice per rank from the whole exact mean; the clipping norm and the loss
  # scaler's check read the whole gradient on every rank, so neither follows the slices.
  # At 0.3 some of 100 steps clip, at 0.2 some of a repeat pass's 10 (5).
  clip=0.3; repeat_pass && clip=0.2
  cs=(--clip-grad-norm $clip --loss-scale dynamic --loss-scale-init 1024)
  run1 lenet5 12 "$tmp/clip.1" --deterministic "${cs[@]}" >"$tmp/out" 2>&1 || tail -3 "$tmp/out"
  run1 lenet5 12 "$tmp/clip.t2" --deterministic "${cs[@]}" --threads 2 >/dev/null 2>&1
  check "lenet5 with clipping and dynamic loss scaling, --threads 2: the same bytes" \
    cmp "$tmp/clip.1" "$tmp/clip.t2"
  check "lenet5 with clipping and dynamic loss scaling, one process: clipped" \
    grep -q "clipped_steps=[1-9]" "$tmp/out"
  zeros=("1 2 6" "2 3 4")
  repeat_pass && zeros=("2 3 4")
  sanitizer_pass && zeros=()
  for z in "${zeros[@]}"; do
    read -r stage np accum <<<"$z"
    runn "$np" lenet5 "$accum" "$tmp/zero$stage.$np" --deterministic --zero "$stage" "${cs[@]}" \
      >"$tmp/out" 2>&1 || tail -3 "$tmp/out"
    check "lenet5 --zero $stage, clipping, loss scaling, $np ranks x $accum: the one-process bytes" \
      cmp "$tmp/clip.1" "$tmp/zero$stage.$np"
  done
  if ! sanitizer_pass; then
  runn 3 lenet5 4 "$tmp/clip.3" --deterministic "${cs[@]}" >"$tmp/out" 2>&1 || tail -3 "$tmp/out"
  check "lenet5 with clipping and loss scaling, 3 ranks x 4 (no ZeRO): the one-process bytes" \
    cmp "$tmp/clip.1" "$tmp/clip.3"
  fi
  # --compress rounds each slice's gradient to 16 bits: a fixed place, so any N agrees.
  run1 lenet5 12 "$tmp/c16.1" --deterministic --compress bf16 >/dev/null 2>&1
  run1 lenet5 12 "$tmp/c16.t2" --deterministic --compress bf16 --threads 2 >/dev/null 2>&1
  check "lenet5 --compress bf16, --threads 2: the same bytes" cmp "$tmp/c16.1" "$tmp/c16.t2"
  if ! sanitizer_pass; then
  runn 3 lenet5 4 "$tmp/c16.3" --deterministic --compress bf16 >"$tmp/out" 2>&1 || tail -3 "$tmp/out"
  check "lenet5 --compress bf16, 3 ranks x 4: the one-process bytes" cmp "$tmp/c16.1" "$tmp/c16.3"
  check "... and not the uncompressed run's (the rounding is there)" \
    bash -c "! cmp -s '$tmp/c16.1' '$tmp/lenet5.1'"
  # Stopped on 2 ranks, resumed on 3: the grid of the exact sums travels in the checkpoint.
  stop_at=10; repeat_pass && stop_at=4
  runn 2 lenet5 6 "$tmp/lenet5.stopped" --deterministic --checkpoint-dir "$tmp/ck" \
    --max-steps $stop_at >"$tmp/out" 2>&1 || tail -3 "$tmp/out"
  check "lenet5 checkpoint at step $stop_at holds the grid" \
    grep -qa '"exact_grid"' "$tmp/ck/ckpt-$stop_at.state.safetensors"
  runn 3 lenet5 4 "$tmp/lenet5.resumed" --deterministic --checkpoint-dir "$tmp/ck" --resume \
    >"$tmp/out" 2>&1 || tail -3 "$tmp/out"
  check "lenet5 stopped at step $stop_at on 2 ranks x 6, resumed on 3 x 4: the one-process bytes" \
    cmp "$tmp/lenet5.1" "$tmp/lenet5.resumed"
  # An elastic restart keeps the global batch, in whole slices or not at all.
  runn 2 lenet5 3 "$tmp/e.st" --deterministic --elastic-ranks 3 --max-steps 1 >/dev/null 2>"$tmp/err"
  check "elastic from 3 ranks x 3 to 2 (72 samples: 36 each, not whole slices of 8) refused" \
    grep -q "elastic with --deterministic: .*whole slices of 8 (--slice-size)" "$tmp/err"
  fi
  runn 2 lenet5 1 "$tmp/e.st" --deterministic --batch-size 16 --elastic-ranks 3 --max-steps 1 \
    >"$tmp/out" 2>&1
  check "elastic from 3 ranks x 16 to 2 taken as 2 x 8 x 3 (micro-batches of whole slices)" \
    grep -q "global batch 48 kept as 2 x 8 x 3" "$tmp/out"
  if ! sanitizer_pass; then
  runn 2 lenet5 3 "$tmp/e.st" --deterministic --elastic-ranks 4 --max-steps 1 >"$tmp/out" 2>&1
  check "elastic from 4 ranks x 3 to 2 x 6 taken (exit $?)" grep -q "elastic: 2 replicas instead of 4" "$tmp/out"
  fi
  # Each rank's slices' statistics enter the exact sums as its gradients do (lenet5 above
  # covers 1 to 6 ranks); 2 ranks run in the resume below, 6 under --sync-bn.
  rns=("3 8 2" "4 12 1")
  repeat_pass && rns=("3 8 2")
  for rs in "${rns[@]}"; do
    read -r np batch accum <<<"$rs"
    rn "$np" "$batch" "$accum" "$tmp/rn.$np" --quiet >"$tmp/out" 2>&1 || tail -3 "$tmp/out"
    check "resnet20, $np ranks x $batch x $accum: the one-process bytes (weights, running statistics)" \
      cmp "$tmp/rn.1" "$tmp/rn.$np"
  done
  if ! repeat_pass; then # the checkpoint's grid covers the running statistics too
    rn 2 24 1 "$tmp/rn.stopped" --quiet --checkpoint-dir "$tmp/rck" --max-steps 10 >"$tmp/out" 2>&1 ||
      tail -3 "$tmp/out"
    rn 3 8 2 "$tmp/rn.resumed" --quiet --checkpoint-dir "$tmp/rck" --resume >"$tmp/out" 2>&1 ||
      tail -3 "$tmp/out"
    check "resnet20 stopped at step 10 on 2 ranks x 24, resumed on 3 x 8 x 2: the one-process bytes" \
      cmp "$tmp/rn.1" "$tmp/rn.resumed"
  fi
  if ! sanitizer_pass; then
  runn 2 lenet5 6 "$tmp/lenet5.2plain" >/dev/null 2>&1
  check "lenet5, 2 ranks x 6 without --deterministic: not the one-process bytes" \
    bash -c "! cmp -s '$tmp/lenet5.plain' '$tmp/lenet5.2plain'"
  fi
else
  skipped_part "several ranks under mpirun (herd built without MPI, or no launcher)"
fi

# Refusals, at start, naming the option.
refused() { # refused PATTERN FLAGS...
  local pat=$1; shift
  "$herd" train --model lenet5 --data synthetic:1,28,28,10,96 --epochs 1 --batch-size 8 \
    --deterministic --quiet "$@" >/dev/null 2>"$tmp/err"
  local rc=$?
  [ $rc -ne 0 ] && grep -q -- "$pat" "$tmp/err" || { echo "rc=$rc: $(cat "$tmp/err")"; return 1; }
}
check "--batch-size 12 (not whole slices of 8) refused, naming --slice-size" \
  refused "batch-size 12 is not a whole number of them" --batch-size 12 --data synthetic:1,28,28,10,120
check "--slice-size 3 with --batch-size 8 refused" refused "slices of 3 samples (--slice-size)" --slice-size 3
check "--slice-size without --deterministic refused" bash -c "'$herd' train --model lenet5 \
  --data synthetic:1,28,28,10,96 --epochs 1 --batch-size 8 --slice-size 4 --quiet 2>&1 >/dev/null |
  grep -q 'slice-size 4: .*add --deterministic'"
check "samples that are not whole global batches refused, naming --train-samples" \
  refused "use --train-samples 96" --data synthetic:1,28,28,10,100
finish
