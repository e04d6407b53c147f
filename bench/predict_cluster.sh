#!/usr/bin/env bash
# herd predict against a real 2-host training on slow links: on the namespace test
# cluster (tests/netcluster.sh, 2 hosts, one rank each, 1 thread), for each link
# (one-way delay 0, 1 and 5 ms, and 1% loss) it measures `herd bench allreduce -J` on
# that link, predicts the 2-worker step of each model with `herd predict --from-bench`,
# and trains each model for a few steps across the two hosts (one worker's step is
# measured while the other host computes too: the hosts share this machine). The measured step is the
# steady-state mean: wall time between the --metrics lines at the end of the warm-up and
# at the last step, over the steps between (every collective included). Prints
# predicted vs measured and the error. Needs root (network namespaces).
#
#   bench/predict_cluster.sh [--models lenet5,resnet20] [--links 0,1,5,loss1]
#                            [--metrics-exchange step-late|last-bucket|blocking]
#
# --metrics-exchange is passed to herd predict: how the herd being measured sends its
# per-step metrics (step-late since issue 12; blocking before). HERD=path/to/herd.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
herd=$(readlink -f "${HERD:-$root/build/herd}")
models=lenet5,resnet20
links=0,1,5,loss1
exchange=step-late
while [ $# -gt 0 ]; do
  case $1 in
    --models) models=$2; shift 2 ;;
    --links) links=$2; shift 2 ;;
    --metrics-exchange) exchange=$2; shift 2 ;;
    *) echo "predict_cluster.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$herd" ] || { echo "predict_cluster.sh: no herd binary at $herd (build first or set HERD)" >&2; exit 2; }
export NC_RELAY=${NC_RELAY:-$(dirname "$herd")/tests/netrelay}
export NC_TIMEOUT=${NC_TIMEOUT:-300}
skip_all() { echo "predict_cluster.sh: cannot build the cluster here: $1" >&2; exit 77; }
# shellcheck source=../tests/netcluster.sh
. "$root/tests/netcluster.sh"

work=$(mktemp -d /tmp/herd-predict-cluster.XXXXXX)
trap 'nc_down; rm -rf "$work"' EXIT
data_of() { case $1 in resnet20) echo synthetic:3,32,32,10,12800 ;; *) echo synthetic:1,28,28,10,32000 ;; esac; }
# Steps trained and the warm-up left out, per model (resnet20's step is ~30x lenet5's).
steps_of() { case $1 in resnet20) echo 30 ;; *) echo 110 ;; esac; }
warm_of() { case $1 in resnet20) echo 10 ;; *) echo 20 ;; esac; }
every_of() { case $1 in resnet20) echo 5 ;; *) echo 10 ;; esac; }

# step_ms_from_metrics FILE WARM: mean wall ms per step from the step line at WARM to the last.
step_ms_from_metrics() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [l for l in lines if l.get("kind") == "step"]
warm = int(sys.argv[2])
a = next(l for l in steps if l["step"] >= warm)
b = steps[-1]
print("%.3f" % (1e3 * (b["time_s"] - a["time_s"]) / (b["step"] - a["step"])))
EOF
}

IFS=, read -r -a link_list <<<"$links"
IFS=, read -r -a model_list <<<"$models"
summary=()
for link in "${link_list[@]}"; do
  case $link in
    loss*) up=(--loss-pct "${link#loss}"); name="${link#loss}% loss" ;;
    *) up=(--delay-ms "$link"); name="$link ms one way" ;;
  esac
  [ "$link" = 0 ] && up=()
  echo "===== link: $name"
  nc_up 2 "${up[@]}"
  json=$work/ar-$link.json
  nc_mpirun -np 2 "$herd" bench allreduce -b 8 -e 4M -f 2 -n 40 -w 5 -J "$json" \
    || { echo "bench allreduce failed on $name" >&2; exit 1; }
  for m in "${model_list[@]}"; do
    d=$(data_of "$m")
    echo "--- $m on $name"
    # The two hosts share this machine's cores and memory, so one worker's step is
    # measured while the other host computes too, as it does in the training (alone it
    # ran 17-20% faster for resnet20 here: that is contention, not communication). On
    # separate machines measure it alone. node2's load runs longer than node1's count.
    predict=(predict --model "$m" --data "$d" --workers 2 --threads 1 --from-bench "$json"
             --metrics-exchange "$exchange" --json)
    nc_exec node2 "$herd" "${predict[@]}" --steps 60 >/dev/null &
    load=$!
    pred=$(nc_exec node1 "$herd" "${predict[@]}" --steps 20) \
      || { echo "herd predict failed for $m" >&2; exit 1; }
    wait $load
    python3 "$root/bench/predict_summary.py" <<<"$pred"
    predicted=$(python3 -c 'import json,sys; print("%.3f" % json.loads(sys.argv[1])["rows"][1]["step_overlap_ms"])' "$pred")
    single=$(python3 -c 'import json,sys; print("%.3f" % json.loads(sys.argv[1])["step_ms"])' "$pred")
    metrics=$work/m-$m-$link.jsonl
    rm -f "$metrics"
    nc_mpirun -np 2 "$herd" train --model "$m" --data "$d" --threads 1 --epochs 1 \
      --max-steps "$(steps_of "$m")" --log-every "$(every_of "$m")" --eval-every 0 \
      --metrics "$metrics" --quiet \
      || { echo "training $m failed on $name" >&2; exit 1; }
    measured=$(step_ms_from_metrics "$metrics" "$(warm_of "$m")")
    err=$(awk -v p="$predicted" -v m="$measured" 'BEGIN { printf "%+.1f", 100 * (p - m) / m }')
    line=$(printf '%-9s %-16s one worker %9s ms  predicted %9s ms  measured %9s ms  error %6s%%' \
      "$m" "$name" "$single" "$predicted" "$measured" "$err")
    echo "$line"
    summary+=("$line")
  done
  nc_down
done
echo "===== summary (predicted: herd predict --from-bench, metrics exchange $exchange; measured: herd train, steady state)"
printf '%s\n' "${summary[@]}"
