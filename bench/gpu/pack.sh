#!/usr/bin/env bash
# Builds herd with CUDA here and packs what a GPU machine without herd's libraries needs
# into .dev/ (ignored by git; name it in the device call's carry), for bench/gpu/check.sh.
#   usage (project root): bench/gpu/pack.sh [BUILD_DIR]
#   BEFORE=COMMIT also builds that commit's herd (in a worktree) as .dev/herd-before, for
#   half.sh's HERD_BEFORE=.dev/herd-before: before and after side by side in one run.
#   XEON=1 also builds herd for the device's CPU (-march=sapphirerapids, no CUDA) as
#   .dev/herd-xeon, for bench/gpu/xeon.sh (issue 31).
# The GPU image has CUDA, cuDNN and NCCL (inside its PyTorch) but no MPI, oneDNN or hwloc:
# herd is built against MPICH, whose launcher (Hydra) runs from any folder, and travels
# with every non-CUDA, non-libc library it loads, UCX's transport modules and Hydra.
# .dev/env.sh, sourced there, unpacks them and sets HL (herd's LD_LIBRARY_PATH) and PATH.
set -eu
B=${1:-build-gpu}
launch=(); command -v ccache >/dev/null && launch=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
mkdir -p "$B"; log=$B/pack.log
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DHERD_CUDA=ON -DHERD_NCCL=ON -DHERD_NATIVE=OFF \
  -DHERD_MPI=mpich "${launch[@]}" >"$log" 2>&1 || { tail -20 "$log"; exit 1; }
cmake --build "$B" -j"$(nproc)" >>"$log" 2>&1 || { tail -30 "$log"; exit 1; }
rm -rf .dev; mkdir -p .dev/tests .dev/bin .dev/lib/ucx
cp "$B/herd" .dev/
nm -C --defined-only .dev/herd >.dev/herd.sym # names for kprof.c's sampler (KPROF_SYMS)
if [ -n "${BEFORE:-}" ]; then
  wt=$(mktemp -d); git worktree add -q --detach "$wt" "$BEFORE"
  cmake -S "$wt" -B "$wt/build" -DCMAKE_BUILD_TYPE=Release -DHERD_CUDA=ON -DHERD_NCCL=ON \
    -DHERD_NATIVE=OFF -DHERD_MPI=mpich "${launch[@]}" >>"$log" 2>&1 &&
    cmake --build "$wt/build" -j"$(nproc)" --target herd >>"$log" 2>&1 ||
    { tail -30 "$log"; git worktree remove --force "$wt"; exit 1; }
  cp "$wt/build/herd" .dev/herd-before
  nm -C --defined-only .dev/herd-before >.dev/herd-before.sym
  git worktree remove --force "$wt"
fi
if [ "${XEON:-0}" = 1 ]; then
  cmake -S . -B build-xeon -DCMAKE_BUILD_TYPE=Release -DHERD_CUDA=OFF -DHERD_NATIVE=OFF \
    -DHERD_MPI=mpich -DCMAKE_C_FLAGS=-march=sapphirerapids "${launch[@]}" >>"$log" 2>&1 &&
    cmake --build build-xeon -j"$(nproc)" --target herd >>"$log" 2>&1 || { tail -30 "$log"; exit 1; }
  cp build-xeon/herd .dev/herd-xeon
fi
# The CUDA tests and the device-independent tests that take a device (sim in CI, cuda there).
find "$B" -maxdepth 3 -type f -perm -u+x -name 'test_*' \( -name '*cuda*' -o -name '*gpu*' \
  -o -name 'test_comm_device' -o -name 'test_device_*' \) -exec cp {} .dev/tests/ \;
# Token data for half.sh's GPT part: Debian's license texts, tokenised byte-level.
mkdir -p .dev/tok
cat /usr/share/common-licenses/* | python3 scripts/tokenize_bytes.py - .dev/tok/lic_train.bin \
  .dev/tok/lic_val.bin >/dev/null
# The MPI tests that take a device (run there under Hydra with 2 ranks on the one GPU).
for t in mpi_equivalence mpi_pipeline mpi_staged mpi_dist_device test_loss_scale; do cp "$B/tests/$t" .dev/tests/; done
# herd's Python package (stable ABI: it imports in the image's Python 3.12) and libherd.so,
# for bench/gpu/torch_cuda.sh (herd.torch on CUDA tensors, issue 30).
mkdir -p .dev/python/herd .dev/lib
cp -L "$B"/python/herd/*.py "$B"/python/herd/_herd.abi3.so .dev/python/herd/
cp -L "$B/libherd.so.0" .dev/lib/
# bench/gpu/speed.sh's tools: the backend's op timer and the kernel-time recorder.
cuda=/usr/local/cuda
gcc -O2 -Iinclude -Isrc -I$cuda/include bench/bench_cuda_ops.c "$B/libherd.a" -L$cuda/lib64 \
  -lcudnn -lcublas -lcudart -lnccl -lmpich -lstdc++ -ldnnl -lcjson -lz -lxxhash -fopenmp -lm \
  -o .dev/bench_cuda_ops
cupti=$(dirname "$(find -L $cuda/ -name 'libcupti.so' | head -n1)")
gcc -O2 -Wall -Wextra -shared -fPIC -I$cuda/include bench/gpu/kprof.c -L"$cupti" -lcupti -lstdc++ \
  -o .dev/kprof.so
# issue 31's fp32 GEMM paths on the device machine's CPU (a Xeon with AMX).
gcc -O2 bench/bench_gemm.c -ldnnl -lopenblas -o .dev/bench_gemm
hydra=$(readlink -f "$(command -v mpiexec.hydra)")
cp "$hydra" "$(dirname "$hydra")/hydra_pmi_proxy" .dev/bin/
ucx=/usr/lib/x86_64-linux-gnu/ucx
cp -L "$ucx"/libuct_cma.so.0 "$ucx"/libuct_ib.so.0 "$ucx"/libuct_rdmacm.so.0 .dev/lib/ucx/ 2>/dev/null || true
for f in .dev/herd .dev/herd-xeon .dev/bench_cuda_ops .dev/bench_gemm .dev/tests/* .dev/bin/mpiexec.hydra .dev/bin/hydra_pmi_proxy .dev/lib/ucx/* .dev/lib/libherd.so.0; do
  [ -e "$f" ] && ldd "$f" 2>/dev/null || true # set -e: one missing binary (no XEON=1) ended the list
done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -v -E "/(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|cuda|cudnn|cublas|nccl|libnvidia" |
  while read -r l; do cp -L "$l" .dev/lib/; done
tar -C .dev -cJf .dev/lib.tar.xz lib && rm -rf .dev/lib
# The tests link libherd statically: 14 of them took 28 MiB, packed together about a tenth.
tar -C .dev -cJf .dev/tests.tar.xz tests && rm -rf .dev/tests
cat >.dev/env.sh <<'ENV'
# Sourced on the GPU machine from the project root (bench/gpu/check.sh does it).
D=$PWD/.dev
U=${TMPDIR:-/tmp}/herd-dev # unpacked outside the tree, which stays small enough to travel
mkdir -p "$U"; [ -d "$U/lib" ] || tar -C "$U" -xJf "$D/lib.tar.xz"
[ -d "$D/tests" ] || tar -C "$D" -xJf "$D/tests.tar.xz" # there, the scripts' .dev/tests
_dirs=$(find /usr/local/cuda/targets /usr/local/cuda/lib64 /usr/local/cuda/extras /opt/torch/.venv/lib/python3.12/site-packages/nvidia \
  \( -name 'libcudnn.so.9' -o -name 'libcublas.so.13' -o -name 'libcudart.so.13' -o -name 'libnccl.so.2' \
  -o -name 'libcupti.so.13' \) \
  2>/dev/null | xargs -r -n1 dirname | sort -u | paste -sd:)
HL=$U/lib:$_dirs
export PATH=$D/bin:$PATH UCX_MODULE_DIR=$U/lib/ucx
ENV
du -sh .dev
# A device call carries at most 64 MiB: the tracked tree and .dev together. On
# 2026-12-04 every test unpacked put it at 65 MiB; the tests packed (above), 41 MiB.
tree=$(git ls-files -z | xargs -0 stat -c %s | awk '{ s += $1 } END { print int(s / 1048576) }')
dev=$(du -sm .dev | cut -f1)
if [ $((tree + dev)) -gt 62 ]; then
  echo "pack.sh: warning: the tree ($tree MiB) and .dev ($dev MiB) are near or over a device" \
       "call's 64 MiB; leave out of .dev what the call does not run" >&2
fi
