#!/usr/bin/env bash
# --deterministic (docs/determinism.md): one global batch of 12 micro-batches of 8, split
# as 1 rank x 12, 2 x 6, 3 x 4, 4 x 3 and 6 x 2 (ranks x --grad-accum; more ranks than
# cores), trained 100 steps (30, and up to 3 ranks, under the sanitizers): the saved weights byte-identical to the one-process run, for
# lenet5 and mlp; without the flag they are not (so the comparison can fail). The same
# thread count everywhere: oneDNN splits a reduction over threads. What it does not
# cover yet is refused at start, naming the option.
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
check "--resume refused" refused "does not work with --resume" --checkpoint-dir "$tmp/ck" --resume
check "batch norm (resnet20) refused" bash -c "'$herd' train --model resnet20 --data \
  synthetic:3,32,32,10,96 --epochs 1 --batch-size 8 --deterministic --quiet 2>&1 >/dev/null |
  grep -q 'does not cover batch norm'"
check "--device sim refused" refused "runs on the CPU only" --device sim
check "samples that are not whole global batches refused, naming --train-samples" \
  refused "use --train-samples 96" --data synthetic:1,28,28,10,100
finish
