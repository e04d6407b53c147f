#!/usr/bin/env python3
"""Which tests a repeat pass may leave out (tests/repeat_select.sh; tests/repeat_passes.txt).

A repeat pass (make test's sanitizer and MPICH passes) is there to run herd's code again
under the sanitizers or against the other MPI. A test whose every line of that code the
pass's other tests also reach adds run time there, not coverage. This picks, by greedy
weighted set cover, a cheap set of tests that reaches every line the whole pass reaches,
drops from it the costliest tests the rest still cover, and prints the others.

usage: repeat_select.py PASS SETS_DIR COSTS FILE_REGEX [KEEP...]
  SETS_DIR/NAME.txt: the lines test NAME reached, "FILE LINE" (absent: no profile at all)
  COSTS: "NAME SECONDS" lines, the tests of the pass and what each costs there
  FILE_REGEX: the files whose lines count (herd's own code, or its MPI-facing part)
  KEEP: tests kept whatever their coverage (leak checks, what the lines cannot show)
Tests under 2 s, and those without a profile (no herd process ran under the coverage
build), are kept too."""
import os
import re
import sys

CHEAP_S = 2.0


def main():
    pass_name, sets_dir, costs_file, file_regex = sys.argv[1:5]
    keep = set(sys.argv[5:])
    costs = {}
    for line in open(costs_file):
        if line.strip() and not line.startswith("#"):
            name, seconds = line.split()[:2]
            costs[name] = float(seconds)
    files = re.compile(file_regex)
    lines = {}
    for name, cost in costs.items():
        path = os.path.join(sets_dir, name + ".txt")
        if not os.path.exists(path) or cost < CHEAP_S:
            keep.add(name)
        lines[name] = set()
        if os.path.exists(path):
            lines[name] = {l.strip() for l in open(path) if files.search(l.split()[0])}
    keep &= set(costs)
    universe = set().union(*lines.values())
    chosen = set(keep)
    covered = set().union(*(lines[t] for t in chosen))
    while covered != universe:
        best = max((t for t in lines if t not in chosen),
                   key=lambda t: len(lines[t] - covered) / max(costs[t], 0.05))
        chosen.add(best)
        covered |= lines[best]
    for t in sorted(chosen - keep, key=lambda t: -costs[t]):
        if lines[t] <= set().union(*(lines[u] for u in chosen if u != t)):
            chosen.discard(t)
    left = sorted(set(costs) - chosen, key=lambda t: -costs[t])
    total, kept = sum(costs.values()), sum(costs[t] for t in chosen)
    print(f"# {pass_name}: {len(universe)} lines reached by {len(costs)} tests ({total:.0f} s); "
          f"{len(chosen)} tests ({kept:.0f} s) reach them all")
    for t in left:
        print(f"{pass_name} {t}  # {costs[t]:.1f} s")


if __name__ == "__main__":
    main()
