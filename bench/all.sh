#!/usr/bin/env bash
# Every measurement behind docs/performance.md, one after the other on an otherwise idle
# machine, each run's raw output kept as bench/results/DATE-NAME.txt (the command at its
# top). `make bench` runs it after installing the PyTorch reference.
#
#   bench/all.sh [--only NAME[,NAME...]] [--list]
#
# Names: train_1thread, scaling_2ranks, time_to_accuracy, timeline_overhead,
# timeline_overhead_resnet20, independent_pair, allreduce, fusion, p2p, predict, single_copy,
# predict_cluster (needs root: network namespaces), and on CPUs with bf16 instructions
# bf16_1thread, bf16_2ranks, time_to_accuracy_fp32/_bf16 (target 91%), bf16_lenet5_accuracy,
# bf16_resnet20_accuracy (about 25 minutes), zero (needs root: network namespaces).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
herd=${HERD:-$root/build/herd}
day=$(date -u +%Y-%m-%d)
out=$root/bench/results
only=

declare -A cmd=(
  [train_1thread]="bash bench/bench_train.sh --repeats 3"
  [scaling_2ranks]="bash bench/bench_train.sh --ranks 2 --repeats 3 --steps 100"
  [time_to_accuracy]="bash bench/time_to_accuracy.sh --ranks 2"
  [timeline_overhead]="bash bench/timeline_overhead.sh --models mlp,lenet5 --repeats 8 --steps 200"
  [timeline_overhead_resnet20]="bash bench/timeline_overhead.sh --models resnet20 --repeats 3 --steps 10 --warmup 2"
  [independent_pair]="bash bench/independent_pair.sh --repeats 3"
  [allreduce]="$herd run -np 2 -- bench allreduce -b 8 -e 16M -f 2 -n 100 --compare-mpi -J $out/$day-allreduce.json"
  [fusion]="$herd run -np 2 -- bench allreduce --fused-tensors 100"
  [p2p]="$herd run -np 2 -- bench p2p"
  [predict]="bash bench/predict_vs_measured.sh $out/$day-allreduce.json"
  [single_copy]="bash bench/single_copy.sh"
  [predict_cluster]="bash bench/predict_cluster.sh"
  [bf16_1thread]="bash bench/bf16.sh --repeats 2"
  [bf16_2ranks]="bash bench/bf16.sh --ranks 2 --repeats 2 --models mlp,lenet5,resnet20"
  [time_to_accuracy_fp32]="bash bench/time_to_accuracy.sh --ranks 2 --target 0.91 --precision fp32"
  [time_to_accuracy_bf16]="bash bench/time_to_accuracy.sh --ranks 2 --target 0.91 --precision bf16"
  [bf16_lenet5_accuracy]="bash bench/bf16_accuracy.sh --lenet5"
  [bf16_resnet20_accuracy]="bash bench/bf16_accuracy.sh --resnet20"
  [zero]="bash bench/zero.sh --repeats 3"
)
order=(train_1thread scaling_2ranks time_to_accuracy timeline_overhead timeline_overhead_resnet20
       independent_pair allreduce fusion p2p predict single_copy predict_cluster
       bf16_1thread bf16_2ranks time_to_accuracy_fp32 time_to_accuracy_bf16 bf16_lenet5_accuracy
       bf16_resnet20_accuracy zero)

while [ $# -gt 0 ]; do
  case $1 in
    --only) only=,$2,; shift 2 ;;
    --list) for n in "${order[@]}"; do echo "$n: ${cmd[$n]}"; done; exit 0 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "all.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$herd" ] || { echo "all.sh: $herd not found: make build" >&2; exit 1; }
mkdir -p "$out"
cd "$root" || exit 1
failed=0
for n in "${order[@]}"; do
  [ -z "$only" ] || [[ $only == *",$n,"* ]] || continue
  file=$out/$day-$n.txt
  echo "== $n: ${cmd[$n]} -> ${file#"$root"/}"
  { echo "\$ ${cmd[$n]}"; echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(hostname), herd $(git -C "$root" rev-parse --short HEAD)"
    eval "${cmd[$n]}" 2>&1; echo "# exit $?"; } | tee "$file"
  grep -q '^# exit 0$' "$file" || { echo "all.sh: $n failed (see $file)" >&2; failed=1; }
done
exit $failed
