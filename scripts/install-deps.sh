#!/usr/bin/env bash
# Installs the Debian packages herd needs to build, test and run. Idempotent and
# quiet when nothing is missing; uses sudo when not run as root.
# usage: install-deps.sh [all|build|test]: all (the default); what configuring and
# compiling herd need; what only the tests need, MPICH for their second build included
# (make test installs those while it builds herd).
set -euo pipefail

build_packages=(
  build-essential cmake pkg-config
  ninja-build # the Makefile's generator when present: a cold build 132 CPU-s against make's 169
  ccache # make test compiles herd four times: the MPICH and no-MPI builds reuse most objects
  libdnnl-dev ocl-icd-opencl-dev libcjson-dev zlib1g-dev libcmocka-dev
  libxxhash-dev # checkpoint checksums (XXH3)
  openmpi-bin libopenmpi-dev libhwloc-dev
  libprotobuf-c-dev protobuf-c-compiler
  python3-dev # the herd Python package (python/)
  clang libclang-rt-dev # make test: the ASan build under clang, with the libFuzzer targets (tests/fuzz)
  lld # which links that build (CMakeLists.txt: 35 CPU-s against ld.bfd's 49)
)
test_packages=(
  mpich libmpich-dev # make test builds herd a second time against MPICH (Open MPI stays the default)
  dataset-fashion-mnist # make run's data
  libplplot17 plplot-driver-cairo # herd plot (PLplot, opened when it draws: building needs none of it)
  protobuf-compiler python3-protobuf # tests: event files read with TensorBoard's own schema
  iproute2 iputils-ping # tests: the namespace cluster (ip netns) and a ping through its relay
  python3-numpy python3-pytest python3-torch # the Python package's use, herd.torch, their tests
  strace # tests: cli_lines sees every write herd makes to stdout and stderr
  slurmctld slurmd slurm-client munge # tests: cluster_slurm, a one-node Slurm (srun --mpi=pmix)
)
case "${1:-all}" in
  all) packages=("${build_packages[@]}" "${test_packages[@]}") ;;
  build) packages=("${build_packages[@]}") ;;
  test) packages=("${test_packages[@]}") ;;
  *) echo "install-deps: unknown group '$1' (all, build or test)" >&2; exit 2 ;;
esac
# The PyTorch reference's set-up for benchmarks (bench/, tests/make_fixtures.py) is
# optional: HERD_WITH_TORCH=1. PyTorch runs its GEMMs on the OpenMP OpenBLAS, which
# follows its thread count (the reference BLAS makes it ~15x slower); threadpoolctl
# reports which BLAS and kernel it runs.
if [ "${HERD_WITH_TORCH:-0}" = 1 ] && [ "${1:-all}" != build ]; then
  packages+=(python3-threadpoolctl libopenblas0-openmp libopenblas-openmp-dev
             python3-torchvision python3-filelock python3-packaging) # bench/horovod_example.sh: Horovod's own example
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Refresh package lists when they are missing or older than a day.
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -n1)" ]; then
  $sudo apt-get update -qq
fi
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
