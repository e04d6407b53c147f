#!/usr/bin/env python3
"""Damages a herd safetensors file the ways the checkpoint tests need.
ckpt_edit.py FILE TENSOR nan N     N values of TENSOR (spread over it) become NaN
ckpt_edit.py FILE TENSOR flipexp   bit 30 (the exponent's top bit) flipped in every value
ckpt_edit.py FILE -      random64  64 random bytes over the middle of the data
ckpt_edit.py FILE TENSOR rename NEW  the header names TENSOR NEW (of the same length)
With --fix last, the checksum (herd_xxh3: XXH3-64 of the file with its own 16 digits
read as '0') is recomputed through libxxhash, so only the value checks can object."""
import ctypes, ctypes.util, json, random, struct, sys

path, tensor, op = sys.argv[1:4]
rest = sys.argv[4:]
fix = "--fix" in rest
raw = bytearray(open(path, "rb").read())
hlen = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + hlen])
base = 8 + hlen
if op == "nan":
    a, b = head[tensor]["data_offsets"]
    n, count = (b - a) // 4, int(rest[0])
    for k in range(count):
        i = k * (n // count)
        raw[base + a + 4 * i:base + a + 4 * i + 4] = struct.pack("<f", float("nan"))
elif op == "flipexp":
    a, b = head[tensor]["data_offsets"]
    for off in range(base + a, base + b, 4):
        raw[off + 3] ^= 0x40
elif op == "random64":
    rng = random.Random(5)
    mid = base + (len(raw) - base) // 2
    raw[mid:mid + 64] = bytes(rng.randrange(256) for _ in range(64))
elif op == "rename":
    old, new = b'"%s"' % tensor.encode(), b'"%s"' % rest[0].encode()
    i = raw.index(old, 8, base)
    if len(new) != len(old):
        sys.exit("rename: the new name must be as long as the old")
    raw[i:i + len(old)] = new
else:
    sys.exit("unknown operation " + op)
if fix:
    key = b'"herd_xxh3":"'
    slot = raw.index(key, 8, base) + len(key)
    lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    lib.XXH3_64bits.restype = ctypes.c_uint64
    lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    raw[slot:slot + 16] = b"0" * 16
    raw[slot:slot + 16] = b"%016x" % lib.XXH3_64bits(bytes(raw), len(raw))
open(path, "wb").write(raw)
