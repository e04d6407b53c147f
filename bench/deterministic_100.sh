#!/usr/bin/env bash
# Issue 27's long check, by hand (make test's first pass trains the same 100 steps):
# --deterministic for 100 steps, lenet5 (global batch 96, slices of 8) and resnet20 with
# --sync-bn (8x8 images, global batch 48, slices of 4), at 1, 2, 3, 4 and 6 ranks
# (oversubscribed), --grad-accum splits 1 to 4 and --threads 2, with --zero 2 and
# --clip-grad-norm, and on 2 pipeline stages (resnet20 too, with --sync-bn): every saved
# file cmp-equal to the one-process run's. Prints one line per comparison; raw output appended to OUT.
#   usage: [OUT=file] bench/deterministic_100.sh [BUILD]
set -u
herd=$(readlink -f "${1:-build}/herd")
out=${OUT:-bench/results/$(date +%F)-deterministic-100-steps.txt}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpi=(mpirun --oversubscribe --bind-to none)
exec > >(tee -a "$out") 2>&1
echo "# $(date -u)  $("$herd" --version | head -n1)"
same() { # same LABEL FILE: against the one-process file of the current model
  if cmp -s "$one" "$2"; then echo "same bytes: $1"; else echo "DIFFERENT: $1"; fi
}
run() { # run NP BATCH ACCUM OUT [FLAGS...]
  local np=$1 b=$2 a=$3 o=$4; shift 4
  local launch=(); [ "$np" -gt 1 ] && launch=("${mpi[@]}" -np "$np")
  "${launch[@]}" "$herd" train "${common[@]}" --batch-size "$b" --grad-accum "$a" --save "$o" "$@" \
    >/dev/null 2>&1
}

common=(--model lenet5 --data synthetic:1,28,28,10,9600 --test-samples 96 --epochs 1 --seed 5
        --lr 0.05 --momentum 0.9 --threads 1 --quiet --deterministic)
echo "# lenet5, 100 steps of 96: ${common[*]}"
one=$tmp/l.1
run 1 8 12 "$one"
run 1 32 3 "$tmp/l.t2" --threads 2; same "lenet5 1 x 32 x 3, --threads 2" "$tmp/l.t2"
for r in "2 16 3" "3 16 2" "4 24 1" "6 16 1" "2 48 1" "3 8 4"; do
  read -r np b a <<<"$r"
  run "$np" "$b" "$a" "$tmp/l.$np.$a"; same "lenet5 $np x $b x $a" "$tmp/l.$np.$a"
done
run 2 8 12 "$tmp/l.pp" --pipeline-stages 2; same "lenet5 2 pipeline stages x 1" "$tmp/l.pp"
one=$tmp/lz.1
run 1 8 12 "$one" --clip-grad-norm 0.3
for r in "2 24 2" "3 16 2"; do
  read -r np b a <<<"$r"
  run "$np" "$b" "$a" "$tmp/lz.$np" --zero 2 --clip-grad-norm 0.3
  same "lenet5 $np x $b x $a --zero 2 --clip-grad-norm 0.3" "$tmp/lz.$np"
done

common=(--model resnet20 --data synthetic:3,8,8,10,4800 --test-samples 32 --epochs 1 --seed 5
        --lr 0.05 --momentum 0.9 --threads 1 --quiet --deterministic --slice-size 4 --sync-bn)
echo "# resnet20 --sync-bn, 100 steps of 48: ${common[*]}"
one=$tmp/r.1
run 1 16 3 "$one"
run 1 24 2 "$tmp/r.t2" --threads 2; same "resnet20 1 x 24 x 2, --threads 2" "$tmp/r.t2"
for r in "2 24 1" "3 8 2" "4 12 1" "6 8 1"; do
  read -r np b a <<<"$r"
  run "$np" "$b" "$a" "$tmp/r.$np"; same "resnet20 $np x $b x $a" "$tmp/r.$np"
done
run 2 16 3 "$tmp/r.pp" --pipeline-stages 2 --micro-batches 4
same "resnet20 2 pipeline stages x 1 (16 x 3, micro-batches of 4)" "$tmp/r.pp"
run 4 8 3 "$tmp/r.pp2" --pipeline-stages 2 --micro-batches 2 --zero 2
same "resnet20 2 pipeline stages x 2 replicas, --zero 2" "$tmp/r.pp2"
