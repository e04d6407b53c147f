# Sourced by every tests/cli_*.sh script: the herd binary from $1, a temporary
# directory removed on exit, `check NAME COMMAND...` counting failures, JSON helpers,
# and `finish`, which reports and exits non-zero when any check failed.
herd="$1"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { # check NAME COMMAND...: the check passes when COMMAND succeeds
  local name=$1; shift
  if "$@"; then echo "ok: $name"; else echo "FAIL: $name"; fails=$((fails + 1)); fi
}
json_ok() { python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$1" 2>/dev/null; }
finish() {
  local name
  name=$(basename "$0" .sh)
  [ "$fails" -eq 0 ] && echo "$name: all checks passed" || echo "$name: $fails check(s) failed"
  exit $((fails > 0))
}
