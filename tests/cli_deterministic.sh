#!/usr/bin/env bash
# --deterministic (docs/determinism.md): one global batch of 12 micro-batches of 8, split
# as 1 rank x 12, 2 x 6, 3 x 4, 4 x 3 and 6 x 2 (ranks x --grad-accum; more ranks than
# cores), trained 100 steps (30, and up to 3 ranks, under the sanitizers): the saved
# weights byte-identical to the one-process run, for lenet5 and mlp, and for lenet5
# stopped on 2 ranks and resumed on 3 (the checkpoint carries the exact sums' grid);
# without the flag they are not (so the comparison can fail). The same thread count
# everywhere: oneDNN splits a reduction over threads. What it does not cover yet is
# refused at start, naming the option.
set -u
. "$(dirname "$0")/testlib.sh"
samples=9600 # 100 steps of 96
# Under the sanitizers (several times slower): 30 steps, and 2 and 3 ranks; the release
# build runs all of it.
splits=("2 6" "3 4" "4 3" "6 2")
[ "${HERD_SANITIZED:-0}" = 1 ] && samples=2880 splits=("2 6" "3 4")
run1() { # run1 MODEL ACCUM OUT [FLAGS...]: one process
  local model=$1 accum=$2 out=$3; shift 3
  "$herd" train --model "$model" --data "synthetic:1,28,28,10,$samples" --epochs 1 --batch-size 8 \
    --grad-accum "$accum" --seed 5 --lr 0.05 --momentum 0.9 --threads 1 --quiet --save "$out" "$@"
}
runn() { # runn NP MODEL ACCUM OUT [FLAGS...]: under the launcher
  local np=$1; shift
  timeout 300 "${mpiexec[@]}" -np "$np" "$herd" train --model "$1" \
    --data "synthetic:1,28,28,10,$samples" --epochs 1 --batch-size 8 --grad-accum "$2" --seed 5 \
    --lr 0.05 --momentum 0.9 --threads 1 --quiet --save "$3" "${@:4}"
}

for model in lenet5 mlp; do
  run1 $model 12 "$tmp/$model.1" --deterministic >"$tmp/out" 2>&1
  check "$model, 1 process x 12 micro-batches, --deterministic: exit 0" test $? -eq 0
  run1 $model 12 "$tmp/$model.plain" >/dev/null 2>&1
  check "... without --deterministic the weights differ (the comparison can fail)" \
    bash -c "! cmp -s '$tmp/$model.1' '$tmp/$model.plain'"
done

if have_mpi; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
  for split in "${splits[@]}"; do
    read -r np accum <<<"$split"
    for model in lenet5 mlp; do
      [ $model = mlp ] && [ "$np" -gt 3 ] && continue # mlp: 5 MB of sums a step, 2 cores
      runn "$np" $model "$accum" "$tmp/$model.$np" --deterministic >"$tmp/out" 2>&1 || tail -3 "$tmp/out"
      check "$model, $np ranks x $accum: the one-process weights byte for byte" \
        cmp "$tmp/$model.1" "$tmp/$model.$np"
    done
  done
  # Stopped on 2 ranks, resumed on 3: the grid of the exact sums travels in the checkpoint.
  stop_at=40; [ "${HERD_SANITIZED:-0}" = 1 ] && stop_at=12
  runn 2 lenet5 6 "$tmp/lenet5.stopped" --deterministic --checkpoint-dir "$tmp/ck" \
    --max-steps $stop_at >"$tmp/out" 2>&1 || tail -3 "$tmp/out"
  check "lenet5 checkpoint at step $stop_at holds the grid" \
    grep -qa '"exact_grid"' "$tmp/ck/ckpt-$stop_at.state.safetensors"
  runn 3 lenet5 4 "$tmp/lenet5.resumed" --deterministic --checkpoint-dir "$tmp/ck" --resume \
    >"$tmp/out" 2>&1 || tail -3 "$tmp/out"
  check "lenet5 stopped at step $stop_at on 2 ranks x 6, resumed on 3 x 4: the one-process bytes" \
    cmp "$tmp/lenet5.1" "$tmp/lenet5.resumed"
  # An elastic restart keeps the global batch, in micro-batches of the same size or not at all.
  runn 2 lenet5 3 "$tmp/e.st" --deterministic --elastic-ranks 3 --max-steps 1 >/dev/null 2>"$tmp/err"
  check "elastic from 3 ranks x 3 to 2 (72 samples: not whole micro-batches of 8 each) refused" \
    grep -q "elastic with --deterministic: .*micro-batches of 8" "$tmp/err"
  runn 2 lenet5 3 "$tmp/e.st" --deterministic --elastic-ranks 4 --max-steps 1 >"$tmp/out" 2>&1
  check "elastic from 4 ranks x 3 to 2 x 6 taken (exit $?)" grep -q "elastic: 2 replicas instead of 4" "$tmp/out"
  runn 2 lenet5 6 "$tmp/lenet5.2plain" >/dev/null 2>&1
  check "lenet5, 2 ranks x 6 without --deterministic: not the one-process bytes" \
    bash -c "! cmp -s '$tmp/lenet5.plain' '$tmp/lenet5.2plain'"
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
check "--zero refused" refused "does not work with --zero" --zero 1
check "--compress refused" refused "does not work with --compress" --compress fp16
check "--sync-bn refused" refused "does not work with --sync-bn" --sync-bn
check "batch norm (resnet20) refused" bash -c "'$herd' train --model resnet20 --data \
  synthetic:3,32,32,10,96 --epochs 1 --batch-size 8 --deterministic --quiet 2>&1 >/dev/null |
  grep -q 'does not cover batch norm'"
check "--device sim refused" refused "runs on the CPU only" --device sim
check "samples that are not whole global batches refused, naming --train-samples" \
  refused "use --train-samples 96" --data synthetic:1,28,28,10,100
finish
