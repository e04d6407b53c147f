#!/usr/bin/env bash
# Open MPI's shared-memory single copy (CMA) against copy-in/copy-out, MPI only (no herd):
# bench/bench_iallreduce.c on lenet5's and mlp's gradient sizes, both settings alternated
# three times, 2 ranks bound to cores. What `herd run`'s choice and `herd doctor`'s
# shm_single_copy check rest on.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
exe=$(mktemp)
trap 'rm -f "$exe"' EXIT
mpicc -O2 "$root/bench/bench_iallreduce.c" -o "$exe"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for r in 1 2 3; do
  echo "-- round $r: CMA (Open MPI's default)"
  mpirun -np 2 --bind-to core "$exe" 246824 2678824
  echo "-- round $r: single copy off (--mca btl_vader_single_copy_mechanism none)"
  mpirun -np 2 --bind-to core --mca btl_vader_single_copy_mechanism none "$exe" 246824 2678824
done
