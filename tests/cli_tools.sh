#!/usr/bin/env bash
# The cluster tools through the CLI: herd topo (tables, JSON, the rank table under
# mpirun -np 2 and 3), herd doctor (table, JSON, exit status) and herd predict (given
# link, fitted link, measured step). Every mpirun runs under timeout.
set -u
. "$(dirname "$0")/testlib.sh"
json_true() { python3 -c "import json, sys; d = json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$1"; }

# ---- topo
"$herd" topo >"$tmp/topo" 2>"$tmp/err"
check "topo exits 0" test $? -eq 0
check "topo names the host and its cores" grep -q "^host .*core(s)" "$tmp/topo"
check "topo lists NUMA nodes" grep -q "NUMA node" "$tmp/topo"
gpus_or_why() { grep -qE '^GPUs \([0-9]+;' "$1" || { grep -qE '^GPUs: .' "$1" && ! grep -qx 'GPUs: none' "$1"; }; }
check "topo lists GPUs or says why there are none" gpus_or_why "$tmp/topo"
"$herd" topo --json >"$tmp/topo.json"
check "topo --json is valid JSON" json_ok "$tmp/topo.json"
check "topo --json: cores, a NUMA node, one rank, a links row per GPU" json_true "$tmp/topo.json" \
  'd["cores"] >= 1 and len(d["numa_nodes"]) >= 1 and len(d["ranks"]) == 1 and len(d["links"]) == len(d["gpus"]) and (d["gpus"] or d["gpu_note"])'
check "topo rejects unknown flags with exit 2" bash -c '"$1" topo --bogus 2>/dev/null; test $? -eq 2' _ "$herd"

if have_mpi; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
  timeout 60 "${mpiexec[@]}" -np 2 "$herd" topo --json >"$tmp/mpi.json" 2>"$tmp/err"
  check "mpirun -np 2 herd topo --json exits 0" test $? -eq 0
  check "-np 2 --json: one object, from rank 0, with ranks 0 and 1 (local 0 and 1)" json_true "$tmp/mpi.json" \
    '[(r["rank"], r["local_rank"]) for r in d["ranks"]] == [(0, 0), (1, 1)] and all(r["cpus"] for r in d["ranks"])'
  timeout 60 "${mpiexec[@]}" -np 3 "$herd" topo >"$tmp/mpi" 2>"$tmp/err"
  check "mpirun -np 3 herd topo exits 0" test $? -eq 0
  check "-np 3: one table, from rank 0" test "$(grep -c '^host ' "$tmp/mpi")" -eq 1
  check "-np 3: the rank table has every rank" \
    test "$(awk '/^ranks \(/ {on = 1; next} on && $1 ~ /^[0-9]+$/ {n++} END {print n + 0}' "$tmp/mpi")" -eq 3
  check "-np 3: rank 2 is local rank 2" grep -qE "^  2 +[^ ]+ +2 " "$tmp/mpi"
else
  skipped_part "herd topo under mpirun -np 2 and 3 (no mpirun, or herd built without MPI)"
fi

# ---- doctor
"$herd" doctor >"$tmp/doc"
rc=$?
check "doctor exits 0 or 1 ($rc)" test $rc -le 1
check "doctor: exit 1 exactly when a check fails" \
  test "$rc" -eq "$(grep -q '^fail ' "$tmp/doc" && echo 1 || echo 0)"
check "doctor prints the 15 checks and a total" \
  test "$(grep -cE '^(pass|warn|fail|skip) ' "$tmp/doc")" -eq 15 -a "$(grep -c ' not checked$' "$tmp/doc")" -eq 1
check "doctor's mpi line names the MPI library alone (no NCCL version)" \
  bash -c 'grep -qE "^(pass|warn|fail|skip) +mpi " "$1" && ! grep -E "^(pass|warn|fail|skip) +mpi " "$1" | grep -q NCCL' _ "$tmp/doc"
"$herd" doctor --json >"$tmp/doc.json"
check "doctor --json is valid JSON with 15 checks" json_true "$tmp/doc.json" \
  'len(d["checks"]) == 15 and all(c["status"] in ("pass", "warn", "fail", "skip") for c in d["checks"])'
# A fabricated root with an Xid error in the kernel log: that check fails, exit 1.
mkdir -p "$tmp/root/dev" "$tmp/root/proc"
echo "4,1,1,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus." >"$tmp/root/dev/kmsg"
"$herd" doctor --root "$tmp/root" >"$tmp/doc"
check "doctor --root with an Xid error exits 1" test $? -eq 1
check "... and names it" grep -q "^fail  xid_errors .*codes 79" "$tmp/doc"

# ---- predict
common=(--model lenet5 --data synthetic:1,28,28,10,256 --workers 8)
"$herd" predict "${common[@]}" --link-gbps 100 --latency-us 5 --step-ms 6.8 >"$tmp/pred"
check "predict with --link-gbps/--latency-us exits 0" test $? -eq 0
check "predict: rows for 1..8 workers" test "$(grep -cE '^ +[0-9]+ ' "$tmp/pred")" -eq 8
check "predict: 1 worker is 100% efficient" grep -qE '^ +1 .* 1\.000 +6\.800 +1\.000$' "$tmp/pred"
check "predict: says the largest worker count" grep -q "^largest worker count with efficiency >= 0.90" "$tmp/pred"
"$herd" predict "${common[@]}" --from-bench "$here/fixtures/bench_allreduce_np2.json" --step-ms 6.8 \
  --json >"$tmp/pred.json"
check "predict --from-bench --json: the fixture's alpha 10 us and beta 0.1 ns/byte" json_true "$tmp/pred.json" \
  'abs(d["alpha_us"] - 10) < 0.1 and abs(d["beta_ns_per_byte"] - 0.1) < 0.001 and len(d["rows"]) == 8'
"$herd" predict "${common[@]}" --link-gbps 10 --latency-us 20 --steps 3 --batch-size 32 --threads 1 >"$tmp/pred"
check "predict measures one worker's step when --step-ms is absent" \
  bash -c "test $? -eq 0 && grep -q 'measured here' '$tmp/pred'"
"$herd" predict "${common[@]}" --step-ms 5 2>"$tmp/err"
check "predict without a link is a usage error" test $? -eq 2
"$herd" predict "${common[@]}" --step-ms 5 --from-bench "$tmp/missing.json" 2>"$tmp/err"
check "predict with a missing bench file fails and says how to make it" \
  bash -c 'test $0 -eq 1 && grep -q "herd bench allreduce -J" "$1"' $? "$tmp/err"

finish
