#!/usr/bin/env python3
"""Layer by layer, where two variants of one training run spend their time: reads the
--timeline files that bench/layer_times.sh wrote (one per variant and round), takes each
event's median duration within a run (a step's layers after the first steps' plans and
searches), then the median over the rounds, and prints A's, B's and their ratio (A over
B: above 1, B is faster), slowest in A first, then each layer's forward and backward
together and the step's phases.

    layer_times.py LABEL_A LABEL_B DIR      (DIR holds LABEL_A.N.json and LABEL_B.N.json)
"""
import collections
import glob
import json
import os
import statistics
import sys


def medians(path):
    """Median duration (us) of each (category, name) in one timeline."""
    with open(path) as f:
        ev = json.load(f)
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    d = collections.defaultdict(list)
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") in ("layer", "phase", "step"):
            d[(e["cat"], e["name"])].append(e["dur"])
    return {k: statistics.median(v) for k, v in d.items()}


def over_rounds(label, where):
    runs = [medians(p) for p in sorted(glob.glob(os.path.join(where, f"{label}.*.json")))]
    if not runs:
        sys.exit(f"layer_times.py: no {label}.*.json in {where}")
    keys = set().union(*runs)
    return {k: statistics.median(r.get(k, 0.0) for r in runs) for k in keys}, len(runs)


def row(name, a, b, width):
    ratio = f"{a / b:6.2f}" if b > 0 else "     -"
    return f"{name:<{width}} {a:10.1f} {b:10.1f} {ratio}"


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    la, lb, where = sys.argv[1:]
    a, na = over_rounds(la, where)
    b, nb = over_rounds(lb, where)
    width = max(24, max(len(k[1]) for k in a) + 2)
    head = f"{'':<{width}} {la + ' us':>10} {lb + ' us':>10} {'ratio':>6}"
    print(f"# medians of each event within a run, then over {na} and {nb} rounds")
    print(head)
    for cat in ("step", "phase"):
        for k in sorted((k for k in a if k[0] == cat), key=lambda k: -a[k]):
            print(row(f"{cat} {k[1]}" if cat == "phase" else "step", a[k], b.get(k, 0.0), width))
    # Forward and backward of each layer together ("fwd NAME", "bwd NAME").
    layer_a, layer_b = collections.Counter(), collections.Counter()
    for k, v in a.items():
        if k[0] == "layer":
            layer_a[k[1].split(" ", 1)[-1]] += v
    for k, v in b.items():
        if k[0] == "layer":
            layer_b[k[1].split(" ", 1)[-1]] += v
    print("\n# each layer, forward + backward")
    print(head)
    for name, v in layer_a.most_common():
        print(row(name, v, layer_b.get(name, 0.0), width))
    total_a, total_b = sum(layer_a.values()), sum(layer_b.values())
    print(row("all layers", total_a, total_b, width))
    print("\n# each event")
    print(head)
    for k in sorted((k for k in a if k[0] == "layer"), key=lambda k: -a[k]):
        print(row(k[1], a[k], b.get(k, 0.0), width))


if __name__ == "__main__":
    main()
