"""Build PyTorch modules from herd's model JSON files (models/*.json).

The module's state_dict names equal herd's tensor names ("layer1.0.conv1.weight",
"layer2.0.downsample.1.running_var", ...), so tensors can be compared or
exchanged by name. Shared by bench/torch_reference.py and tests/make_fixtures.py.
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_CLASSES = 10
MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models")

# herd's batchnorm defaults (PyTorch's too).
BN_EPS = 1e-5
BN_MOMENTUM = 0.1


def strip_comments(text):
    """Remove // comments, leaving "//" inside JSON strings alone."""
    out = []
    in_str = escaped = False
    i = 0
    while i < len(text):
        c = text[i]
        if in_str:
            out.append(c)
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif text.startswith("//", i):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def load_spec(model):
    """Parse a model by name (looked up in models/) or by path."""
    path = model if model.endswith(".json") else os.path.join(MODELS_DIR, model + ".json")
    with open(path) as f:
        return json.loads(strip_comments(f.read()))


def _attach(root, dotted, module):
    """Register module at a dotted path, creating plain containers on the way,
    so "layer1.0.conv1" yields state_dict keys "layer1.0.conv1.weight"."""
    parts = dotted.split(".")
    parent = root
    for p in parts[:-1]:
        if p not in parent._modules:
            parent.add_module(p, nn.Module())
        parent = parent._modules[p]
    parent.add_module(parts[-1], module)


class BatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d without num_batches_tracked, which herd does not store
    (it only matters when momentum is None)."""

    def __init__(self, channels):
        super().__init__(channels, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.register_buffer("num_batches_tracked", None)

    def _load_from_state_dict(self, *args, **kwargs):
        # Skip _NormBase's upgrade step, which would insert num_batches_tracked
        # into a plain (metadata-less) dict of herd tensors.
        nn.Module._load_from_state_dict(self, *args, **kwargs)


class Embedding(nn.Module):
    """herd's embedding: token table wte and position table wpe (GPT-2's). Reads token
    ids (n, T) (floats holding whole numbers, as herd's input) and gives (n, T, C)."""

    def __init__(self, vocab, context, width):
        super().__init__()
        self.wte = nn.Parameter(torch.randn(vocab, width) * 0.02)
        self.wpe = nn.Parameter(torch.randn(context, width) * 0.02)

    def forward(self, x):
        ids = x.reshape(x.shape[0], -1).long()
        return self.wte[ids] + self.wpe[: ids.shape[1]]


class Attention(nn.Module):
    """herd's attention: causal multi-head self-attention with qkv and proj linears."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        n, t, c = x.shape
        d = c // self.heads
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (a.view(n, t, self.heads, d).transpose(1, 2) for a in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (d ** 0.5)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(n, t, c)
        return self.proj(y)


class HerdNet(nn.Module):
    """A herd layer graph: each layer reads the previous layer unless
    "input" / "inputs" names others; outputs are looked up by layer name."""

    def __init__(self, spec, input_shape=(1, 28, 28), num_classes=NUM_CLASSES):
        super().__init__()
        self.model_name = spec.get("name", "model")
        self.plan = []  # (type, name, input names, module path or None, extra)
        shapes = {}
        prev = None
        for i, layer in enumerate(spec["layers"]):
            kind = layer["type"]
            name = layer.get("name", "_%s%d" % (kind, i))
            if "inputs" in layer:
                inputs = list(layer["inputs"])
            elif "input" in layer:
                inputs = [layer["input"]]
            else:
                inputs = [prev]
            in_shape = shapes[inputs[0]] if inputs[0] is not None else tuple(input_shape)
            module, extra, out_shape = None, None, in_shape

            if kind == "conv2d":
                c, h, w = in_shape
                k = layer["kernel"]
                stride = layer.get("stride", 1)
                pad = layer.get("pad", 0)
                module = nn.Conv2d(c, layer["out"], k, stride=stride, padding=pad,
                                   bias=layer.get("bias", True))
                out_shape = (layer["out"], (h + 2 * pad - k) // stride + 1,
                             (w + 2 * pad - k) // stride + 1)
            elif kind == "linear":
                out = num_classes if layer["out"] == "classes" else layer["out"]
                per_position = layer.get("per_position", False)
                module = nn.Linear(in_shape[-1] if per_position else in_shape[0], out,
                                   bias=layer.get("bias", True))
                out_shape = (1, in_shape[1], out) if per_position else (out,)
            elif kind == "embedding":
                module = Embedding(layer["vocab"], layer["context"], layer["out"])
                out_shape = (1, in_shape[1], layer["out"])
            elif kind == "layernorm":
                module = nn.LayerNorm(in_shape[-1], eps=layer.get("eps", 1e-5))
            elif kind == "attention":
                module = Attention(in_shape[-1], layer["heads"])
            elif kind == "lm_head":
                extra = layer["tie"]
                out_shape = (1, in_shape[1], self._module(extra).wte.shape[0])
            elif kind == "batchnorm":
                module = BatchNorm2d(in_shape[0])
            elif kind == "maxpool":
                c, h, w = in_shape
                k = layer["kernel"]
                stride = layer.get("stride", k)
                pad = layer.get("pad", 0)
                extra = (k, stride, pad)
                out_shape = (c, (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1)
            elif kind == "flatten":
                out_shape = (int(torch.tensor(in_shape).prod()),)
            elif kind == "global_avgpool":
                out_shape = (in_shape[0],)
            elif kind == "add":
                if len(inputs) != 2 or shapes[inputs[0]] != shapes[inputs[1]]:
                    raise ValueError("add %s: needs two inputs of equal shape" % name)
            elif kind not in ("relu", "gelu"):
                raise ValueError("unsupported layer type %r" % kind)

            if module is not None:
                _attach(self, name, module)
            self.plan.append((kind, name, inputs, module is not None, extra))
            shapes[name] = out_shape
            prev = name

    def _module(self, dotted):
        m = self
        for p in dotted.split("."):
            m = m._modules[p]
        return m

    def forward(self, x):
        outs = {None: x}
        for kind, name, inputs, has_module, extra in self.plan:
            a = outs[inputs[0]]
            if has_module:
                y = self._module(name)(a)
            elif kind == "relu":
                y = F.relu(a)
            elif kind == "maxpool":
                y = F.max_pool2d(a, extra[0], extra[1], extra[2])
            elif kind == "flatten":
                y = torch.flatten(a, 1)  # C,H,W order, as herd
            elif kind == "global_avgpool":
                y = a.mean(dim=(2, 3))
            elif kind == "add":
                y = a + outs[inputs[1]]
            elif kind == "gelu":
                y = F.gelu(a, approximate="tanh")
            elif kind == "lm_head":
                y = a @ self._module(extra).wte.t()  # tied: the embedding's own tensor
            outs[name] = y
        return y


def build(model, input_shape=(1, 28, 28), num_classes=NUM_CLASSES):
    return HerdNet(load_spec(model), input_shape, num_classes)
