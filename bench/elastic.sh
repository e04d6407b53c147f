#!/usr/bin/env bash
# Fault tolerance's costs, side by side in one run:
#  1. overhead: resnet20 (synthetic 3x32x32, 10 classes, batch 64, 2 threads, 300 steps, no
#     evaluation) without checkpoints, with --checkpoint-every-steps 100 and with 10,
#     interleaved, --repeats times each: the whole process's wall time (date around it,
#     so start-up and the wait for the last background write count) and its median.
#  2. recovery: herd run -np 2 --max-restarts 1 -- train lenet5 (Fashion-MNIST, or
#     synthetic data without it) with --checkpoint-every-steps 50; a random rank killed
#     with kill -9 at a random step from 300 to 349 (read from the progress record): from
#     the kill to herd run's relaunch line and to the restarted attempt's first step, and
#     training's own count (recovery_s: the last step before the failure to the first step
#     after it; lost_steps), --repeats times.
#
#   bench/elastic.sh [--repeats 5] [--parts overhead,recovery]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
herd=$(readlink -f "${HERD:-$root/build/herd}")
repeats=5 parts=overhead,recovery
while [ $# -gt 0 ]; do
  case $1 in
    --repeats) repeats=$2; shift 2 ;;
    --parts) parts=$2; shift 2 ;;
    *) echo "elastic.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
. "$root/tests/testlib.sh" "$herd"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "# $(date -u '+%F %T UTC'); $("$herd" --version | head -1); $(getconf _NPROCESSORS_ONLN) cores"
key() { grep -o "$1=[0-9.]*" "$2" | head -n 1 | cut -d= -f2; }
now() { date +%s.%N; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

if [[ $parts == *overhead* ]]; then
  echo "## 1. overhead: resnet20, synthetic 3x32x32/10, batch 64, 2 threads, 300 steps"
  args=(train --model resnet20 --data synthetic:3,32,32,10,19200 --batch-size 64 --max-steps 300
        --epochs 1 --eval-every 0 --threads 2 --quiet)
  echo "command: HERD ${args[*]} [--checkpoint-dir D --checkpoint-every-steps S]"
  declare -A times=()
  for ((i = 1; i <= repeats; i++)); do
    for s in none 100 10; do
      rm -rf "$tmp/ck"
      extra=()
      [ "$s" != none ] && extra=(--checkpoint-dir "$tmp/ck" --checkpoint-every-steps "$s")
      t0=$(now)
      "$herd" "${args[@]}" "${extra[@]}" >"$tmp/out" 2>"$tmp/err" || { echo "S=$s failed:"; tail -3 "$tmp/err"; continue; }
      t=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }')
      saved=$( [ "$s" = none ] && echo 0 || ls "$tmp/ck" | grep -c '\.state\.safetensors$')
      echo "run $i S=$s: ${t} s wall, steps=$(key steps "$tmp/out"), checkpoints left=$saved"
      times[$s]="${times[$s]:-} $t"
    done
  done
  base=$(echo ${times[none]} | tr ' ' '\n' | median)
  for s in none 100 10; do
    m=$(echo ${times[$s]} | tr ' ' '\n' | median)
    echo "median S=$s: $m s, $(awk -v m="$m" -v b="$base" 'BEGIN { printf "%.4f", m / b }')x no checkpoints"
  done
fi

if [[ $parts == *recovery* ]]; then
  data=synthetic:1,28,28,10,60000
  [ -d /usr/share/datasets/fashion-mnist ] && data=fashion-mnist
  echo "## 2. recovery: herd run -np 2 --max-restarts 1, lenet5 on $data, batch 64, every 50 steps;" \
    "a random rank killed (kill -9) at step 300 + 0..49"
  # The step attempt $2 last recorded in $1/progress (empty before its first).
  progress() { sed -n "s/^herd-progress step=\([0-9]*\) time=[0-9.]* restarts=$2 .*/\1/p" "$1/progress" 2>/dev/null; }
  for ((i = 1; i <= repeats; i++)); do
    rm -rf "$tmp/rk" "$tmp/err"
    "$herd" run -np 2 --max-restarts 1 ${RUN_FLAGS:-} -- train --model lenet5 --data "$data" --batch-size 64 \
      --epochs 3 --eval-every 0 --checkpoint-dir "$tmp/rk" --checkpoint-every-steps 50 --quiet \
      >"$tmp/out" 2> >(while IFS= read -r l; do printf '%s %s\n' "$(now)" "$l"; done >"$tmp/err") &
    sup=$!
    target=$((300 + RANDOM % 50))
    for ((w = 0; w < 6000; w++)); do
      st=$(progress "$tmp/rk" 0)
      [ -n "$st" ] && [ "$st" -ge $target ] && break
      sleep 0.01
    done
    victim=$(for p in $(pgrep -f -- "--checkpoint-dir $tmp/rk"); do
      tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- ' run ' && continue
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = herd ] && echo "$p"; done | shuf -n 1)
    t_kill=$(now)
    kill -9 "$victim"
    t_first=""
    for ((w = 0; w < 6000; w++)); do
      [ -n "$(progress "$tmp/rk" 1)" ] && { t_first=$(now); break; }
      sleep 0.01
    done
    wait "$sup"
    rc=$?
    sleep 0.2
    t_relaunch=$(awk '/ herd: restart 1\/1 / { print $1; exit }' "$tmp/err")
    printf 'run %d: exit %d, killed at step %s; kill -> relaunch %.2f s, kill -> first step %.2f s;' "$i" "$rc" \
      "$st" "$(awk -v a="$t_kill" -v b="${t_relaunch:-0}" 'BEGIN { print b - a }')" \
      "$(awk -v a="$t_kill" -v b="${t_first:-0}" 'BEGIN { print b - a }')"
    echo " train: restarts=$(key restarts "$tmp/out") lost_steps=$(key lost_steps "$tmp/out") recovery_s=$(key recovery_s "$tmp/out")"
    grep -E ' herd: (restart 1/1|warning: restart 1)' "$tmp/err" | cut -d' ' -f2- | sed 's/^/  /'
  done
fi
