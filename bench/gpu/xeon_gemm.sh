#!/usr/bin/env bash
# Issue 31 on the device machine's CPU (a 16-core Xeon with AMX), about 1 minute: the fp32
# GEMM paths herd could take (bench/bench_gemm.c: dnnl_sgemm, a cached oneDNN matmul,
# OpenBLAS choosing its own kernels) beside PyTorch's torch.mm (MKL) on the same shapes, at
# 1 and 16 threads: is mlp's fp32 gap at one thread (0.67x PyTorch) the GEMM's?
#   here:  bench/gpu/pack.sh        there: bench/gpu/xeon_gemm.sh OUTDIR
set -u
out=${1:-${OUT:-/tmp}}
mkdir -p "$out"
exec > >(tee "$out/xeon-gemm.txt") 2>&1
cd "$(dirname "$0")/../.."
. .dev/env.sh
lscpu | grep -E "^Model name|^CPU\(s\)|^NUMA node\(s\)"
grep -o -w -E "amx_bf16|amx_tile|avx512_bf16|avx512f" /proc/cpuinfo | sort -u | paste -sd' '
for t in 1 16; do
  echo "-- $t thread(s)"
  OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t LD_LIBRARY_PATH=$HL timeout 120 .dev/bench_gemm
  env -u LD_LIBRARY_PATH timeout 120 python3 bench/torch_gemm.py --threads $t
done
