#!/usr/bin/python3
"""Medians (and ranges) of bench/herd_torch.sh's rounds, and the ratios: herd.torch / DDP,
each as a fraction of twice one process (the ideal for 2 ranks), herd.train / herd train.
Usage: python3 bench/herd_torch_summary.py OUTPUT_OF_HERD_TORCH_SH"""
import re
import statistics
import sys

runs = {}
for line in open(sys.argv[1]):
    if not line.startswith("round="):
        continue
    kv = dict(re.findall(r"([\w.]+)=(\S+)", line))
    fw = "cli" if " cli " in line else "python" if " python " in line else kv.get("framework")
    runs.setdefault((fw, kv["model"]), []).append(float(kv["samples_per_s"]))
med = {k: statistics.median(v) for k, v in runs.items()}
span = {k: f"{min(v):.0f}..{max(v):.0f}" for k, v in runs.items()}
for m in ("mlp", "lenet5", "resnet20"):
    if ("herd.torch", m) in med:
        t, d, h = med["torch", m], med["torch-ddp", m], med["herd.torch", m]
        print(f"{m}: one process {t:.0f} ({span['torch', m]}); DDP {d:.0f} ({span['torch-ddp', m]}), "
              f"{d / (2 * t):.2f} of twice one process; herd.torch {h:.0f} ({span['herd.torch', m]}), "
              f"{h / (2 * t):.2f} of twice one process; herd.torch / DDP = {h / d:.2f}")
if ("cli", "lenet5") in med:
    c, p = med["cli", "lenet5"], med["python", "lenet5"]
    print(f"lenet5: herd train {c:.0f} samples/s ({span['cli', 'lenet5']}), herd.train {p:.0f} "
          f"({span['python', 'lenet5']}): herd.train / herd train = {p / c:.3f}")
