#!/usr/bin/env python3
"""Which commands of a test reach lines no other test of a repeat pass reaches
(tests/repeat_select.sh --processes; tests/repeat_passes.txt).

A test the pass keeps for a few lines of its own may reach them in one or two of its
commands; the others then run code the pass runs anyway. This prints, for each test of
the pass costing at least MIN_S, costliest first, each of its processes (one profile
each: %p in LLVM_PROFILE_FILE) with the number of those lines it reached and its command
line, then the fewest of them (greedy) that reach them all ("keep"), so that the script
can leave out, under the sanitizers, the parts that reach none. A test's own lines are
those that neither the tests after it (whole) nor the kept commands of those before it
reach, so the scripts can all be trimmed at once.

usage: repeat_processes.py SETS_DIR RAW_DIR ARGV_LOG COSTS FILE_REGEX MIN_S PROFDATA LLVMCOV
                           SRC OBJECT... [-- LEFT_OUT...]
  SETS_DIR/NAME.txt: each test's lines ("FILE LINE"); RAW_DIR/NAME/PID.profraw: its
  processes' profiles; ARGV_LOG: "TEST PID ARGS" lines written by the herd wrapper;
  COSTS: "NAME SECONDS" of the pass's tests; LEFT_OUT: tests the pass leaves out."""
import multiprocessing
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
    # Tests in turn, costliest first; each keeps the fewest commands (greedy) that reach
    # the lines no other test reaches: the tests still to come whole, those done by the
    # commands they keep. So trimming several scripts at once loses no line that two of
    # them shared.
    kept_lines = {}
    work = [t for t in sorted(sets, key=lambda t: -costs[t]) if costs[t] >= float(min_s)]
    with multiprocessing.Pool(os.cpu_count()) as pool:
        for test in work:
            others = set().union(*(kept_lines.get(t, s) for t, s in sets.items() if t != test))
            own = sets[test] - others
            print(f"# {test}: {costs[test]:.1f} s, {len(own)} lines of its own", flush=True)
            test_raw = os.path.join(raw_dir, test)
            raws = sorted(r for r in (os.listdir(test_raw) if os.path.isdir(test_raw) else [])
                          if r.endswith(".profraw"))
            reached_all = pool.starmap(process_lines, [
                (os.path.join(test_raw, r), profdata, llvmcov, objects, src, files) for r in raws])
            reached_by = []
            for raw, reached in zip(raws, reached_all):
                pid = raw[:-len(".profraw")]
                command = commands.get((test, pid), "(not started as herd: a test program, or a"
                                                    " rank herd run started from its own binary)")
                reached_by.append((reached, command))
                print(f"{len(reached & own):5d}  {command[:200]}")
            # The fewest commands that reach all of them (greedy): what the pass must keep.
            left, kept = set(own), set()
            while left:
                reached, command = max(reached_by, key=lambda rc: len(rc[0] & left))
                if not reached & left:
                    break
                print(f"  keep {len(reached & left):4d}  {command}")
                left -= reached
                kept |= reached
            kept_lines[test] = kept & sets[test]
            print(f"  ({len(left)} of its own lines reached by no process profile)", flush=True)

if __name__ == "__main__":
    main()
