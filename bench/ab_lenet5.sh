#!/usr/bin/env bash
# Two herd binaries side by side on lenet5 (one thread, synthetic 1x28x28, a global batch of
# 12 micro-batches of B, 40 steps), interleaved, REPS rounds, the median samples/s of each
# and their ratio: for a kernel change measured against the commit before it, e.g.
#   git worktree add /tmp/old REV^ && cmake -S /tmp/old -B /tmp/old/build -DHERD_CUDA=OFF && cmake --build /tmp/old/build -j2
#   bash bench/ab_lenet5.sh /tmp/old/build/herd build/herd
set -u
old=$1 new=$2 REPS=${REPS:-5}
echo "# $(date -u); $(nproc) cores:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); $($new --version | sed -n 2p)"
echo "# old: $old ($($old --version | head -1)); new: $new"
for b in 8 32 128; do
  for det in "" "--deterministic"; do
    [ -n "$det" ] && [ $b != 8 ] && continue
    o=() n=()
    for ((i = 0; i < REPS; i++)); do
      for side in old new; do
        bin=$old; [ $side = new ] && bin=$new
        s=$(OMP_NUM_THREADS=1 $bin train --model lenet5 --data synthetic:1,28,28,10,$((b * 12 * 40)) --test-samples 96 \
          --epochs 1 --batch-size $b --grad-accum 12 --threads 1 --seed 1 --eval-every 0 --quiet $det 2>&1 |
          sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p')
        [ $side = old ] && o+=("$s") || n+=("$s")
      done
    done
    med() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
    mo=$(med "${o[@]}") mn=$(med "${n[@]}")
    echo "batch=$b ${det:-plain} old=[${o[*]}] new=[${n[*]}] median_old=$mo median_new=$mn ratio=$(awk -v a=$mn -v b=$mo 'BEGIN{printf "%.2f", a/b}')"
  done
done
