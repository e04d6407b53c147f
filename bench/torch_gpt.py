"""GPT training speed in PyTorch for bench/gpt.sh: the decoder of a herd model file
(bench/herd_torch_models.py), the optimizer of `herd bench train` (SGD, momentum 0.9,
weight decay 5e-4), optionally CPU autocast bf16; one process, or --ddp N ranks of
DistributedDataParallel over gloo, each bound to a core of its own and 1 thread, as
`herd run --threads-per-rank 1` binds herd's; or --device cuda, one GPU (bf16 by CUDA
autocast, TF32 off). Prints one key=value line: tokens_per_s is the job's (every rank's
batch).

    python3 bench/torch_gpt.py --model gpt2 --seq-len 256 --batch-size 4 --steps 3 [--ddp 2]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# torch_reference pins OpenBLAS to --threads (1 here) as it loads, and has the DDP launcher.
import torch_reference as ref  # noqa: E402
import herd_torch_models as htm  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def body(rank, world, args, queue):
    torch.set_num_threads(1)
    torch.manual_seed(1)
    spec = htm.load_spec(args.model)
    vocab = next(l for l in spec["layers"] if l["type"] == "embedding")["vocab"]
    dev = torch.device(args.device)
    net = htm.HerdNet(spec, (1, args.seq_len, 1), vocab).to(dev)
    net.train()
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        net = DDP(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    gen = torch.Generator().manual_seed(rank)
    b, t = args.batch_size, args.seq_len
    x = torch.randint(0, 256, (b, 1, t, 1), generator=gen).to(torch.float32)
    y = torch.randint(0, 256, (b * t,), generator=gen)
    x, y = x.to(dev), y.to(dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            logits = net(x)
        F.cross_entropy(logits.float().reshape(-1, vocab), y).backward()
        opt.step()

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for _ in range(args.warmup):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync()
    dt = (time.perf_counter() - t0) / args.steps
    if rank == 0:
        queue.put({"model": args.model, "framework": "torch", "precision": args.precision,
                   "ranks": world, "batch": b, "seq_len": t, "step_ms": round(dt * 1e3, 1),
                   "tokens_per_s": round(world * b * t / dt, 1), "device": args.device,
                   "torch": torch.__version__})


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--batch-size", type=int, required=True, help="per rank")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--ddp", type=int, default=1, help="ranks (gloo)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = p.parse_args()
    args.threads, args.json = 1, False  # what torch_reference's launcher reads
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if args.ddp > 1:
        ref.run_ddp(args, body)
        return
    out = []

    class Sink:
        put = out.append
    body(0, 1, args, Sink)
    ref.emit(out[0], False)


if __name__ == "__main__":
    main()
