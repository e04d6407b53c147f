#!/usr/bin/env bash
# Issue 30's CUDA tensors on one GPU, about a minute: herd.torch (the package bench/gpu/
# pack.sh carries, on Python's stable ABI) under the image's PyTorch:
#   1. mpi_dist_device: the public API's sums in GPU memory on 2 ranks sharing the GPU
#      (herd then sums through MPI via host memory: NCCL takes one GPU a rank);
#   2. herd.torch imports beside PyTorch and sees the GPU;
#   3. tests/python/torch_ranks.py: a CNN (and one with hvd.SyncBatchNorm) trained by one
#      GPU process, then by 2 ranks on the GPU with DistributedOptimizer, whose weights
#      must lie within 1e-4 of the one process's; and every collective on CUDA tensors
#      checked exactly on the 2 ranks.
#   here:  bench/gpu/pack.sh        there: bench/gpu/torch_cuda.sh [OUTDIR]
# DEV=sim checks the script where there is no GPU (part 1 on the simulated device; part 3
# says it is skipped); PYTHON names the Python with PyTorch (default python3).
set -u
out=${1:-${OUT:-/tmp}}
dev=${DEV:-cuda}
mkdir -p "$out"
exec > >(tee "$out/torch-cuda.txt") 2>&1
cd "$(dirname "$0")/../.."
. .dev/env.sh
. bench/gpu/lib.sh
# Python finds herd's package in the bundle and libherd.so's libraries there; PyTorch's
# own CUDA libraries (the image's) are the ones herd's resolve to, being loaded first.
export PYTHONPATH=$PWD/.dev/python
py=${PYTHON:-python3}
pyenv=(env LD_LIBRARY_PATH="$HL" timeout 300 "$py")
date -u
check "mpi_dist_device $dev, 2 ranks" env LD_LIBRARY_PATH="$HL" timeout 300 mpiexec.hydra -np 2 \
  .dev/tests/mpi_dist_device "$dev"
check "herd.torch imports beside PyTorch" "${pyenv[@]}" -c \
  'import torch, herd, herd.torch as hvd; print(torch.__version__, torch.cuda.is_available(), herd.build_info()["build"])'
if ! "${pyenv[@]}" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then
  echo "skipped: PyTorch sees no GPU: the training and the collectives on CUDA tensors"
else
  w=$tmp/w; mkdir -p "$w"
  check "one GPU process trains the CNN (and the one with SyncBatchNorm)" "${pyenv[@]}" \
    tests/python/torch_ranks.py "$w" train 1 none cuda + syncbn 1 cuda
  check "2 ranks on the GPU train it and pass every collective on CUDA tensors" bash -c \
    "set -o pipefail; LD_LIBRARY_PATH='$HL' timeout 300 mpiexec.hydra -np 2 '$py' tests/python/torch_ranks.py '$w' \
       train 1 none cuda + syncbn 1 cuda + cuda_collectives | tee '$w/ranks.txt' && test \$(grep -o 'ok: cuda:' '$w/ranks.txt' | wc -l) -ge 16"
  check "2 ranks end within 1e-4 of one GPU process" "${pyenv[@]}" -c "
import torch
for two, one in [('weights-2-1-none-cuda.pt', 'weights-1-1-none-cuda.pt'),
                 ('weights-syncbn-2-1-cuda.pt', 'weights-syncbn-1-1-cuda.pt')]:
    a, b = torch.load('$w/' + two), torch.load('$w/' + one)
    d = max(float((a[k].double() - b[k].double()).abs().max()) for k in a)
    print(two, 'max |difference|', d)
    assert d < 1e-4"
fi
summary torch_cuda
