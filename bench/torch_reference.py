#!/usr/bin/python3
"""PyTorch reference for herd's training throughput (and time to accuracy).

Trains the models in models/ the way `herd bench train` does: Fashion-MNIST
held in memory as normalised float32, batches sliced from a per-epoch random
permutation, SGD (momentum 0.9, lr 0.05, weight decay 5e-4), cross-entropy.
One line per model, key=value:

    model=lenet5 framework=torch threads=1 batch=128 samples_per_s=... step_ms=...

With --ddp N it runs N processes on this machine (DistributedDataParallel, gloo,
default buckets), each with --threads threads, its own shard of every epoch's
permutation and --batch-size samples per step; samples_per_s counts all ranks:

    model=lenet5 framework=torch-ddp ranks=2 threads=1 batch=128 samples_per_s=... step_ms=...

With --device cuda it measures one GPU the way `herd bench train --device cuda`
does, on synthetic data already on the GPU (resnet20 on 3x32x32 with 10 classes,
resnet50 on 3x224x224 with 1000, or --shape), optionally channels_last, with TF32
(--precision tf32) or autocast (bf16, fp16 with a GradScaler):

    model=resnet50 framework=torch device=cuda precision=tf32 batch=256 samples_per_s=...

Usage: /usr/bin/python3 bench/torch_reference.py [--models mlp,lenet5,resnet20]
       [--threads 1] [--batch-size 128] [--steps 50] [--warmup 5] [--json] [--ddp N]
       [--precision fp32|bf16] [--shape C,H,W,CLASSES (synthetic data)]
       /usr/bin/python3 bench/torch_reference.py --time-to-acc [--target 0.89]
       /usr/bin/python3 bench/torch_reference.py --time-to-acc --ddp 2 $(make -s print-run-flags)
       python3 bench/torch_reference.py --device cuda [--models resnet20,resnet50]
       [--precision fp32|tf32|bf16|fp16] [--channels-last] [--batch-size 256]
"""
import argparse
import gzip
import json
import os
import sys
import time


def _pin_threads():
    """Debian's torch calls OpenBLAS (pthread build), whose thread pool ignores
    torch.set_num_threads and sizes itself from OPENBLAS_NUM_THREADS or
    OMP_NUM_THREADS when the library loads, else from the core count. Make
    --threads govern it too, so "1 thread" means one thread."""
    for i, a in enumerate(sys.argv):
        if a.startswith("--threads="):
            n = a.split("=", 1)[1]
        elif a == "--threads" and i + 1 < len(sys.argv):
            n = sys.argv[i + 1]
        else:
            continue
        break
    else:
        n = "1"
    os.environ["OPENBLAS_NUM_THREADS"] = n
    os.environ["OMP_NUM_THREADS"] = n


# Before numpy too: it loads the same OpenBLAS.
_pin_threads()
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import herd_torch_models  # noqa: E402

DATA_DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST training set; herd uses the same


def load_idx(path):
    """Read a gzipped IDX file (the MNIST format) into a numpy array."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_fashion_mnist(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    x = load_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"))
    y = load_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"))
    x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - MEAN) / STD
    return x.unsqueeze(1).contiguous(), torch.from_numpy(y.astype(np.int64))


def batches(n, batch_size, gen):
    """Endless index batches: a fresh permutation each epoch, last partial batch dropped."""
    while True:
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n - batch_size + 1, batch_size):
            yield perm[i:i + batch_size]


def cpu_autocast(args):
    """--precision bf16 on the CPU: autocast's bf16 convolutions and matmuls, as a
    user of PyTorch 1.13 would run them (no loss scaling: bf16 has fp32's range)."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16")


def make_training(model, args, shape=None, classes=10):
    torch.manual_seed(args.seed)
    net = herd_torch_models.build(model, *((shape, classes) if shape else ()))
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        with cpu_autocast(args):
            logits = net(x)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        opt.step()
        return loss

    return net, step


def synthetic(args):
    """--shape C,H,W,CLASSES on the CPU: 4 batches of random images, as herd's
    synthetic: data."""
    c, h, w, classes = (int(v) for v in args.shape.split(","))
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.randn((4 * args.batch_size, c, h, w), generator=gen)
    y = torch.randint(0, classes, (4 * args.batch_size,), generator=gen)
    return x, y, (c, h, w), classes


def bench(model, x_train, y_train, args):
    shape, classes = None, 10
    if args.shape:
        x_train, y_train, shape, classes = synthetic(args)
    net, step = make_training(model, args, shape, classes)
    gen = torch.Generator().manual_seed(args.seed)
    it = batches(len(x_train), args.batch_size, gen)
    for _ in range(args.warmup):
        idx = next(it)
        step(x_train[idx], y_train[idx])
    # Timed: batch gathering + forward + backward + update, as herd times it.
    t0 = time.perf_counter()
    for _ in range(args.steps):
        idx = next(it)
        loss = step(x_train[idx], y_train[idx])
    loss = loss.item()
    dt = time.perf_counter() - t0
    return {
        "model": model, "framework": "torch", "threads": args.threads,
        "precision": args.precision, "batch": args.batch_size, "samples_per_s": round(args.steps * args.batch_size / dt, 1),
        "step_ms": round(1000 * dt / args.steps, 3), "steps": args.steps,
        "warmup": args.warmup, "loss": round(loss, 4), "torch": torch.__version__,
    }


def _free_port():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ddp_entry(rank, world, port, body, args, out_queue):
    """One DDP rank: bound to cores of its own (as `herd run` binds herd's ranks), a gloo
    process group, then body(rank, world, args, out_queue)."""
    import torch.distributed as dist

    if world * args.threads <= (os.cpu_count() or 1):
        os.sched_setaffinity(0, range(rank * args.threads, (rank + 1) * args.threads))
    torch.set_num_threads(args.threads)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        body(rank, world, args, out_queue)
    finally:
        dist.destroy_process_group()
        # Tearing down a DDP module (its reducer) at times spins forever in torch
        # 1.13 here; end the process without running destructors.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def run_ddp(args, body):
    import torch.multiprocessing as mp
    # Loopback: gloo otherwise picks the interface the hostname resolves to.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(_ddp_entry, args=(args.ddp, _free_port(), body, args, queue), nprocs=args.ddp, join=True)
    while not queue.empty():
        emit(queue.get(), args.json)


def _ddp_throughput(rank, world, args, out_queue):
    """Same model and SGD step as bench(), wrapped in DistributedDataParallel; rank r
    takes every world-th index of the shared per-epoch permutation (what
    DistributedSampler does)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    keep = []  # the DDP modules live until the process ends (see _ddp_entry)
    shape, classes = None, 10
    if args.shape:  # the same random batches on every rank, sharded as below
        x_train, y_train, shape, classes = synthetic(args)
    else:
        x_train, y_train = load_fashion_mnist(args.data_dir, "train")
    for model in (args.models or "mlp,lenet5,resnet20").split(","):
        torch.manual_seed(args.seed)
        # DDP broadcasts rank 0's weights.
        net = DDP(herd_torch_models.build(model, *((shape, classes) if shape else ())))
        keep.append(net)
        net.train()
        opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
        gen = torch.Generator().manual_seed(args.seed)  # same permutation on every rank
        n = len(x_train)

        def shard_batches():
            while True:
                mine = torch.randperm(n, generator=gen)[rank::world]
                for i in range(0, len(mine) - args.batch_size + 1, args.batch_size):
                    yield mine[i:i + args.batch_size]

        def step(idx):
            opt.zero_grad(set_to_none=True)
            with cpu_autocast(args):
                logits = net(x_train[idx])
            loss = F.cross_entropy(logits.float(), y_train[idx])
            loss.backward()  # gradients averaged over ranks here
            opt.step()
            return loss

        it = shard_batches()
        for _ in range(args.warmup):
            step(next(it))
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            loss = step(next(it))
        loss = loss.item()
        dist.barrier()
        # The job is as fast as its slowest rank.
        dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        dt = dt.item()
        if rank == 0:
            out_queue.put({
                "model": model, "framework": "torch-ddp", "ranks": world,
                "threads": args.threads, "precision": args.precision, "batch": args.batch_size,
                "samples_per_s": round(world * args.steps * args.batch_size / dt, 1),
                "step_ms": round(1000 * dt / args.steps, 3), "steps": args.steps,
                "warmup": args.warmup, "loss": round(loss, 4), "torch": torch.__version__,
            })


def evaluate(net, x, y, batch_size=1000):
    net.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            correct += (net(x[i:i + batch_size]).argmax(1) == y[i:i + batch_size]).sum().item()
    net.train()
    return correct / len(x)


def recipe_lr(args, steps_per_epoch, world):
    """herd's learning rate per step (src/optim/schedule.c): --lr, times global batch / 256
    with --lr-scaling linear; linear warmup over --warmup-epochs (step 0 already at
    lr / warm); then constant, or cosine annealed to 0 at the last step + 1."""
    import math
    base = args.lr * (args.batch_size * world / 256.0 if args.lr_scaling == "linear" else 1.0)
    warm = round(args.warmup_epochs * steps_per_epoch)
    total = args.epochs * steps_per_epoch - warm

    def factor(step):
        if step < warm:
            return (step + 1) / warm
        if args.schedule == "cosine" and total > 0:
            return 0.5 * (1.0 + math.cos(math.pi * min(step - warm, total) / total))
        return 1.0
    return base, factor


def recipe_optimizer(net, args, lr):
    """SGD as herd's: weight decay as L2 on weights only (biases and batch-norm
    parameters are not decayed), momentum, Nesterov."""
    decay = [p for p in net.parameters() if p.dim() > 1]
    rest = [p for p in net.parameters() if p.dim() <= 1]
    return torch.optim.SGD([{"params": decay, "weight_decay": args.weight_decay},
                            {"params": rest, "weight_decay": 0.0}],
                           lr=lr, momentum=args.momentum, nesterov=args.nesterov)


def _ddp_time_to_acc(rank, world, args, out_queue):
    """Time to accuracy with DDP and herd's `make run` recipe: every epoch one shared
    permutation, rank r takes every world-th sample padded by wrapping (as
    DistributedSampler), batches of --batch-size with the last partial one kept, the
    lr stepped per step; the test split evaluated across ranks after every epoch."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    keep = []
    x_train, y_train = load_fashion_mnist(args.data_dir, "train")
    x_test, y_test = load_fashion_mnist(args.data_dir, "test")
    model = (args.models or "lenet5").split(",")[0]
    torch.manual_seed(args.seed)
    net = DDP(herd_torch_models.build(model))
    keep.append(net)
    n = len(x_train)
    per_rank = -(-n // world)
    steps_per_epoch = -(-per_rank // args.batch_size)
    base, factor = recipe_lr(args, steps_per_epoch, world)
    opt = recipe_optimizer(net, args, base)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    gen = torch.Generator().manual_seed(args.seed)
    test_idx = torch.arange(rank, len(x_test), world)
    result = {"model": model, "framework": "torch-ddp", "ranks": world, "threads": args.threads,
              "precision": args.precision, "batch": args.batch_size, "target": args.target,
              "reached": False}
    dist.barrier()
    t0 = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        perm = torch.randperm(n, generator=gen)
        mine = torch.cat([perm, perm[:per_rank * world - n]])[rank::world]
        net.train()
        for i in range(0, per_rank, args.batch_size):
            idx = mine[i:i + args.batch_size]
            opt.zero_grad(set_to_none=True)
            with cpu_autocast(args):
                logits = net(x_train[idx])
            F.cross_entropy(logits.float(), y_train[idx]).backward()
            opt.step()
            sched.step()
        net.eval()
        with torch.no_grad():
            correct = torch.tensor([(net.module(x_test[test_idx]).argmax(1) == y_test[test_idx]).sum().item()],
                                   dtype=torch.float64)
        dist.all_reduce(correct)
        acc = correct.item() / len(x_test)
        wall = time.perf_counter() - t0
        if rank == 0:
            print("epoch=%d test_acc=%.4f wall_s=%.2f" % (epoch, acc, wall), file=sys.stderr, flush=True)
            if not result["reached"]:
                result.update(epochs=epoch, test_acc=round(acc, 4), wall_s=round(wall, 2))
                result["reached"] = acc >= args.target
            result.update(final_epoch=epoch, final_test_acc=round(acc, 4), final_wall_s=round(wall, 2))
    if rank == 0:
        out_queue.put(result)


def time_to_acc(model, x_train, y_train, x_test, y_test, args):
    """Wall time until test accuracy, evaluated after each epoch, first reaches target."""
    net, step = make_training(model, args)
    gen = torch.Generator().manual_seed(args.seed)
    n = len(x_train)
    train_s = 0.0
    t0 = time.perf_counter()
    result = {"model": model, "framework": "torch", "threads": args.threads,
              "batch": args.batch_size, "target": args.target, "reached": False}
    for epoch in range(1, args.epochs + 1):
        te = time.perf_counter()
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n - args.batch_size + 1, args.batch_size):
            idx = perm[i:i + args.batch_size]
            step(x_train[idx], y_train[idx])
        train_s += time.perf_counter() - te
        acc = evaluate(net, x_test, y_test)
        wall = time.perf_counter() - t0
        print("epoch=%d test_acc=%.4f wall_s=%.2f" % (epoch, acc, wall), file=sys.stderr)
        result.update(epochs=epoch, test_acc=round(acc, 4), wall_s=round(wall, 2),
                      train_s=round(train_s, 2))
        if acc >= args.target:
            result["reached"] = True
            break
    return result


# Input shape and classes per model in --device cuda mode (ImageNet size for resnet50).
CUDA_SHAPES = {"resnet50": ((3, 224, 224), 1000)}
CUDA_DEFAULT_SHAPE = ((3, 32, 32), 10)


def bench_cuda(model, args):
    """Training throughput on one GPU: synthetic batches generated on the device,
    SGD as bench(), timed between CUDA events after warm-up."""
    dev = torch.device("cuda")
    tf32 = args.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = args.deterministic
    if args.shape:
        c, h, w, classes = (int(v) for v in args.shape.split(","))
        shape = (c, h, w)
    else:
        shape, classes = CUDA_SHAPES.get(model, CUDA_DEFAULT_SHAPE)
    torch.manual_seed(args.seed)
    net = herd_torch_models.build(model, shape, classes).to(dev)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    net = net.to(memory_format=fmt)
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    scaler = torch.amp.GradScaler("cuda", enabled=args.precision == "fp16")
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    # A few distinct batches, cycled: data loading is not what this measures.
    xs = [torch.randn((args.batch_size,) + shape, device=dev, generator=gen)
          .contiguous(memory_format=fmt) for _ in range(4)]
    ys = [torch.randint(0, classes, (args.batch_size,), device=dev, generator=gen)
          for _ in range(4)]

    def step(i):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=half or torch.float32, enabled=half is not None):
            loss = F.cross_entropy(net(xs[i % 4]), ys[i % 4])
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    for i in range(args.warmup):
        step(i)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for i in range(args.steps):
        loss = step(i)
    end.record()
    end.synchronize()
    dt = start.elapsed_time(end) / 1000.0
    return {
        "model": model, "framework": "torch", "device": "cuda",
        "gpu": torch.cuda.get_device_name(dev), "precision": args.precision,
        "channels_last": args.channels_last, "deterministic": args.deterministic,
        "batch": args.batch_size,
        "samples_per_s": round(args.steps * args.batch_size / dt, 1),
        "step_ms": round(1000 * dt / args.steps, 3), "steps": args.steps,
        "warmup": args.warmup, "loss": round(loss.item(), 4), "torch": torch.__version__,
    }


def emit(result, as_json):
    if as_json:
        print(json.dumps(result), flush=True)
    else:
        print(" ".join("%s=%s" % (k, str(v).lower() if isinstance(v, bool) else v)
                       for k, v in result.items()), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=None,
                   help="comma-separated (default mlp,lenet5,resnet20; lenet5 with --time-to-acc)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=DATA_DIR)
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--time-to-acc", action="store_true",
                   help="train lenet5 (or --models) until test accuracy >= --target")
    p.add_argument("--target", type=float, default=0.89)
    p.add_argument("--epochs", type=int, default=10, help="epoch limit for --time-to-acc")
    p.add_argument("--model", dest="models", help="alias of --models (herd's flag)")
    p.add_argument("--data", default="fashion-mnist", choices=["fashion-mnist"],
                   help="herd's flag; only fashion-mnist")
    # herd's recipe flags (--time-to-acc --ddp N follows them exactly, as `make run` sets them)
    p.add_argument("--lr-scaling", choices=["none", "linear"], default="none")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--nesterov", action="store_true")
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--schedule", choices=["constant", "cosine"], default="constant")
    p.add_argument("--warmup-epochs", type=float, default=0.0)
    p.add_argument("--ddp", type=int, default=0, metavar="N",
                   help="N processes with DistributedDataParallel (gloo) on this machine")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: one GPU, synthetic data on the device (default models "
                        "resnet20,resnet50)")
    p.add_argument("--precision", choices=["fp32", "tf32", "bf16", "fp16"], default="fp32",
                   help="cuda: TF32 matmuls/convolutions, or autocast to bf16/fp16; "
                        "cpu: fp32 or autocast to bf16")
    p.add_argument("--channels-last", action="store_true", help="cuda: NHWC memory format")
    p.add_argument("--deterministic", action="store_true",
                   help="cuda: deterministic cuDNN algorithms only (herd's default)")
    p.add_argument("--shape", default=None, metavar="C,H,W,CLASSES",
                   help="input shape and classes for every model (cpu: synthetic data)")
    args = p.parse_args()
    if args.device == "cuda":
        if args.ddp or args.time_to_acc:
            p.error("--device cuda measures one GPU; drop --ddp / --time-to-acc")
        for m in (args.models or "resnet20,resnet50").split(","):
            emit(bench_cuda(m, args), args.json)
        return
    if args.precision not in ("fp32", "bf16") or args.channels_last:
        p.error("on the CPU --precision is fp32 or bf16 (autocast); --channels-last is for "
                "--device cuda")
    if args.shape and args.time_to_acc:
        p.error("--shape (synthetic data) is for the throughput on the CPU")
    if args.ddp:
        if args.ddp < 1:
            p.error("--ddp needs N >= 1")
        run_ddp(args, _ddp_time_to_acc if args.time_to_acc else _ddp_throughput)
        return

    torch.set_num_threads(args.threads)
    # With --shape, bench() draws synthetic batches: no data set is read (the GPU
    # machine, where bench/gpu/xeon.sh runs this, has none).
    x_train, y_train = (None, None) if args.shape else load_fashion_mnist(args.data_dir, "train")
    if args.time_to_acc:
        x_test, y_test = load_fashion_mnist(args.data_dir, "test")
        for m in (args.models or "lenet5").split(","):
            emit(time_to_acc(m, x_train, y_train, x_test, y_test, args), args.json)
        return
    for m in (args.models or "mlp,lenet5,resnet20").split(","):
        emit(bench(m, x_train, y_train, args), args.json)


if __name__ == "__main__":
    main()
