#!/usr/bin/env bash
# Horovod's own PyTorch example (examples/pytorch/pytorch_mnist.py of horovod/horovod,
# which herd does not ship: give its path) on herd.torch with only its import lines
# changed, under herd run: prints the diff and the run (docs/python.md).
# Usage: bash bench/horovod_example.sh PYTORCH_MNIST_PY [NP] [EPOCHS] [THE EXAMPLE'S FLAGS...]
#   (--use-adasum, --fp16-allreduce)
# Needs the build (build/herd, build/python) and torchvision, filelock and packaging
# (HERD_WITH_TORCH=1 scripts/install-deps.sh). No network: torchvision finds MNIST's raw
# files under --data-dir; Debian's Fashion-MNIST files stand in for them (same format).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
example=${1:?usage: horovod_example.sh PYTORCH_MNIST_PY [NP] [EPOCHS]}
np=${2:-2}
epochs=${3:-1}
shift $(($# < 3 ? $# : 3))
python=${PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The import lines: horovod.torch becomes herd.torch; "import horovod" serves only the
# --num-proc path (horovod.run), which herd run replaces.
sed -e 's/^import horovod\.torch as hvd$/import herd.torch as hvd/' -e '/^import horovod$/d' \
  "$example" > "$work/pytorch_mnist.py"
echo "## the change (diff -u original changed)"
diff -u "$example" "$work/pytorch_mnist.py" | sed "s|$work/||" || true
mkdir -p "$work/data/MNIST/raw"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  gunzip -c "/usr/share/datasets/fashion-mnist/$f.gz" > "$work/data/MNIST/raw/$f"
done
echo "## herd run -np $np -- python3 pytorch_mnist.py --epochs $epochs --no-cuda --data-dir DIR $* ($(date -u '+%Y-%m-%d %H:%M UTC'))"
cd "$work"
HOME=$work PYTHONPATH=$here/build/python "$here/build/herd" run -np "$np" -- \
  "$python" pytorch_mnist.py --epochs "$epochs" --no-cuda --data-dir "$work/data" "$@" 2>&1 |
  grep -v "UserWarning\|warnings.warn\|size_average"
echo "exit=${PIPESTATUS[0]}"
