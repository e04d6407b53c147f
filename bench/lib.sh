# Shared by the benchmark scripts (sourced): the PyTorch reference set up as a careful
# user would, and the machine's fp32 limit measured in the same run.
#
# bench_reference_setup: PyTorch's GEMMs run on Debian's OpenBLAS. With the reference
#   BLAS (which `apt-get --no-install-recommends` can leave as libblas.so.3) PyTorch's
#   linear layers run ~15x slower, so that setup is refused. Debian's pthread OpenBLAS
#   ignores torch.set_num_threads; the OpenMP one (libopenblas0-openmp) follows it. When
#   the auto-detected OpenBLAS kernel lacks AVX-512 on a CPU that has it (older OpenBLAS
#   builds do not know newer CPUs), OPENBLAS_CORETYPE selects the AVX-512 kernel. glibc
#   hands every tensor of 128 KiB or more back to the kernel when it is freed and maps it
#   anew (zeroed pages, one fault each) at the next step: on a machine where faults are
#   dear that was 42% of PyTorch's mlp step (2026-12-06: 9,915 samples/s, 37,812 with
#   the blocks kept), so large blocks stay in the heap (MALLOC_MMAP_THRESHOLD_ and
#   MALLOC_TRIM_THRESHOLD_, unless set already; PyTorch's CPU tuning guides preload
#   jemalloc or tcmalloc for the same reason). Prints what the reference runs on.
# bench_gemm_limits: 1-thread GEMM GFLOP/s of herd's GEMM (dnnl_sgemm, bench/gemm_limit.c)
#   and of the reference's (torch.mm on OpenBLAS), N = 1024; sets GEMM_HERD, GEMM_TORCH and
#   GEMM_LIMIT (the larger: the best the machine reached today).
# frac ACHIEVED_GFLOPS CORES: achieved ÷ (GEMM_LIMIT × CORES), two decimals.
# bench_rss ARGS...: runs "$herd" ARGS under /usr/bin/time and prints the command, its
#   exit status, herd's stderr lines that matter, its summary and its peak RSS (VmHWM).

bench_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-/usr/bin/python3}

bench_reference_setup() {
  local info kernel
  info=$("$python" - <<'EOF'
import torch, threadpoolctl
blas = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
for i in blas:
    print("blas=%s version=%s threading=%s kernel=%s file=%s" % (
        i["internal_api"], i.get("version"), i.get("threading_layer"), i.get("architecture"), i["filepath"]))
if not blas:
    print("blas=unknown")
print("torch=%s" % torch.__version__)
EOF
) || { echo "bench: PyTorch or threadpoolctl missing: HERD_WITH_TORCH=1 bash scripts/install-deps.sh" >&2; return 1; }
  if ! grep -q '^blas=openblas .*threading=openmp' <<<"$info"; then
    echo "bench: PyTorch does not run on OpenMP OpenBLAS here:" >&2
    echo "$info" >&2
    echo "bench: install libopenblas0-openmp (HERD_WITH_TORCH=1 bash scripts/install-deps.sh) and select it:" \
         "update-alternatives --config libblas.so.3-x86_64-linux-gnu" >&2
    return 1
  fi
  kernel=$(sed -n 's/^blas=openblas .*kernel=\([^ ]*\).*/\1/p' <<<"$info" | head -n 1)
  # A kernel without AVX-512 on an AVX-512 CPU, whether auto-detected or set in the
  # environment (some machines export OPENBLAS_CORETYPE=Haswell), is not what a careful
  # user runs: SkylakeX is.
  if grep -qw avx512f /proc/cpuinfo && ! grep -qiE '^(skylakex|cooperlake|sapphirerapids)$' <<<"$kernel"; then
    echo "reference: OpenBLAS runs the $kernel kernel on an AVX-512 CPU" \
         "(OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}); setting OPENBLAS_CORETYPE=SkylakeX"
    export OPENBLAS_CORETYPE=SkylakeX
    info=$(OPENBLAS_CORETYPE=SkylakeX "$python" -c 'import torch, threadpoolctl
for i in threadpoolctl.threadpool_info():
    print("blas=%s version=%s threading=%s kernel=%s file=%s" % (i["internal_api"], i.get("version"),
          i.get("threading_layer"), i.get("architecture"), i["filepath"]))' | grep '^blas=openblas')
  fi
  export MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_:-4294967296}
  export MALLOC_TRIM_THRESHOLD_=${MALLOC_TRIM_THRESHOLD_:-4294967296}
  echo "reference: $(tr '\n' ' ' <<<"$info")OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}" \
       "MALLOC_MMAP_THRESHOLD_=$MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_=$MALLOC_TRIM_THRESHOLD_"
  echo "machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC')"
}

bench_gemm_limits() {
  local exe
  exe=$(mktemp)
  cc -O2 "$bench_root/bench/gemm_limit.c" -ldnnl -o "$exe" || { rm -f "$exe"; return 1; }
  GEMM_HERD=$(OMP_NUM_THREADS=1 "$exe" 1024 20 | sed -n 's/.*gflops=//p')
  rm -f "$exe"
  GEMM_TORCH=$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$python" -c '
import time, torch
torch.set_num_threads(1)
a = torch.rand(1024, 1024); b = torch.rand(1024, 1024)
best = 1e30
for r in range(23):
    t = time.perf_counter(); torch.mm(a, b); dt = time.perf_counter() - t
    if r >= 3: best = min(best, dt)
print("%.1f" % (2 * 1024 ** 3 / best * 1e-9))')
  GEMM_LIMIT=$(awk -v a="$GEMM_HERD" -v b="$GEMM_TORCH" 'BEGIN { print (a + 0 >= b + 0) ? a : b }')
  echo "gemm_limit: 1-thread fp32 GEMM 1024^3 (best of 20): herd dnnl_sgemm $GEMM_HERD GFLOP/s," \
       "PyTorch torch.mm (OpenBLAS) $GEMM_TORCH GFLOP/s; limit $GEMM_LIMIT GFLOP/s per core"
}

# bench_gemm_bf16_limit: the 1-thread bf16 GEMM (torch.mm on bf16 tensors: oneDNN's
#   AVX512_BF16 kernel, 1024^3, best of 20) into GEMM_BF16.
bench_gemm_bf16_limit() {
  GEMM_BF16=$(OMP_NUM_THREADS=1 "$python" -c '
import time, torch
torch.set_num_threads(1)
a = torch.rand(1024, 1024).bfloat16(); b = torch.rand(1024, 1024).bfloat16()
best = 1e30
for r in range(23):
    t = time.perf_counter(); torch.mm(a, b); dt = time.perf_counter() - t
    if r >= 3: best = min(best, dt)
print("%.1f" % (2 * 1024 ** 3 / best * 1e-9))')
  echo "gemm_limit: 1-thread bf16 GEMM 1024^3 (torch.mm on bf16, best of 20): $GEMM_BF16 GFLOP/s per core"
}

# kv KEY LINE: the value of KEY=... in a line of key=value pairs. best A B: the larger of
# two numbers, "-" meaning no result. ratio A B: A / B to two decimals, "-" without both.
kv() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p" | tail -n 1; }
best() {
  if [ "$1" = - ]; then echo "$2"; elif [ "$2" = - ]; then echo "$1";
  else awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 >= b + 0) ? a : b }'; fi
}
ratio() {
  if [ "$1" = - ] || [ "$2" = - ]; then echo -; else awk -v h="$1" -v t="$2" 'BEGIN { printf "%.2f", h / t }'; fi
}
# limit_frac RATE GFLOP_PER_UNIT PRECISION CORES: RATE units/s x GFLOP per unit over the
# limit of that precision (GEMM_LIMIT, or GEMM_BF16 for bf16) x CORES; "-" without both.
limit_frac() {
  local lim=$GEMM_LIMIT; [ "$3" = bf16 ] && lim=$GEMM_BF16
  awk -v s="$1" -v g="$2" -v l="$lim" -v c="$4" \
    'BEGIN { if (s == "-" || g == "") print "-"; else printf "%.2f", s * g / (l * c) }'
}

# Forward MFLOPs per sample of a zoo model, from `herd models`.
model_mflops() { "$herd" models | awk -v m="$1" '$1 == m { print $3 }'; }

# frac SAMPLES_PER_S MODEL CORES: 3 × forward FLOPs × samples/s ÷ (GEMM_LIMIT × CORES).
frac() {
  if [ "$1" = - ] || [ -z "${GEMM_LIMIT:-}" ]; then echo -; return; fi
  awk -v s="$1" -v f="$(model_mflops "$2")" -v l="$GEMM_LIMIT" -v c="$3" \
    'BEGIN { if (f == "" || l <= 0) print "-"; else printf "%.2f", 3 * f * 1e6 * s / (l * 1e9 * c) }'
}

bench_rss() {
  local t
  t=$(mktemp -d)
  echo "\$ herd $*"
  /usr/bin/time -o "$t/rss" -f "%M" "$herd" "$@" >"$t/out" 2>"$t/err"
  echo "exit=$?"
  grep -E "^herd: (training|peak memory|error)" "$t/err"
  tail -n 1 "$t/out" | grep "=" || true
  awk '/^[0-9]+$/ { printf "peak_rss_mib=%.1f\n", $1 / 1024 }' "$t/rss" # after time's note of a failure
  rm -rf "$t"
}

# The GPT benchmarks' set-up (gpt.sh, gpt_tp.sh): herd's version line; precs, fp32 and
# bf16 where herd runs bf16 natively; the reference's settings and both GEMM limits of
# this run; Debian's license texts tokenised byte-level into DIR/lic_train.bin.
bench_gpt_setup() {
  "$herd" --version | tail -n 1
  precs=(fp32 bf16)
  if ! "$herd" --version | grep -q 'bf16: native'; then
    echo "$(basename "$0"): no native bf16 on this CPU (herd refuses bf16 here): fp32 only"
    precs=(fp32)
  fi
  bench_reference_setup
  bench_gemm_limits
  GEMM_BF16=0
  if [ ${#precs[@]} -gt 1 ]; then bench_gemm_bf16_limit; fi
  cat /usr/share/common-licenses/* | "$python" "$bench_root/scripts/tokenize_bytes.py" - \
    "$1/lic_train.bin" "$1/lic_val.bin" >/dev/null
}

# bench_builds: builds=(this tree's build), with BASE's first when set (a build directory
#   of another commit, its Python package inside), for benchmarks that alternate the two.
bench_builds() {
  builds=("$PWD/build")
  if [ -n "${BASE:-}" ]; then builds=("$(cd "$BASE" && pwd)" "${builds[@]}"); fi
}

# bench_torch_line ROUND BUILD NP SCRIPT [ARGS...]: SCRIPT under BUILD's herd run on NP ranks
#   with BUILD's Python package; prints rank 0's ranks= line after the round and build.
bench_torch_line() {
  local round=$1 b=$2 np=$3 line
  shift 3
  line=$(PYTHONPATH=$b/python "$b/herd" run -np "$np" -- "$python" "$@" 2>/dev/null | grep ranks=) ||
    line="failed"
  echo "round=$round build=$b $line"
}

# bench_torch_rounds ROUNDS SCRIPT [ARGS...]: SCRIPT on 2 and 3 ranks for ROUNDS rounds,
#   the builds (bench_builds) alternating run by run.
bench_torch_rounds() {
  local rounds=$1 round np b
  shift
  for round in $(seq "$rounds"); do
    for np in 2 3; do
      for b in "${builds[@]}"; do
        bench_torch_line "$round" "$b" "$np" "$@"
      done
    done
  done
}

# bench_herd_torch_setup: for herd.torch's benchmarks: $herd (the build's CLI), the build's
#   Python package on PYTHONPATH, and what the reference and herd run on, printed.
bench_herd_torch_setup() {
  herd=build/herd
  export PYTHONPATH=$PWD/build/python
  bench_reference_setup
  echo "herd: $($herd --version | head -n 1)"
}
