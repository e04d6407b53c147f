"""A step's kernel times from two kprof tables (bench/gpu/kprof.c) of runs that differ
only in their step count: (long - short) / steps, per kernel name and per family; then,
where kprof recorded them, the device's idle time (before which kernels), its copies, and
the host's time inside CUDA calls and between them (by what the next call launched), and
the sampled stacks of the host thread that drives CUDA, per step.

    python3 kprof_diff.py SHORT.tsv LONG.tsv STEPS [--top N]
"""
import argparse
import re

# Families, first match wins: what a reader of the breakdown asks about.
FAMILIES = [
    ("cuDNN conv backward filter", r"wgrad|bwd_filter|BwdFilter|dgrad2d_w|conv2d_grad_weight"),
    ("cuDNN conv backward data", r"dgrad|bwd_data|BwdData"),
    # Not a bare "sm90_xmma": cuBLAS's own GEMMs are sm90_xmma_gemm_* (gpt2 on 2026-12-04).
    ("cuDNN conv forward", r"fprop|implicit_convolve|conv2d_fwd|implicit_gemm|xmma_fprop|fwd_kernel|cudnn.*conv|winograd|fft"),
    ("layout conversion", r"nchwToNhwc|nhwcToNchw|transpose|nchw|nhwc"),
    ("batch norm", r"\bk_bn|bn_|batch_?norm"),
    ("GEMM (cuBLAS)", r"gemm|cutlass|sgemm|ampere|sm90"),
    ("elementwise (herd)", r"k_relu|k_add|k_mul|k_axpy|k_copy|k_fill|k_dropout|k_scale|k_ew|k_bias"),
    ("pooling", r"pool|k_gap"),
    ("loss", r"xent|softmax"),
    ("optimizer", r"sgd|adamw|unscale|sum_squares"),
]


def load(path):
    table = {}
    with open(path) as f:
        for line in f:
            calls, ns, name = line.rstrip("\n").split("\t", 2)
            c, t = table.get(name, (0, 0))
            table[name] = (c + int(calls), t + int(ns))
    return table


def family(name):
    for fam, pat in FAMILIES:
        if re.search(pat, name, re.IGNORECASE):
            return fam
    return "other"


def short_name(name, width=90):
    name = re.sub(r"\(.*", "", name)  # drop the argument list
    return name if len(name) <= width else name[: width - 3] + "..."


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("short")
    p.add_argument("long")
    p.add_argument("steps", type=int)
    p.add_argument("--top", type=int, default=20)
    a = p.parse_args()
    s, l = load(a.short), load(a.long)
    rows, tagged = [], {"idle before: ": [], "copy: ": [], "api: ": [], "host before: ": [],
                        "self: ": [], "in: ": []}
    for name, (calls, ns) in l.items():
        c0, t0 = s.get(name, (0, 0))
        dt = (ns - t0) / a.steps / 1e6
        dc = (calls - c0) / a.steps
        if dc <= 0 and dt <= 0:
            continue
        tag = next((t for t in tagged if name.startswith(t)), None)
        if tag:
            tagged[tag].append((dt, dc, name[len(tag):]))
        else:
            rows.append((dt, dc, name))
    total = sum(r[0] for r in rows)
    print("kernel time per step: %.3f ms in %.0f kernels" % (total, sum(r[1] for r in rows)))
    fams = {}
    for dt, dc, name in rows:
        f = family(name)
        t, c = fams.get(f, (0.0, 0.0))
        fams[f] = (t + dt, c + dc)
    print("%-32s %9s %6s %8s" % ("family", "ms/step", "share", "kernels"))
    for f, (t, c) in sorted(fams.items(), key=lambda kv: -kv[1][0]):
        print("%-32s %9.3f %5.1f%% %8.0f" % (f, t, 100 * t / total if total else 0, c))
    print("top %d kernels:" % a.top)
    for dt, dc, name in sorted(rows, reverse=True)[: a.top]:
        print("  %8.3f ms %5.1f%% %5.0fx  %s" % (dt, 100 * dt / total if total else 0, dc,
                                               short_name(name)))
    titles = {"idle before: ": "device idle per step: %.3f ms in %.0f gaps; the largest, by the kernel after them:",
              "copy: ": "device copies and sets per step: %.3f ms in %.0f",
              "api: ": "host time inside CUDA calls per step: %.3f ms in %.0f calls; the largest:",
              "host before: ": "host time between CUDA calls per step: %.3f ms in %.0f gaps; the largest, by what the next call launched:",
              "self: ": "the CUDA thread's wall time per step, sampled: %.3f ms in %.0f samples; where it was:",
              "in: ": "functions on its stack, time per step (inclusive: they overlap):"}
    for tag, found in tagged.items():
        if not found:
            continue
        title = titles[tag]
        print(title % (sum(r[0] for r in found), sum(r[1] for r in found)) if "%" in title else title)
        for dt, dc, name in sorted(found, reverse=True)[: 8 if tag == "copy: " else 40 if tag == "in: " else a.top]:
            print("  %8.3f ms %5.0fx  %s" % (dt, dc, short_name(name)))


if __name__ == "__main__":
    main()
