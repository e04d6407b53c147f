#!/usr/bin/python3
"""Write tests/fixtures/<model>.safetensors: PyTorch reference values that
tests/test_parity.c compares herd against (forward, loss, gradients, and
10 SGD steps). Not run in CI; rerun after changing a model file:

    /usr/bin/python3 tests/make_fixtures.py

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


def make(model):
    torch.manual_seed(SEED)
    net = herd_torch_models.build(model, INPUT_SHAPE)
    net.train()  # batchnorm normalises with batch statistics throughout
    n = BATCH[model]
    x = torch.randn(n, *INPUT_SHAPE)
    y = torch.randint(0, 10, (n,))

    out = {"input": x, "labels": y.to(torch.float32)}
    for k, v in net.state_dict().items():
        out["init." + k] = v.clone()

    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM,
                          weight_decay=WEIGHT_DECAY, nesterov=False)
    losses = []
    for step in range(1, STEPS + 1):
        opt.zero_grad()
        logits = net(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        if step == 1:
            out["logits"] = logits.detach().clone()
            out["loss"] = loss.detach().reshape(1).clone()
            out["loss_smooth"] = F.cross_entropy(
                logits.detach(), y, label_smoothing=LABEL_SMOOTHING).reshape(1)
            for k, p in net.named_parameters():
                out["grad." + k] = p.grad.clone()
        losses.append(loss.item())
        opt.step()
    # Loss of each of the 10 steps, before that step's update: a coarse check
    # that locates which step diverges when the "after.*" values do not match.
    out["losses"] = torch.tensor(losses)
    for k, v in net.state_dict().items():
        out["after." + k] = v.clone()

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


def main():
    torch.set_num_threads(1)  # one thread: reproducible reductions
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT_DIR, exist_ok=True)
    for model in sys.argv[1:] or sorted(BATCH):
        make(model)


if __name__ == "__main__":
    main()
