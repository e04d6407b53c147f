#!/usr/bin/env python3
"""Seed corpora of the fuzz targets, generated rather than committed: small valid files
of every format herd reads (and the repository's own model files and fixtures).
Usage: make_seeds.py OUT_DIR [FUZZ_CHECKPOINT_BINARY]  (writes OUT_DIR/<target>/...)."""
import gzip, json, os, struct, subprocess, sys

SEP = b"<<herd-part>>"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
out = sys.argv[1]


def put(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def idx_images(n, rows, cols):
    return struct.pack(">IIII", 0x803, n, rows, cols) + bytes((i * 7) % 256 for i in range(n * rows * cols))


def idx_labels(labels):
    return struct.pack(">II", 0x801, len(labels)) + bytes(labels)


# IDX: classes byte, images, SEP, labels; raw and gzip.
img, lab = idx_images(3, 4, 5), idx_labels([0, 1, 9])
put("idx", "raw", bytes([9]) + img + SEP + lab)
put("idx", "gzip", bytes([9]) + gzip.compress(img, mtime=0) + SEP + gzip.compress(lab, mtime=0))
put("idx", "mixed", bytes([1]) + idx_images(1, 2, 2) + SEP + gzip.compress(idx_labels([1]), mtime=0))

# CIFAR-10: records of a label byte and 3072 pixels.
put("cifar", "two", b"".join(bytes([k]) + bytes((i + k) % 256 for i in range(3072)) for k in (3, 9)))


def safetensors(tensors, meta=None):
    header, data = {}, b""
    for name, shape in tensors:
        n = 1
        for s in shape:
            n *= s
        raw = struct.pack("<%df" % n, *[0.5 * i for i in range(n)])
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if meta:
        header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


put("safetensors", "small", safetensors([("a.weight", [2, 3]), ("a.bias", [3]), ("s", [])],
                                        {"format": "pt", "herd_version": "0.1.0"}))
put("safetensors", "four_d", safetensors([("conv.weight", [2, 1, 2, 2]), ("empty", [0, 4])]))
put("safetensors", "empty", safetensors([]))

# Model files: a shape byte (0: 1x28x28, 1: 3x32x32, 2: 1x8x8, 3: 3x8x8), then the text.
for name, shape in (("mlp", 0), ("lenet5", 0), ("resnet20", 3), ("widemlp", 2), ("resnet50", 1)):
    with open(os.path.join(ROOT, "models", name + ".json"), "rb") as f:
        put("modelfile", name, bytes([shape]) + f.read())
with open(os.path.join(ROOT, "tests", "models", "bnnet.json"), "rb") as f:
    put("modelfile", "bnnet", bytes([3]) + f.read())
put("modelfile", "tiny", bytes([2]) + b'{"name": "t", "layers": [{"type": "flatten"}, {"type": "dropout", "p": 0.5},'
    b' {"type": "linear", "out": "classes", "bias": false}]}')


# TFRecord event files: a flag byte (1: fix the CRCs), then records.
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(payload):
    head = struct.pack("<Q", len(payload))
    return head + struct.pack("<I", masked(head)) + payload + struct.pack("<I", masked(payload))


def varint(v):
    b = b""
    while True:
        if v < 0x80:
            return b + bytes([v])
        b += bytes([(v & 0x7F) | 0x80])
        v >>= 7


def ld(field, payload):
    return varint(field << 3 | 2) + varint(len(payload)) + payload


first = b"\x09" + struct.pack("<d", 1.7e9) + ld(3, b"brain.Event:2")
value = ld(1, b"train/loss") + b"\x15" + struct.pack("<f", 0.25)
histo = ld(1, b"w") + ld(5, b"\x09" + struct.pack("<d", -1.0) + b"\x11" + struct.pack("<d", 1.0) +
                        ld(6, struct.pack("<2d", 0.0, 1.0)) + ld(7, struct.pack("<2d", 3.0, 4.0)))
scalar = b"\x09" + struct.pack("<d", 1.7e9 + 1) + b"\x10" + varint(42) + ld(5, ld(1, value) + ld(1, histo))
events = record(first) + record(scalar)
put("tfrecord", "events", b"\x00" + events)
put("tfrecord", "events_fix", b"\x01" + events)
put("tfrecord", "cut", b"\x00" + events[:-3])

# Host lists: a mode byte (0: hostfile, 1: -H, 2: discovery output), then the text.
put("hosts", "openmpi", b"\x00# nodes\nnode1 slots=4\nnode2 slots=2  # gpu\n\nnode3\n")
put("hosts", "hydra", b"\x00node1:4\nnode2:2\n")
put("hosts", "list", b"\x01a:4,b,c:1")
put("hosts", "discovery", b"\x02node1:4\n  node2  \n\nnode3:1\r\n")

# herd predict's benchmark JSON.
with open(os.path.join(ROOT, "tests", "fixtures", "bench_allreduce_np2.json"), "rb") as f:
    put("predict", "np2", f.read())
put("predict", "small", json.dumps({"collective": "allreduce", "ranks": 4, "results": [
    {"bytes": 8, "time_us": 10.0, "wrong": 0}, {"bytes": 1024, "time_us": 12.5},
    {"bytes": 1048576, "time_us": 900.0}]}).encode())

# Checkpoints: the fuzz target saves one of its tiny model.
if len(sys.argv) > 2:
    os.makedirs(os.path.join(out, "checkpoint"), exist_ok=True)
    seed = os.path.join(out, "checkpoint", "saved")
    env = dict(os.environ, HERD_FUZZ_SEED=seed, ASAN_OPTIONS="detect_leaks=0")
    subprocess.run([sys.argv[2]], env=env, check=True, stdout=subprocess.DEVNULL)
    with open(seed, "rb") as f:
        parts = f.read().split(SEP)
    put("checkpoint", "spaces", b"  " + parts[0].strip() + b"\n\n" + SEP + parts[1] + SEP + parts[2])
