#!/usr/bin/env bash
# Two herd binaries side by side on short runs at full batch sizes, where first touches of
# activation, gradient and workspace memory show (page faults; on a virtual machine each
# exits to the host): resnet20 32x32 at batch 256 for 3 and 20 steps, lenet5 at batch 128
# for 1 step at --threads 1 and 2; and the data sets' images, written once at start (9,600
# synthetic lenet5 images, fashion-mnist, 1,000 synthetic 224x224 resnet50 images: one
# step each). ONLY=REGEX keeps the cases whose names match. Interleaved, REPS rounds; per run CPU-s (user + system),
# wall s, minor page faults and peak RSS; per case the means and new/old. For a change
# measured against the commit before it (bench/ab_lenet5.sh says how to build one):
#   bash bench/ab_first_steps.sh /tmp/old/build/herd build/herd
set -u
old=$1 new=$2 REPS=${REPS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "# $(date -u); $(nproc) cores:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "# THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled), defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag)"
echo "# old: $old; new: $new"
q="--quiet --eval-every 0 --test-samples 64 --epochs 1 --seed 5"
cases=(
  "resnet20-b256-3steps|--model resnet20 --data synthetic:3,32,32,10,1024 --batch-size 256 --max-steps 3 --threads 2 $q"
  "resnet20-b256-20steps|--model resnet20 --data synthetic:3,32,32,10,5120 --batch-size 256 --max-steps 20 --threads 2 $q"
  "lenet5-b128-1step-t1|--model lenet5 --data synthetic:1,28,28,10,256 --batch-size 128 --max-steps 1 --threads 1 $q"
  "lenet5-b128-1step-t2|--model lenet5 --data synthetic:1,28,28,10,256 --batch-size 128 --max-steps 1 --threads 2 $q"
  "data-synthetic9600-lenet5|--model lenet5 --data synthetic:1,28,28,10,9600 --batch-size 8 --max-steps 1 --threads 1 $q"
  "data-fashion-lenet5|--model lenet5 --data fashion-mnist --batch-size 8 --max-steps 1 --threads 1 $q"
  "data-synthetic1000-resnet50|--model resnet50 --data synthetic:3,224,224,1000,1000 --batch-size 2 --max-steps 1 --threads 1 $q"
)
echo "# case side cpu_s wall_s minor_faults max_rss_kib"
for c in "${cases[@]}"; do
  name=${c%%|*} args=${c#*|}
  [[ $name =~ ${ONLY:-.} ]] || continue
  for ((r = 0; r < REPS; r++)); do
    for side in old new; do
      bin=$old; [ $side = new ] && bin=$new
      # shellcheck disable=SC2086
      env -u OMP_NUM_THREADS /usr/bin/time -f "%U %S %e %R %M" -o "$tmp/t" "$bin" train $args >/dev/null 2>&1 ||
        echo "# $name $side: exit $?"
      echo "$name $side $(awk '{printf "%.2f %.2f %d %d", $1 + $2, $3, $4, $5}' "$tmp/t")"
    done
  done
done | tee "$tmp/runs"
awk '!/^#/ {k = $1 " " $2; c[k] += $3; w[k] += $4; f[k] += $5; m[k] += $6; n[k]++; names[$1] = 1}
     END { for (x in names) { o = x " old"; e = x " new"
           printf "%s: CPU-s %.2f -> %.2f (%.2f), wall s %.2f -> %.2f (%.2f), faults %d -> %d, RSS MiB %.0f -> %.0f\n",
             x, c[o] / n[o], c[e] / n[e], c[e] / c[o], w[o] / n[o], w[e] / n[e], w[e] / w[o],
             f[o] / n[o], f[e] / n[e], m[o] / n[o] / 1024, m[e] / n[e] / 1024 } }' "$tmp/runs" | sort
