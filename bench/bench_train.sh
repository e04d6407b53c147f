#!/usr/bin/env bash
# Training throughput, herd vs PyTorch, measured side by side in one run on the
# same machine: for each model, `herd bench train` then bench/torch_reference.py,
# interleaved so that drift in machine load affects both alike.
#
#   bench/bench_train.sh [--models mlp,lenet5,resnet20] [--threads 1]
#                        [--batch-size 128] [--steps 50] [--warmup 5] [--repeats 1]
#
# Environment: HERD (default build/herd), PYTHON (default /usr/bin/python3, which
# has PyTorch). Prints a plain table, then a markdown section for docs/performance.md.
# With several repeats the best run of each is reported (least disturbed by noise).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
herd=${HERD:-$root/build/herd}
python=${PYTHON:-/usr/bin/python3}
models=mlp,lenet5,resnet20
threads=1
batch=128
steps=50
warmup=5
repeats=1

while [ $# -gt 0 ]; do
  case $1 in
    --models) models=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --batch-size) batch=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_train.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

# Value of key=... in a line of key=value pairs.
kv() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p" | tail -n 1; }
# Larger of two numbers; "-" means no result.
best() {
  if [ "$1" = - ]; then echo "$2"; elif [ "$2" = - ]; then echo "$1";
  else awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 >= b + 0) ? a : b }'; fi
}

have_herd=1
if [ ! -x "$herd" ]; then
  echo "note: $herd not found (build herd first); herd column skipped" >&2
  have_herd=0
fi

declare -A herd_sps torch_sps
IFS=, read -r -a model_list <<<"$models"
for m in "${model_list[@]}"; do herd_sps[$m]=-; torch_sps[$m]=-; done

for ((r = 1; r <= repeats; r++)); do
  for m in "${model_list[@]}"; do
    if [ $have_herd = 1 ]; then
      if out=$(OMP_NUM_THREADS=$threads "$herd" bench train --model "$m" --data fashion-mnist \
                 --batch-size "$batch" --threads "$threads" --steps "$steps" --warmup "$warmup" \
                 2>/dev/null) && sps=$(kv samples_per_s "$(tail -n 1 <<<"$out")") && [ -n "$sps" ]; then
        echo "herd  $m: $(tail -n 1 <<<"$out")" >&2
        herd_sps[$m]=$(best "${herd_sps[$m]}" "$sps")
      else
        echo "note: herd bench train --model $m failed or printed no samples_per_s; skipped" >&2
      fi
    fi
    if out=$(OMP_NUM_THREADS=$threads "$python" "$root/bench/torch_reference.py" --models "$m" \
               --threads "$threads" --batch-size "$batch" --steps "$steps" --warmup "$warmup") \
       && sps=$(kv samples_per_s "$(tail -n 1 <<<"$out")") && [ -n "$sps" ]; then
      echo "torch $m: $(tail -n 1 <<<"$out")" >&2
      torch_sps[$m]=$(best "${torch_sps[$m]}" "$sps")
    else
      echo "note: torch reference for $m failed; skipped" >&2
    fi
  done
done

ratio() {
  if [ "$1" = - ] || [ "$2" = - ]; then echo -; else awk -v h="$1" -v t="$2" 'BEGIN { printf "%.2f", h / t }'; fi
}

printf '%-10s %16s %16s %8s\n' model herd_samples/s torch_samples/s ratio
for m in "${model_list[@]}"; do
  printf '%-10s %16s %16s %8s\n' "$m" "${herd_sps[$m]}" "${torch_sps[$m]}" \
    "$(ratio "${herd_sps[$m]}" "${torch_sps[$m]}")"
done

torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
echo
echo "<!-- markdown for docs/performance.md -->"
echo "### Training throughput, batch $batch, $threads thread(s)"
echo
echo "Fashion-MNIST, $steps timed steps after $warmup warm-up steps, best of $repeats;"
echo "PyTorch $torch_version; ${cpu:-unknown CPU}; $(date -u +%Y-%m-%d)."
echo
echo "| model | herd samples/s | PyTorch samples/s | herd / PyTorch |"
echo "|---|---:|---:|---:|"
for m in "${model_list[@]}"; do
  echo "| $m | ${herd_sps[$m]} | ${torch_sps[$m]} | $(ratio "${herd_sps[$m]}" "${torch_sps[$m]}") |"
done
