"""One line from `herd predict --json` (stdin): what the 2-worker prediction is made of."""
import json
import sys

d = json.load(sys.stdin)
r = d["rows"][1]
buckets = ", ".join("%d B after %s" % (b["bytes"], b["ready_after"]) for b in d["buckets"])
print("predict: one worker step %.3f ms (forward %.3f, backward %.3f); link %d sizes, worst "
      "leave-one-out error %.0f%%; buckets %s; 2 workers: collectives %.3f ms, step %.3f ms "
      "(%.3f without overlap)" % (d["step_ms"], d["forward_ms"], d["backward_ms"], d["link_points"],
                                  100 * d["link_max_rel_residual"], buckets, r["comm_ms"],
                                  r["step_overlap_ms"], r["step_ms"]))
