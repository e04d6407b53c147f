#!/usr/bin/env python3
"""Byte-level tokenizer: writes a text's bytes as tokens (vocabulary 256) in llm.c's
.bin format, the first 90% as the training split and the last 10% as validation.

    scripts/tokenize_bytes.py IN OUT_train.bin OUT_val.bin   (IN: a file, or - for stdin)
    herd train --model gpt-nano --data tokens:OUT_train.bin,256

It prints the counts and the bytes' unigram entropy in nats: the loss of a model that
knows only byte frequencies, which a trained model should get well below."""
import math
import struct
import sys
from collections import Counter

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256


def write_bin(path, data):
    header = [MAGIC, VERSION, len(data)] + [0] * (HEADER_INTS - 3)
    with open(path, "wb") as f:
        f.write(struct.pack("<%di" % HEADER_INTS, *header))
        # One byte per token, widened to little-endian uint16.
        f.write(bytes(x for b in data for x in (b, 0)))


def main(argv):
    if len(argv) != 4:
        sys.exit("usage: tokenize_bytes.py IN OUT_train.bin OUT_val.bin")
    src, train, val = argv[1:]
    data = sys.stdin.buffer.read() if src == "-" else open(src, "rb").read()
    cut = len(data) - len(data) // 10
    if cut < 2 or len(data) - cut < 2:
        sys.exit("tokenize_bytes.py: %s: %d bytes is too little text for two splits of at "
                 "least 2 tokens" % (src, len(data)))
    write_bin(train, data[:cut])
    write_bin(val, data[cut:])
    counts = Counter(data)
    entropy = -sum(c / len(data) * math.log(c / len(data)) for c in counts.values())
    print("tokenize_bytes: %d train + %d validation tokens, %d distinct bytes, unigram "
          "entropy %.4f nats (%.4f bits)" % (cut, len(data) - cut, len(counts), entropy,
                                              entropy / math.log(2)))


if __name__ == "__main__":
    main(sys.argv)
