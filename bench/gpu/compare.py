#!/usr/bin/env python3
"""Compares the tensors of two safetensors files written by herd (--save).

usage: compare.py A B TOL   prints the largest difference relative to the largest
weight, and whether the files are byte-identical; exits 0 when that difference is at
most TOL (TOL 0: the bytes must be identical).
       compare.py --maxdiff A B   prints the largest |a - b| / max(1, |b|) (the measure of
tests/testlib.sh's maxdiff).
Standard library only: it runs on the GPU machine's Python and here alike.
"""
import json
import struct
import sys


def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, t in head.items():
        if name == "__metadata__" or t.get("dtype") != "F32":
            continue
        a, b = t["data_offsets"]
        out[name] = struct.unpack("<%df" % ((b - a) // 4), data[a:b])
    return out


def maxdiff(a, b):
    x, y = tensors(a), tensors(b)
    if sorted(x) != sorted(y):
        print("different tensors")
        return 1
    print("%.3g" % max((abs(p - q) / max(1.0, abs(q)) for k in x for p, q in zip(x[k], y[k])),
                       default=0.0))
    return 0


def main():
    if sys.argv[1] == "--maxdiff":
        return maxdiff(sys.argv[2], sys.argv[3])
    a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
    x, y = tensors(a), tensors(b)
    if sorted(x) != sorted(y):
        print("different tensors: %s vs %s" % (sorted(set(x) ^ set(y))[:5], ""))
        return 1
    big = max((abs(v) for t in x.values() for v in t), default=0.0) or 1.0
    diff = max((abs(p - q) for k in x for p, q in zip(x[k], y[k])), default=0.0)
    same = open(a, "rb").read() == open(b, "rb").read()
    rel = diff / big
    print("max |difference| / max |weight| = %.3g%s" % (rel, " (byte-identical)" if same else ""))
    ok = same if tol == 0 else rel <= tol
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
