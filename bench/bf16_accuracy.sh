#!/usr/bin/env bash
# Accuracy of --precision bf16 against fp32 with the same seeds:
#   lenet5: 1 epoch (batch 128, lr 0.05, momentum 0.9), seeds 1..5, 1 thread each;
#   resnet20 (--resnet20): the 15-epoch recipe of docs/performance.md's accuracy table,
#   fp32 and bf16 side by side on one core each (about 25 minutes on 2 cores).
#
#   bench/bf16_accuracy.sh [--lenet5] [--resnet20] [--precisions "fp32 bf16"] [--seed S]
#   (both models when neither is given; --precisions bf16 runs resnet20's bf16 side alone,
#   for a change that leaves fp32's arithmetic as it was; --seed: resnet20's, default herd's 42)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
herd=${HERD:-$root/build/herd}
do_lenet5=0 do_resnet20=0 precisions="fp32 bf16" seed=42
while [ $# -gt 0 ]; do
  case $1 in
    --lenet5) do_lenet5=1; shift ;;
    --resnet20) do_resnet20=1; shift ;;
    --precisions) precisions=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bf16_accuracy.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ $do_lenet5 = 0 ] && [ $do_resnet20 = 0 ] && do_lenet5=1 do_resnet20=1
"$herd" --version | tail -n 1
kv() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p" | tail -n 1; }

if [ $do_lenet5 = 1 ]; then
  for seed in 1 2 3 4 5; do
    for p in fp32 bf16; do
      line=$(OMP_NUM_THREADS=1 "$herd" train --model lenet5 --data fashion-mnist --epochs 1 --batch-size 128 \
               --lr 0.05 --momentum 0.9 --threads 1 --seed "$seed" --precision "$p" --quiet 2>&1 | tail -n 1)
      echo "lenet5 seed=$seed precision=$p test_acc=$(kv test_acc "$line")"
    done
  done
fi

if [ $do_resnet20 = 1 ]; then
  recipe=(--model resnet20 --data fashion-mnist --augment --schedule cosine --epochs 15 --batch-size 128
          --lr 0.1 --momentum 0.9 --nesterov --weight-decay 5e-4 --warmup-epochs 1 --threads 1
          --log-every 1000000 --seed "$seed")
  log=$(mktemp -d)
  trap 'rm -rf "$log"' EXIT
  for p in $precisions; do
    OMP_NUM_THREADS=1 "$herd" train "${recipe[@]}" --precision "$p" >"$log/$p.out" 2>"$log/$p.err" &
  done
  wait
  for p in $precisions; do
    grep '^epoch' "$log/$p.err" | sed "s/^/resnet20 $p: /"
    echo "resnet20 $p: $(cat "$log/$p.out")"
  done
fi
