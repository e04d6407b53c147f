#!/usr/bin/python3
"""Write tests/fixtures/<model>.safetensors: PyTorch reference values that
tests/test_parity.c compares herd against (forward, loss, gradients, and
10 SGD steps). Not run in CI; rerun after changing a model file:

    /usr/bin/python3 tests/make_fixtures.py

With --bf16 it writes <model>_bf16.safetensors instead: the first step under
torch.autocast("cpu", dtype=torch.bfloat16), which test_cpu_bf16 compares herd's
--precision bf16 against.

Needs PyTorch (1.13 was used) with numpy.
"""
import json
import os
import struct
import sys

# Debian's torch calls OpenBLAS (pthread build), whose own thread pool ignores
# torch.set_num_threads and would change GEMM summation order, hence the
# fixture bits, with the machine's core count. Pin it before torch loads it.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import herd_torch_models  # noqa: E402

OUT_DIR = os.path.join(HERE, "fixtures")

SEED = 0
STEPS = 10
LR = 0.01  # small enough that resnet20 does not memorise the batch (a saturated softmax amplifies rounding)
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
LABEL_SMOOTHING = 0.1  # for "loss_smooth" only
BATCH = {"lenet5": 8, "resnet20": 8}
INPUT_SHAPE = (1, 28, 28)


def write_safetensors(path, tensors, metadata):
    """Minimal safetensors writer: u64 LE header length, JSON header (padded
    with spaces to a multiple of 8), then the F32 data back to back."""
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous().cpu()
        data = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def start(model):
    """The network, batch and fixture dict both kinds of fixture begin from (the same
    seed gives the same weights and batch)."""
    torch.manual_seed(SEED)
    net = herd_torch_models.build(model, INPUT_SHAPE)
    net.train()  # batchnorm normalises with batch statistics throughout
    n = BATCH[model]
    x = torch.randn(n, *INPUT_SHAPE)
    y = torch.randint(0, 10, (n,))
    out = {"input": x, "labels": y.to(torch.float32)}
    for k, v in net.state_dict().items():
        out["init." + k] = v.clone()
    return net, n, x, y, out


def train(net, opt, x, loss_fn, steps, out):
    """steps updates on the same batch: the first step's logits, loss and gradients,
    each step's loss before its update, and the state after, into out."""
    losses = []
    for step in range(1, steps + 1):
        opt.zero_grad()
        logits = net(x)
        loss = loss_fn(logits)
        loss.backward()
        if step == 1:
            out["logits"] = logits.detach().clone()
            out["loss"] = loss.detach().reshape(1).clone()
            for k, p in net.named_parameters():
                out["grad." + k] = p.grad.clone()
        losses.append(loss.item())
        opt.step()
    # Loss of each step, before that step's update: a coarse check that locates
    # which step diverges when the "after.*" values do not match.
    out["losses"] = torch.tensor(losses)
    for k, v in net.state_dict().items():
        out["after." + k] = v.clone()
    return losses


def make(model):
    net, n, x, y, out = start(model)

    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM,
                          weight_decay=WEIGHT_DECAY, nesterov=False)
    losses = train(net, opt, x, lambda logits: F.cross_entropy(logits, y), STEPS, out)
    out["loss_smooth"] = F.cross_entropy(
        out["logits"], y, label_smoothing=LABEL_SMOOTHING).reshape(1)

    meta = {
        "model": model, "torch_version": torch.__version__, "seed": SEED,
        "batch": n, "input_shape": "x".join(map(str, INPUT_SHAPE)), "classes": 10,
        "steps": STEPS, "optimizer": "sgd", "lr": LR, "momentum": MOMENTUM,
        "weight_decay": WEIGHT_DECAY, "nesterov": "false", "dampening": 0,
        "loss": "cross_entropy_mean", "label_smoothing_loss_smooth": LABEL_SMOOTHING,
        "bn_eps": herd_torch_models.BN_EPS, "bn_momentum": herd_torch_models.BN_MOMENTUM,
        "mode": "train",
    }
    path = os.path.join(OUT_DIR, model + ".safetensors")
    write_safetensors(path, out, meta)
    print("%s: %d tensors, %d bytes, loss %.6f -> %.6f" % (
        path, len(out), os.path.getsize(path), losses[0], losses[-1]))


# Language models: batch, sequence length, and 20 AdamW steps (decay on 2-D tensors only,
# as herd's no_decay flags: biases and layer-norm parameters are not decayed).
LM = {"gpt-nano": (4, 32)}
LM_STEPS = 20
ADAMW = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.1}


def make_lm(model):
    """gpt-nano: token ids in, a next-token prediction at every position; the loss is
    the mean cross-entropy over batch x positions."""
    n, t = LM[model]
    torch.manual_seed(SEED)
    spec = herd_torch_models.load_spec(model)
    emb = next(l for l in spec["layers"] if l["type"] == "embedding")
    vocab = emb["vocab"]
    net = herd_torch_models.HerdNet(spec, (1, t, 1), vocab)
    seq = torch.randint(0, vocab, (n, t + 1))
    x, y = seq[:, :t].to(torch.float32).reshape(n, 1, t, 1), seq[:, 1:].reshape(-1)
    out = {"input": x, "labels": y.to(torch.float32)}
    for k, v in net.state_dict().items():
        out["init." + k] = v.clone()
    decay = [p for p in net.parameters() if p.dim() >= 2]
    rest = [p for p in net.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay}, {"params": rest, "weight_decay": 0.0}], **ADAMW)
    losses = train(net, opt, x, lambda logits: F.cross_entropy(logits.reshape(-1, vocab), y),
                   LM_STEPS, out)
    meta = {"model": model, "torch_version": torch.__version__, "seed": SEED, "batch": n,
            "seq_len": t, "vocab": vocab, "steps": LM_STEPS, "optimizer": "adamw",
            "lr": ADAMW["lr"], "beta1": ADAMW["betas"][0], "beta2": ADAMW["betas"][1],
            "eps": ADAMW["eps"], "weight_decay": ADAMW["weight_decay"],
            "loss": "cross_entropy_mean_over_positions"}
    path = os.path.join(OUT_DIR, model + ".safetensors")
    write_safetensors(path, out, meta)
    print("%s: %d tensors, %d bytes, loss %.6f -> %.6f" % (
        path, len(out), os.path.getsize(path), losses[0], losses[-1]))


def rel_norm(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def make_bf16(model):
    """The first step under CPU autocast bf16 (convolutions and linear layers in bf16,
    the loss in fp32, backward outside the autocast region as PyTorch advises), from
    the same initial weights and batch as the fp32 fixture. PyTorch's bf16 results
    depend on the CPU's kernels: make them where oneDNN has AVX512_BF16 (as the stored
    ones were), since that is the arithmetic herd's native bf16 runs."""
    net, n, x, y, out = start(model)
    ref = {k: v.clone() for k, v in net.state_dict().items()}

    net.zero_grad()
    logits32 = net(x)
    F.cross_entropy(logits32, y).backward()
    grads32 = {k: p.grad.clone() for k, p in net.named_parameters()}
    net.load_state_dict(ref)  # undo the running-statistics update

    net.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = net(x)
    loss = F.cross_entropy(logits.float(), y)
    loss.backward()
    out["logits"] = logits.detach().float().clone()
    out["loss"] = loss.detach().reshape(1).clone()
    worst = 0.0
    for k, p in net.named_parameters():
        out["grad." + k] = p.grad.float().clone()
        worst = max(worst, rel_norm(p.grad, grads32[k]))
    meta = {"model": model, "torch_version": torch.__version__, "seed": SEED, "batch": n,
            "input_shape": "x".join(map(str, INPUT_SHAPE)), "classes": 10,
            "autocast": "cpu bfloat16", "loss": "cross_entropy_mean", "mode": "train",
            "bn_eps": herd_torch_models.BN_EPS, "bn_momentum": herd_torch_models.BN_MOMENTUM}
    path = os.path.join(OUT_DIR, model + "_bf16.safetensors")
    write_safetensors(path, out, meta)
    print("%s: %d tensors; against fp32: logits %.2e, loss %.2e, worst gradient %.2e "
          "(norm-relative)" % (path, len(out), rel_norm(logits.detach(), logits32.detach()),
                               rel_norm(loss.detach(), F.cross_entropy(logits32, y).detach()),
                               worst))


def main():
    torch.set_num_threads(1)  # one thread: reproducible reductions
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT_DIR, exist_ok=True)
    args = sys.argv[1:]
    bf16 = "--bf16" in args
    models = [a for a in args if a != "--bf16"] or sorted(BATCH) + ([] if bf16 else sorted(LM))
    for model in models:
        (make_lm if model in LM else make_bf16 if bf16 else make)(model)


if __name__ == "__main__":
    main()
