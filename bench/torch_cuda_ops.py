"""The ops of bench/bench_cuda_ops.c in PyTorch eager, fp32 without TF32, same sizes."""
import torch
import torch.nn.functional as F

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.benchmark = False
dev = "cuda"


def t(fn):
    best = 1e9
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for r in range(23):
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        if r >= 3:
            best = min(best, e0.elapsed_time(e1))
    return best


def bench(tag, n, c, s):
    x = torch.full((n, c, s, s), 0.5, device=dev, requires_grad=False)
    dy = torch.full_like(x, 0.1)
    b = x.numel() * 4
    print(f"{tag}: n={n} c={c} {s}x{s} ({b / 1e6:.1f} MB per tensor)")
    rows = [("relu_fwd", lambda: torch.relu(x), 2 * b, 0),
            ("add", lambda: x + dy, 3 * b, 0),
            ("dropout_fwd", lambda: F.dropout(x, 0.5, True), 3 * b, 0)]
    bn = torch.nn.BatchNorm2d(c).to(dev)
    xr = x.clone().requires_grad_(True)
    rows.append(("bn_fwd_train", lambda: bn(x), 4 * b, 0))
    yb = bn(xr)
    rows.append(("bn_bwd", lambda: torch.autograd.grad(yb, (xr, bn.weight, bn.bias), dy,
                                                     retain_graph=True), 5 * b, 0))
    rows.append(("global_avgpool_fwd", lambda: x.mean((2, 3)), b, 0))
    w = torch.full((c, c, 3, 3), 0.01, device=dev)
    fl = 2.0 * n * c * s * s * c * 9
    rows.append((f"conv3x3 {c}->{c} fwd", lambda: F.conv2d(x, w, padding=1), 0, fl))
    rows.append(("conv3x3 bwd data",
                 lambda: torch.ops.aten.convolution_backward(dy, x, w, None, [1, 1], [1, 1], [1, 1],
                                                             False, [0, 0], 1,
                                                             [True, False, False]), 0, fl))
    rows.append(("conv3x3 bwd weights",
                 lambda: torch.ops.aten.convolution_backward(dy, x, w, None, [1, 1], [1, 1], [1, 1],
                                                             False, [0, 0], 1,
                                                             [False, True, False]), 0, fl))
    rows.append(("maxpool 2x2 fwd", lambda: F.max_pool2d(x, 2), 1.25 * b, 0))
    for what, fn, by, f in rows:
        ms = t(fn)
        extra = (f"  {by / ms / 1e6:7.1f} GB/s" if by else "") + (f"  {f / ms / 1e9:7.2f} TFLOP/s" if f else "")
        print(f"{what:34s} {ms:8.3f} ms{extra}")


print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name())
with torch.no_grad():
    pass
bench("resnet20-like", 512, 16, 32)
bench("resnet50-like", 64, 64, 56)
p = [torch.zeros(25557032, device=dev, requires_grad=True)]
p[0].grad = torch.zeros_like(p[0])
for name, opt, by in (("sgd_update 25.6M params", torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=5e-4, foreach=False, fused=True), 5),
                      ("adamw_update 25.6M params", torch.optim.AdamW(p, lr=1e-3, fused=True), 7)):
    ms = t(opt.step)
    print(f"{name:34s} {ms:8.3f} ms  {by * 25557032 * 4 / ms / 1e6:7.1f} GB/s")
