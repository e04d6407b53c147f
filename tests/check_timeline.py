#!/usr/bin/env python3
"""Checks a herd --timeline trace (used by tests/cli_timeline.sh).

usage: check_timeline.py FILE --ranks N --steps S [--comm] [--eval] [--checkpoint]
                         [--groups NAME,NAME]

Exits non-zero naming every problem: the file is not the documented Chrome trace,
a rank is missing, events do not nest (phases in steps, layers in forward/backward,
reductions launched during backward and complete before the step ends), the ranks'
reductions of one bucket do not overlap once clocks are corrected, or evaluation /
checkpoint events are missing when asked for. --groups: the group communicators'
tracks (tensor group, data group), threads 2, 3, ... by those names, each with
collectives of every rank launched inside a step or an evaluation.
"""
import argparse
import json
import sys
from collections import defaultdict

EPS = 0.01  # µs: ts and dur are rounded to the nanosecond separately
PHASES = ("data_wait", "forward", "backward", "comm_wait", "optimizer")

problems = []


def problem(msg):
    if len(problems) < 30:
        problems.append(msg)


def inside(inner_start, inner_end, outer, tol=EPS):
    return outer["ts"] - tol <= inner_start and inner_end <= outer["ts"] + outer["dur"] + tol


def end(e):
    return e["ts"] + e["dur"]


def exit_if_problems(file):
    if problems:
        print(f"{file}: {len(problems)} problem(s):")
        for p in problems:
            print("  " + p)
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--comm", action="store_true", help="bucket reductions expected")
    ap.add_argument("--eval", action="store_true")
    ap.add_argument("--checkpoint", action="store_true")
    ap.add_argument("--groups", default="", help="names of the group tracks, in order")
    a = ap.parse_args()
    a.groups = [g for g in a.groups.split(",") if g]

    with open(a.file) as f:
        doc = json.load(f)  # raises on invalid JSON
    if doc.get("displayTimeUnit") != "ms":
        problem("displayTimeUnit is not 'ms'")
    other = doc.get("otherData", {})
    if other.get("ranks") != a.ranks or len(other.get("clock_offsets_us", [])) != a.ranks:
        problem(f"otherData does not describe {a.ranks} ranks: {other}")
    if not other.get("herd_version"):
        problem("otherData has no herd_version")
    if other.get("dropped_events") != 0:
        problem(f"events were dropped: {other.get('dropped_events')}")
    # Clock offsets are exact to half the deciding round trip.
    clock_tol = 50 + max(other.get("clock_rtt_us", [0])) / 2

    events = doc["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"]
    x = [e for e in events if e.get("ph") == "X"]
    incomplete = False
    for e in x:
        missing = [key for key in ("name", "cat", "ts", "dur", "pid", "tid", "args") if key not in e]
        if missing:
            problem(f"event without {missing}: {e}")
            incomplete = True
        elif e["dur"] < 0 or e["ts"] < -clock_tol:
            problem(f"negative time: {e}")
    if incomplete:  # the checks below read every key
        exit_if_problems(a.file)

    names = {(e["pid"], e["name"], e.get("tid")): e["args"] for e in meta}
    by_rank = defaultdict(list)
    for e in x:
        by_rank[e["pid"]].append(e)
    if sorted(by_rank) != list(range(a.ranks)):
        problem(f"events from ranks {sorted(by_rank)}, expected 0..{a.ranks - 1}")
    for r in range(a.ranks):
        pname = names.get((r, "process_name", 0), {}).get("name", "")
        if not pname.startswith(f"rank {r} ("):
            problem(f"rank {r}: process_name is '{pname}'")
        for tid, want in enumerate(["compute", "communication"] + a.groups):
            if names.get((r, "thread_name", tid), {}).get("name") != want:
                problem(f"rank {r}: thread {tid} is not named '{want}'")
        check_rank(r, by_rank[r], a)

    if a.comm:  # an allreduce cannot finish on any rank before every rank started it
        buckets = defaultdict(list)
        for e in x:
            if e["cat"] == "comm" and e["tid"] == 1 and e["name"].startswith("allreduce bucket"):
                buckets[(e["args"]["step"], e["name"])].append(e)
        for (step, name), evs in sorted(buckets.items()):
            if len(evs) != a.ranks:
                problem(f"step {step}: '{name}' on {len(evs)} ranks, expected {a.ranks}")
            elif max(e["ts"] for e in evs) > min(end(e) for e in evs) + clock_tol:
                problem(f"step {step}: '{name}' ends on one rank before it starts on another "
                        f"(clock offsets wrong?): {[(e['pid'], e['ts'], end(e)) for e in evs]}")

    exit_if_problems(a.file)
    print(f"{a.file}: ok ({len(x)} events, {a.ranks} rank(s), {a.steps} steps)")


def check_rank(r, evs, a):
    steps = sorted((e for e in evs if e["cat"] == "step"), key=lambda e: e["ts"])
    numbers = [e["args"].get("step") for e in steps]
    if len(steps) != a.steps or len(set(numbers)) != a.steps:
        problem(f"rank {r}: {len(steps)} steps numbered {numbers}, expected {a.steps}")
    if any(s["name"] != "step" or s["tid"] != 0 or "epoch" not in s["args"] for s in steps):
        problem(f"rank {r}: a step event is not named 'step' with an epoch on the compute track")

    def step_of(start, stop, tol=EPS):
        return next((s for s in steps if inside(start, stop, s, tol)), None)

    phases = [e for e in evs if e["cat"] == "phase"]
    for p in phases:
        if p["name"] not in PHASES or p["tid"] != 0:
            problem(f"rank {r}: unexpected phase {p['name']} on track {p['tid']}")
        elif not step_of(p["ts"], end(p)):
            problem(f"rank {r}: phase {p['name']} at {p['ts']} is in no step")
    for s in steps:
        present = {p["name"] for p in phases if inside(p["ts"], end(p), s)}
        if present != set(PHASES):
            problem(f"rank {r}: step {s['args'].get('step')} has phases {sorted(present)}")

    fwd = [p for p in phases if p["name"] == "forward"]
    bwd = [p for p in phases if p["name"] == "backward"]
    layers = [e for e in evs if e["cat"] == "layer"]
    if not layers:
        problem(f"rank {r}: no layer events")
    for l in layers:
        outer = fwd if l["name"].startswith("fwd ") else bwd if l["name"].startswith("bwd ") else None
        if outer is None:
            problem(f"rank {r}: layer event named '{l['name']}'")
        elif not any(inside(l["ts"], end(l), p) for p in outer):
            problem(f"rank {r}: '{l['name']}' at {l['ts']} is outside every {l['name'][:3]} phase")

    comm = [e for e in evs if e["cat"] == "comm" and e["tid"] <= 1 and
            e["name"].startswith("allreduce bucket")]
    if a.comm and not comm:
        problem(f"rank {r}: no 'allreduce bucket' events")
    if not a.comm and comm:
        problem(f"rank {r}: {len(comm)} reductions where none were expected")
    for c in comm:
        launched = c["ts"] - c["args"].get("queued_us", 0)
        s = next((s for s in steps if s["args"].get("step") == c["args"].get("step")), None)
        if c["tid"] != 1 or c["args"].get("bytes", 0) <= 0:
            problem(f"rank {r}: '{c['name']}' not on track 1 or without bytes: {c}")
        elif s is None or not inside(launched, end(c), s, 1.0):
            problem(f"rank {r}: '{c['name']}' of step {c['args'].get('step')} outside its step")
        elif not any(inside(launched, launched, b, 1.0) for b in bwd if inside(b["ts"], end(b), s)):
            problem(f"rank {r}: '{c['name']}' launched at {launched}, not during backward")

    evals = [e for e in evs if e["cat"] == "eval" and e["name"] == "evaluate"]
    check_groups(r, evs, steps + evals, a.groups)
    ckpts = [e for e in evs if e["cat"] == "io" and e["name"] == "checkpoint"]
    if a.eval and not evals:
        problem(f"rank {r}: no 'evaluate' event")
    want_ckpt = a.checkpoint and r == 0  # rank 0 writes the checkpoints
    if want_ckpt != bool(ckpts):
        problem(f"rank {r}: {len(ckpts)} checkpoint events")
    for e in evals + ckpts:
        if step_of(e["ts"], end(e)):
            problem(f"rank {r}: '{e['name']}' inside a step")


def check_groups(r, evs, spans, groups):
    """A group's collectives: on its own track, named by kind, each with its bytes, launched
    inside a step or an evaluation (ZeRO's all-gathers may end in the next step)."""
    tracks = defaultdict(list)
    for e in evs:
        if e["tid"] >= 2:
            tracks[e["tid"]].append(e)
    if sorted(tracks) != [2 + i for i in range(len(groups))]:
        problem(f"rank {r}: events on tracks {sorted(tracks)}, expected the groups' "
                f"{[2 + i for i in range(len(groups))]}")
    for tid, group in tracks.items():
        for e in group:
            launched = e["ts"] - e["args"].get("queued_us", 0)
            if e["cat"] != "comm" or e["args"].get("bytes", 0) <= 0 or \
                    not e["name"].startswith(("allreduce ", "reduce-scatter ", "all-gather ")):
                problem(f"rank {r}: track {tid} holds '{e['name']}' ({e['cat']}), not a collective "
                        f"with its bytes")
            elif not any(inside(launched, launched, s, 1.0) for s in spans):
                problem(f"rank {r}: '{e['name']}' on track {tid} launched at {launched}, in no "
                        f"step or evaluation")


if __name__ == "__main__":
    main()
