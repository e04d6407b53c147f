#!/usr/bin/env python3
"""Which commands of a test reach lines no other test of a repeat pass reaches
(tests/repeat_select.sh --processes; tests/repeat_passes.txt).

A test the pass keeps for a few lines of its own may reach them in one or two of its
commands; the others then run code the pass runs anyway. This prints, for each test of
the pass costing at least MIN_S, each of its processes (one profile each: %p in
LLVM_PROFILE_FILE) with the number of those lines it reached and its command line, so
that the script can leave out, under the sanitizers, the parts that reach none.

usage: repeat_processes.py SETS_DIR RAW_DIR ARGV_LOG COSTS FILE_REGEX MIN_S PROFDATA LLVMCOV
                           SRC OBJECT... [-- LEFT_OUT...]
  SETS_DIR/NAME.txt: each test's lines ("FILE LINE"); RAW_DIR/NAME/PID.profraw: its
  processes' profiles; ARGV_LOG: "TEST PID ARGS" lines written by the herd wrapper;
  COSTS: "NAME SECONDS" of the pass's tests; LEFT_OUT: tests the pass leaves out."""
import os
import re
import subprocess
import sys


def process_lines(raw, profdata, llvmcov, objects, src, files):
    merged = raw + ".profdata"
    subprocess.run([profdata, "merge", "-sparse", raw, "-o", merged], check=True,
                   stderr=subprocess.DEVNULL)
    out = subprocess.run([llvmcov, "export", "-format=lcov", "-instr-profile", merged] + objects,
                         capture_output=True, text=True).stdout
    os.unlink(merged)
    lines, name = set(), None
    for row in out.splitlines():
        if row.startswith("SF:"):
            path = row[3:]
            name = path[len(src):] if path.startswith(src) else None
            if name is not None and not files.search(name):
                name = None
        elif name and row.startswith("DA:"):
            number, count = row[3:].split(",")[:2]
            if int(count) > 0:
                lines.add(f"{name} {number}")
    return lines


def main():
    args = sys.argv[1:]
    left_out = set()
    if "--" in args:
        left_out = set(args[args.index("--") + 1:])
        args = args[:args.index("--")]
    sets_dir, raw_dir, argv_log, costs_file, file_regex, min_s, profdata, llvmcov, src = args[:9]
    objects = [a for o in args[9:] for a in ("-object", o)]
    src = src.rstrip("/") + "/"
    files = re.compile(file_regex)
    costs = {}
    for row in open(costs_file):
        if row.strip() and not row.startswith("#"):
            costs[row.split()[0]] = float(row.split()[1])
    sets = {}
    for name in costs:
        path = os.path.join(sets_dir, name + ".txt")
        if name not in left_out and os.path.exists(path):
            sets[name] = {l.strip() for l in open(path) if files.search(l.split()[0])}
    commands = {}
    for row in open(argv_log):
        parts = row.rstrip("\n").split(" ", 2)
        if len(parts) == 3:
            commands[(parts[0], parts[1])] = parts[2]
    for test in sorted(sets, key=lambda t: -costs[t]):
        if costs[test] < float(min_s):
            continue
        others = set().union(*(s for t, s in sets.items() if t != test))
        own = sets[test] - others
        print(f"# {test}: {costs[test]:.1f} s, {len(own)} lines of its own")
        test_raw = os.path.join(raw_dir, test)
        for raw in sorted(os.listdir(test_raw) if os.path.isdir(test_raw) else []):
            if not raw.endswith(".profraw"):
                continue
            pid = raw[:-len(".profraw")]
            reached = process_lines(os.path.join(test_raw, raw), profdata, llvmcov, objects,
                                    src, files) & own
            command = commands.get((test, pid), "(not started as herd: a test program, or a rank"
                                                " herd run started from its own binary)")
            print(f"{len(reached):5d}  {command[:200]}")


if __name__ == "__main__":
    main()
