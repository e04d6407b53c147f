#!/usr/bin/env bash
# Packs Fashion-MNIST for bench/gpu/half.sh's accuracy run into .dev/fmnist: the GPU image
# has no copy, and the whole set would take the device call past its 64 MiB. So the
# first N training images (default 30000; their idx header says N) and the whole test set.
#   usage (project root, after bench/gpu/pack.sh): bench/gpu/pack_fmnist.sh [N]
set -eu
n=${1:-30000}
src=/usr/share/datasets/fashion-mnist
dst=.dev/fmnist
mkdir -p "$dst"
cp "$src"/t10k-*.gz "$dst"/
python3 - "$src" "$dst" "$n" <<'PY'
import gzip, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for name, item in (("train-images-idx3-ubyte", 28 * 28), ("train-labels-idx1-ubyte", 1)):
    raw = gzip.open(f"{src}/{name}.gz").read()
    dims = 3 if "images" in name else 1
    head = 4 + 4 * dims
    total = struct.unpack(">I", raw[4:8])[0]
    if n > total:
        sys.exit(f"{name}: {n} asked, {total} there")
    out = raw[:4] + struct.pack(">I", n) + raw[8:head] + raw[head:head + n * item]
    with gzip.open(f"{dst}/{name}.gz", "wb", compresslevel=9) as f:
        f.write(out)
PY
du -sh "$dst"
