#!/usr/bin/env bash
# What cuDNN's FFT and Winograd algorithms change in fp32 and what leaving them out
# (HERD_CUDNN_EXACT=1) costs: GPU-against-CPU weights after 8 steps (lenet5 at batch 32,
# resnet20 at 16), the algorithms picked per layer (HERD_CUDNN_LOG=1), mpi_pipeline on the
# GPU against one CPU process, and resnet50's step time. Run on the GPU machine after
# bench/gpu/pack.sh here:  bench/gpu/conv_algos.sh [OUTDIR]
set -u
out=${1:-${OUT:-/tmp}}
mkdir -p "$out"
exec > >(tee "$out/conv-algos.txt") 2>&1
cd "$(dirname "$0")/../.."
. .dev/env.sh
. bench/gpu/lib.sh
herd() { LD_LIBRARY_PATH=$HL timeout 120 .dev/herd "$@"; }
nvidia-smi -L
L=(--model lenet5 --data synthetic:1,28,28,10,1024 --batch-size 32)
R=(--model resnet20 --data synthetic:3,32,32,10,256 --batch-size 16)
for m in L R; do
  declare -n M=$m
  c=("${M[@]}" --epochs 1 --max-steps 8 --seed 3 --quiet --threads 8)
  herd train "${c[@]}" --device cpu --save "$tmp/$m.cpu" >/dev/null 2>&1
  for exact in 0 1; do
    HERD_CUDNN_EXACT=$exact HERD_CUDNN_LOG=1 herd train "${c[@]}" --device cuda \
      --save "$tmp/$m.$exact" >"$tmp/log" 2>&1
    echo "${M[1]} batch ${M[5]}, HERD_CUDNN_EXACT=$exact, cuda against cpu after 8 steps:" \
      "$(python3 bench/gpu/compare.py "$tmp/$m.cpu" "$tmp/$m.$exact" 1)"
    grep -o "cuDNN conv.*" "$tmp/log" | sort -u | sed 's/^/  /'
  done
done
for exact in 0 1; do
  echo "mpi_pipeline cuda, HERD_CUDNN_EXACT=$exact:"
  HERD_CUDNN_EXACT=$exact LD_LIBRARY_PATH=$HL timeout 120 mpiexec.hydra -np 2 \
    .dev/tests/mpi_pipeline cuda 2>&1 | grep -E "FAIL|match" | sed 's/^/  /'
done
B=(--model resnet50 --data synthetic:3,224,224,1000,256 --batch-size 64 --steps 12 --device cuda)
LD_LIBRARY_PATH=$HL bench_pair HERD_CUDNN_EXACT .dev/herd "${B[@]}"
