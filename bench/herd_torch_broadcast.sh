#!/usr/bin/env bash
# hvd.broadcast_parameters of 350 tensors, and a broadcast_async_ of each then synchronized
# (bench/herd_torch_broadcast.py), on 2 and 3 ranks of 1 thread, ROUNDS rounds; with
# BASE=OTHER_BUILD_DIR (a build of another commit, its Python package inside) the two
# builds alternate, run by run.
# Usage: bash bench/herd_torch_broadcast.sh [ROUNDS] > bench/results/DATE-herd-torch-broadcast.txt
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
rounds=${1:-3}
bench_herd_torch_setup
bench_builds
bench_torch_rounds "$rounds" bench/herd_torch_broadcast.py
