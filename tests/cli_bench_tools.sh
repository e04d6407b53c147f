#!/usr/bin/env bash
# herd bench allreduce and herd bench p2p through the CLI: one process, then under
# mpirun -np 2 and 3. Checks the table's columns, #wrong = 0 for every type, the
# JSON, that a corrupted reduction is caught (non-zero exit, #wrong > 0), the fusion
# speed-up line and the p2p matrices. Every mpirun runs under timeout.
set -u
. "$(dirname "$0")/testlib.sh"
# Rows of the table (lines that start with a size) and their #wrong column (7th).
rows() { grep -E '^ +[0-9]+ +[0-9]+ +(float|half|bfloat16) ' "$1"; }
# every_row FILE CONDITION: the table has rows and CONDITION (awk) holds on each.
every_row() { test "$(rows "$1" | wc -l)" -ge 1 && rows "$1" | awk "!($2) { bad = 1 } END { exit bad }"; }
# bench p2p's GPU part says it skipped for want of a GPU, and the driver lists none.
gpus_skipped() { grep -qE "^GPUs \(rank 0, host [^)]*\): skipped: no GPU \(" "$1" && ! gpu_present; }
all_right() { every_row "$1" '$7 == 0'; }
none_right() { every_row "$1" '$7 > 0'; }
json_has_fields() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
ranks = int(sys.argv[2])
assert d["collective"] == "allreduce" and d["backend"] in ("mpi", "local"), d
assert d["ranks"] == ranks and d["hosts"] == 1 and d["dtype"] == "float" and d["iters"] == 3, d
assert len(d["results"]) == 4 and isinstance(d["avg_busbw_gbps"], (int, float)), d
for r in d["results"]:
    for k in ("bytes", "count", "time_us", "algbw_gbps", "busbw_gbps", "wrong"):
        assert isinstance(r[k], (int, float)), (k, r)
    assert r["type"] == "float" and r["wrong"] == 0 and r["bytes"] == 4 * r["count"], r
    if ranks > 1:
        assert r["mpi_time_us"] > 0 and "mpi_busbw_gbps" in r, r
EOF
}

small=(-b 8 -e 8K -f 8 -n 3 -w 1)

# One process, no launcher: busbw is 0 by the formula and the table says so.
"$herd" bench allreduce "${small[@]}" -J "$tmp/one.json" >"$tmp/out" 2>"$tmp/err"
check "1 process: exits 0" test $? -eq 0
check "1 process: header names the columns" \
  grep -q 'size(B) *count *type *time(us) *algbw(GB/s) *busbw(GB/s) *#wrong' "$tmp/out"
check "1 process: explains busbw = 0" grep -q "busbw = algbw x 2(n-1)/n is 0" "$tmp/out"
check "1 process: #wrong = 0 on every row" all_right "$tmp/out"
check "1 process: JSON has the fields" json_has_fields "$tmp/one.json" 1
"$herd" bench allreduce "${small[@]}" --compare-mpi >"$tmp/out" 2>"$tmp/err"
check "1 process: --compare-mpi says there is no MPI to compare with" \
  bash -c "test $? -ne 0 && grep -q 'mpirun' '$tmp/err'"
"$herd" bench allreduce --backend nccl -b 8 -e 64K -f 8 -n 2 -w 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 0 ]; then # a GPU and NCCL: one rank on GPU 0
  check "--backend nccl: #wrong = 0 on every row" all_right "$tmp/out"
  check "--backend nccl: the communicator is nccl" grep -q "communicator nccl" "$tmp/out"
else
  # Only herd's own refusal for want of a GPU, CUDA or NCCL skips; any other failure fails.
  check "--backend nccl fails only with the no-GPU refusal (rc=$rc: $(head -c 300 "$tmp/err"))" \
    no_gpu_refusal $rc "$tmp/err"
  skipped_part "bench allreduce --backend nccl (no GPU, CUDA or NCCL here)"
fi
"$herd" bench p2p -b 4K -n 2 --lat-iters 4 >"$tmp/out" 2>"$tmp/err"
check "1 process: p2p exits 0 with a 1x1 matrix" \
  bash -c "test $? -eq 0 && grep -A2 '^Unidirectional' '$tmp/out' | grep -qE '^ +0 +- *$'"

have_mpi || { skipped_part "everything under mpirun (no mpirun, or herd built without MPI)"; finish; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun=(timeout 60 "${mpiexec[@]}")

# A repeat pass (testlib.sh): 2 ranks only (mpi_comm_tools_np3 covers 3).
nps=(2 3)
repeat_pass && nps=(2)
for np in "${nps[@]}"; do
  # float with the MPI reference and the JSON; half and bfloat16 on their own
  for type in float half bfloat16; do
    extra=()
    [ "$type" = float ] && extra=(--compare-mpi -J "$tmp/ar.json")
    "${mpirun[@]}" -np "$np" "$herd" bench allreduce "${small[@]}" -d "$type" "${extra[@]}" \
      >"$tmp/out" 2>"$tmp/err"
    rc=$?
    cp "$tmp/out" "$tmp/out.$type"
    check "np $np $type: exits 0, one table from rank 0" \
      bash -c "test $rc -eq 0 && test \$(grep -c '^# Avg bus bandwidth' '$tmp/out') -eq 1 && \
               test \$(grep -cE '^ +8 +[0-9]+ +$type ' '$tmp/out') -eq 1"
    check "np $np $type: #wrong = 0 on every row" all_right "$tmp/out"
  done
  # Sizes on both sides of herd's per-size algorithm choice (recursive doubling below
  # 128 KiB on 2 ranks and 32 KiB on more, recursive halving above; ring from 4 MiB is
  # covered by mpi_collectives' 16 MiB).
  "${mpirun[@]}" -np "$np" "$herd" bench allreduce -b 16K -e 512K -f 4 -n 2 -w 1 >"$tmp/out" 2>"$tmp/err"
  check "np $np 16K-256K: exits 0 with 3 rows" bash -c "test $? -eq 0 && test \$(grep -cE '^ +[0-9]+ +[0-9]+ +float ' '$tmp/out') -eq 3"
  check "np $np 16K-256K: #wrong = 0" all_right "$tmp/out"
  check "np $np --compare-mpi: the MPI columns and the ratio on the average line" \
    bash -c "grep -q 'mpi_time(us) *mpi_busbw *herd/mpi' '$tmp/out.float' && \
             grep -q 'MPI_Allreduce: .* herd/MPI' '$tmp/out.float'"
  check "np $np: JSON parses and has the fields" json_has_fields "$tmp/ar.json" "$np"

  HERD_TEST_CORRUPT_ALLREDUCE=1 "${mpirun[@]}" -np "$np" "$herd" bench allreduce "${small[@]}" \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "np $np corrupted: non-zero exit" test $rc -ne 0 -a $rc -ne 124
  check "np $np corrupted: #wrong > 0 on every row" none_right "$tmp/out"
  check "np $np corrupted: says so" grep -q "differ from the exact sum" "$tmp/err"

  # fusion is the same code whatever the rank count: once is enough
  if [ "$np" -eq 2 ]; then
    "${mpirun[@]}" -np "$np" "$herd" bench allreduce --fused-tensors 10 -b 1K -n 2 -w 1 >"$tmp/out" 2>"$tmp/err"
    rc=$?
    check "np $np --fused-tensors: prints a speed-up" \
      bash -c "test $rc -eq 0 && grep -qE 'speed-up from fusion: [0-9.]+x' '$tmp/out' && grep -q '#wrong: 0' '$tmp/out'"
  fi

  "${mpirun[@]}" -np "$np" "$herd" bench p2p -b 64K -n 3 --lat-iters 20 >"$tmp/out" 2>"$tmp/err"
  check "np $np p2p: exits 0" test $? -eq 0
  for m in Unidirectional Bidirectional Latency; do
    # the title, the column header, then np rows of one label and np cells each
    check "np $np p2p: $m matrix is ${np}x${np}" bash -c "grep -A$((np + 1)) '^$m.*between ranks' '$tmp/out' | \
      tail -n $np | awk -v n=$np 'NF != n + 1 { bad = 1 } END { exit bad || NR != n }'"
  done
  check "np $np p2p: the diagonal is empty and off-diagonal cells are figures" \
    bash -c "grep -A$((np + 1)) '^Latency between ranks' '$tmp/out' | tail -n $np | \
      awk '{ for (j = 2; j <= NF; j++) if ((j - 2 == \$1) != (\$j == \"-\")) bad = 1 } END { exit bad }'"
  check "np $np p2p: names the slowest pair" grep -q "^# slowest pair: rank" "$tmp/out"
  if grep -qE "^GPUs \(rank 0, host [^)]*\): [0-9]+ visible$" "$tmp/out"; then
    check "np $np p2p: the GPU matrices" grep -q "^Peer access" "$tmp/out"
  else
    check "np $np p2p: the GPU part skipped only when there is no GPU" gpus_skipped "$tmp/out"
    [ "$np" -eq 2 ] && skipped_part "bench p2p between GPUs (no GPU here)"
  fi
done

finish
