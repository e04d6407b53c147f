#!/usr/bin/env bash
# What the ranks' agreement on each collective (python/herd/_torch_agree.py) costs a
# blocking herd.torch collective on a small tensor (bench/herd_torch_small.py), on 2 and 3
# ranks of 1 thread, ROUNDS rounds; with BASE=OTHER_BUILD_DIR (a build of another commit,
# its Python package inside) the two builds alternate, run by run.
# Usage: BASE=... bash bench/herd_torch_agree.sh [ROUNDS] > bench/results/DATE-herd-torch-agree.txt
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
rounds=${1:-3}
bench_herd_torch_setup
bench_builds
bench_torch_rounds "$rounds" bench/herd_torch_small.py
