#!/usr/bin/env bash
# Replays every input kept in tests/fuzz/regressions/TARGET/ (each once crashed a target
# or was wrongly accepted) and the generated seeds through the fuzz targets of a build:
# a libFuzzer binary given files runs each once. Usage: replay.sh BUILD_DIR
set -u
build=${1:?usage: replay.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
seeds=$(mktemp -d)
trap 'rm -rf "$seeds"' EXIT
python3 "$here/make_seeds.py" "$seeds" "$build/fuzz_checkpoint" || exit 1
failed=0 n=0
for t in $(cat "$here/targets"); do
  files=("$seeds/$t"/*)
  [ -d "$here/regressions/$t" ] && files+=("$here/regressions/$t"/*)
  n=$((n + ${#files[@]}))
  if ! "$build/fuzz_$t" "${files[@]}" >"$seeds/$t.log" 2>&1; then
    echo "replay: fuzz_$t fails on one of: ${files[*]}"
    tail -30 "$seeds/$t.log"
    failed=1
  fi
done
echo "replay: $n inputs through $(wc -w <"$here/targets") targets"
exit $failed
