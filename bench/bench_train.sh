#!/usr/bin/env bash
# Training throughput, herd vs PyTorch, measured side by side in one run on the
# same machine: for each model, `herd bench train` then bench/torch_reference.py,
# interleaved so that drift in machine load affects both alike.
#
#   bench/bench_train.sh [--models mlp,lenet5,resnet20] [--threads 1]
#                        [--batch-size 128] [--steps 50] [--warmup 5] [--repeats 1]
#                        [--ranks N]
#
# --ranks N (N >= 2) measures weak scaling instead: per model, herd 1 rank and
# `herd run -np N -- bench train`, PyTorch 1 process and --ddp N, batch per rank
# fixed; efficiency = job samples/s / (N x 1-rank samples/s). The herd multi-rank
# half is skipped when it fails (e.g. herd built without MPI).
#
# Environment: HERD (default build/herd), PYTHON (default /usr/bin/python3, which
# has PyTorch). First prints what the reference runs on and the machine's 1-thread
# GEMM limit measured in this run (bench/lib.sh); every samples/s figure is also given
# as a fraction of that limit (3 x forward FLOPs x samples/s / (limit x cores)).
# Prints a plain table, then a markdown section for docs/performance.md.
# With several repeats the best run of each is reported (least disturbed by noise).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
herd=${HERD:-$root/build/herd}
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
models=mlp,lenet5,resnet20
threads=1
batch=128
steps=50
warmup=5
repeats=1
ranks=1

while [ $# -gt 0 ]; do
  case $1 in
    --models) models=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --batch-size) batch=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_train.sh: unknown option $1" >&2; exit 2 ;;
  esac
done


if ! [[ $ranks =~ ^[0-9]+$ ]] || [ "$ranks" -lt 1 ]; then
  echo "bench_train.sh: --ranks needs an integer >= 1" >&2; exit 2
fi

if [ ! -x "$herd" ]; then
  echo "bench_train.sh: $herd not found: build herd first (make build)" >&2; exit 1
fi
have_herd=1
bench_reference_setup
bench_gemm_limits
cores=$((ranks * threads))

if [ "$ranks" -gt 1 ]; then
  declare -A h1 hn t1 tn heff teff hcomm
  IFS=, read -r -a model_list <<<"$models"
  for m in "${model_list[@]}"; do h1[$m]=-; hn[$m]=-; t1[$m]=-; tn[$m]=-; heff[$m]=-; hcomm[$m]=-; done
  herd_args() { echo --model "$1" --data fashion-mnist --batch-size "$batch" --threads "$threads" \
                     --steps "$steps" --warmup "$warmup"; }
  # Runs a command; prints its last line when it has samples_per_s=, else nothing.
  last_sps() { local out; out=$("$@" 2>/dev/null) || return 1; out=$(tail -n 1 <<<"$out")
               [ -n "$(kv samples_per_s "$out")" ] && echo "$out"; }
  herd_multi_ok=$have_herd
  for ((r = 1; r <= repeats; r++)); do
    for m in "${model_list[@]}"; do
      if [ $have_herd = 1 ] && line=$(OMP_NUM_THREADS=$threads last_sps "$herd" bench train $(herd_args "$m")); then
        echo "herd 1 rank   $m: $line" >&2; h1[$m]=$(best "${h1[$m]}" "$(kv samples_per_s "$line")")
      fi
      if [ $herd_multi_ok = 1 ]; then
        # A multi-rank herd prints one summary (rank 0) for the whole job; one line
        # per rank means each process trained alone (a herd without MPI support).
        if out=$(timeout 600 "$herd" run -np "$ranks" --threads-per-rank "$threads" -- \
                   bench train $(herd_args "$m") 2>/dev/null) \
           && [ "$(grep -c 'samples_per_s=' <<<"$out")" = 1 ] \
           && line=$(grep 'samples_per_s=' <<<"$out") \
           && { job_ranks=$(kv ranks "$line"); [ -z "$job_ranks" ] || [ "$job_ranks" = "$ranks" ]; }; then
          echo "herd $ranks ranks  $m: $line" >&2
          sps=$(kv samples_per_s "$line")
          if [ "$(best "${hn[$m]}" "$sps")" = "$sps" ]; then
            hn[$m]=$sps
            e=$(kv scaling_efficiency "$line"); [ -n "$e" ] && heff[$m]=$e
            c=$(kv comm_wait_ms "$line"); [ -n "$c" ] && hcomm[$m]=$c
          fi
        else
          echo "note: herd run -np $ranks -- bench train failed or printed one summary per rank" \
               "(this herd is not multi-rank yet?); herd $ranks-rank column skipped" >&2
          herd_multi_ok=0
        fi
      fi
      if line=$(OMP_NUM_THREADS=$threads last_sps "$python" "$root/bench/torch_reference.py" --models "$m" \
                  --threads "$threads" --batch-size "$batch" --steps "$steps" --warmup "$warmup"); then
        echo "torch 1 proc  $m: $line" >&2; t1[$m]=$(best "${t1[$m]}" "$(kv samples_per_s "$line")")
      fi
      if line=$(OMP_NUM_THREADS=$threads last_sps timeout 600 "$python" "$root/bench/torch_reference.py" --models "$m" \
                  --threads "$threads" --batch-size "$batch" --steps "$steps" --warmup "$warmup" --ddp "$ranks"); then
        echo "torch DDP $ranks  $m: $line" >&2; tn[$m]=$(best "${tn[$m]}" "$(kv samples_per_s "$line")")
      else
        echo "note: torch DDP for $m failed; skipped" >&2
      fi
    done
  done
  eff() { # eff JOB_SPS ONE_RANK_SPS
    if [ "$1" = - ] || [ "$2" = - ]; then echo -; else
      awk -v n="$1" -v o="$2" -v k="$ranks" 'BEGIN { printf "%.2f", n / (k * o) }'; fi
  }
  for m in "${model_list[@]}"; do
    # Same-run figures, so computed here; herd's own figure is used only when ours cannot be.
    e=$(eff "${hn[$m]}" "${h1[$m]}"); [ "$e" != - ] && heff[$m]=$e
  done
  printf '%-10s %12s %12s %9s %12s %12s %9s %10s %11s\n' model herd_1 "herd_$ranks" herd_eff torch_1 \
    "ddp_$ranks" torch_eff comm_wait herd/ddp
  for m in "${model_list[@]}"; do
    printf '%-10s %12s %12s %9s %12s %12s %9s %10s %11s\n' "$m" "${h1[$m]}" "${hn[$m]}" "${heff[$m]}" \
      "${t1[$m]}" "${tn[$m]}" "$(eff "${tn[$m]}" "${t1[$m]}")" "${hcomm[$m]}" "$(ratio "${hn[$m]}" "${tn[$m]}")"
  done
  echo "fraction of the GEMM limit ($GEMM_LIMIT GFLOP/s per core; 1 rank: $threads core(s), $ranks ranks: $cores):"
  for m in "${model_list[@]}"; do
    echo "  $m: herd_1 $(frac "${h1[$m]}" "$m" "$threads") herd_$ranks $(frac "${hn[$m]}" "$m" "$cores")" \
         "torch_1 $(frac "${t1[$m]}" "$m" "$threads") ddp_$ranks $(frac "${tn[$m]}" "$m" "$cores")"
  done
  echo
  echo "<!-- markdown for docs/performance.md -->"
  echo "### Weak scaling, $ranks ranks x $threads thread(s), batch $batch per rank"
  echo
  echo "Fashion-MNIST, $steps timed steps after $warmup warm-up steps, best of $repeats; samples/s of the whole job"
  echo "(in brackets: fraction of the 1-thread GEMM limit, $GEMM_LIMIT GFLOP/s per core, times the cores used); $(date -u +%Y-%m-%d)."
  echo
  echo "| model | herd 1 rank | herd $ranks ranks | herd efficiency | PyTorch 1 | PyTorch DDP $ranks | PyTorch efficiency | herd / DDP |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  for m in "${model_list[@]}"; do
    echo "| $m | ${h1[$m]} ($(frac "${h1[$m]}" "$m" "$threads")) | ${hn[$m]} ($(frac "${hn[$m]}" "$m" "$cores")) | ${heff[$m]}" \
         "| ${t1[$m]} ($(frac "${t1[$m]}" "$m" "$threads")) | ${tn[$m]} ($(frac "${tn[$m]}" "$m" "$cores"))" \
         "| $(eff "${tn[$m]}" "${t1[$m]}") | $(ratio "${hn[$m]}" "${tn[$m]}") |"
  done
  exit 0
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


printf '%-10s %16s %10s %16s %10s %8s\n' model herd_samples/s herd_frac torch_samples/s torch_frac ratio
for m in "${model_list[@]}"; do
  printf '%-10s %16s %10s %16s %10s %8s\n' "$m" "${herd_sps[$m]}" "$(frac "${herd_sps[$m]}" "$m" "$threads")" \
    "${torch_sps[$m]}" "$(frac "${torch_sps[$m]}" "$m" "$threads")" "$(ratio "${herd_sps[$m]}" "${torch_sps[$m]}")"
done

torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
echo
echo "<!-- markdown for docs/performance.md -->"
echo "### Training throughput, batch $batch, $threads thread(s)"
echo
echo "Fashion-MNIST, $steps timed steps after $warmup warm-up steps, best of $repeats;"
echo "PyTorch $torch_version on OpenMP OpenBLAS (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}); ${cpu:-unknown CPU}; $(date -u +%Y-%m-%d)."
echo "1-thread fp32 GEMM limit in this run: herd (dnnl_sgemm) $GEMM_HERD, PyTorch (OpenBLAS) $GEMM_TORCH GFLOP/s;"
echo "fraction = 3 x forward FLOPs x samples/s / ($GEMM_LIMIT GFLOP/s x $threads)."
echo
echo "| model | herd samples/s | fraction of limit | PyTorch samples/s | fraction of limit | herd / PyTorch |"
echo "|---|---:|---:|---:|---:|---:|"
for m in "${model_list[@]}"; do
  echo "| $m | ${herd_sps[$m]} | $(frac "${herd_sps[$m]}" "$m" "$threads") | ${torch_sps[$m]}" \
       "| $(frac "${torch_sps[$m]}" "$m" "$threads") | $(ratio "${herd_sps[$m]}" "${torch_sps[$m]}") |"
done
