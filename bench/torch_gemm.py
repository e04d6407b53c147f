"""PyTorch's fp32 matrix products on bench/bench_gemm.c's shapes (mlp and lenet5 at batch
128: forward x*W^T, backward dy*W and dy^T*x), best of 50, for issue 31: beside herd's
GEMM paths on the same CPU, it says whether a gap in training speed is the GEMM's.

    python3 bench/torch_gemm.py --threads T
"""
import argparse
import time

import torch

SHAPES = [(128, 512, 784, 0, 1), (128, 784, 512, 0, 0), (512, 784, 128, 1, 0),
          (128, 512, 512, 0, 1), (128, 512, 512, 0, 0), (512, 512, 128, 1, 0),
          (128, 10, 512, 0, 1), (128, 512, 10, 0, 0), (10, 512, 128, 1, 0),
          (128, 120, 400, 0, 1), (120, 400, 128, 1, 0)]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print("torch", torch.__version__, "threads", torch.get_num_threads(), "mkl",
          torch.backends.mkl.is_available(), "mkldnn", torch.backends.mkldnn.is_available())
    total = 0.0
    for m, n, k, ta, tb in SHAPES:
        # Stored as the C program stores them: A is m x k (k x m when transposed), B k x n.
        A = torch.rand(k, m) if ta else torch.rand(m, k)
        B = torch.rand(n, k) if tb else torch.rand(k, n)
        A2, B2 = (A.t() if ta else A), (B.t() if tb else B)
        out = torch.empty(m, n)
        best = 1e9
        for _ in range(50):
            t0 = time.perf_counter()
            torch.mm(A2, B2, out=out)
            best = min(best, time.perf_counter() - t0)
        total += best
        print("%4d x %4d x %4d %s%s  torch.mm %6.1f GFLOP/s" % (
            m, n, k, "T" if ta else "N", "T" if tb else "N", 2.0 * m * n * k / best * 1e-9))
    print("all shapes, best times summed: torch.mm %.1f us" % (total * 1e6))


if __name__ == "__main__":
    main()
