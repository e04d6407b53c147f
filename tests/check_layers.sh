#!/usr/bin/env bash
# The layer graph: which part of herd includes which, from every #include in src/,
# cli/ and include/. Prints the graph (edges with their include counts) and fails on
# any include against the allowed direction (README, "Who may include whom"), and on a
# private header included outside its directory (tests and bench included), on a
# call against the allowed direction through the public header, and on a file that reads
# the build's configuration without including herd_config.h (below):
#   python (the herd package's C extension: the public API only)
#   cli -> src/train -> src/{optim,obs,tools} -> src/{nn,data,dist} -> src/backend -> src/core
# with include/herd/herd.h (the public API: types and declarations, only the C
# library below it) open to every layer, and the CLI reaching src/ only through the
# tools headers. Usage: check_layers.sh [SOURCE_ROOT]
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 1

# layer: the other layers it may include. Reading it as a graph it has no cycle: a
# layer lists only layers further down.
allowed='
herd:
core: herd
backend: core herd
nn: backend core herd
data: backend core herd
dist: backend core herd
optim: nn backend core herd
obs: nn dist backend core herd
tools: nn dist backend core herd
train: optim obs tools nn data dist backend core herd
cli: tools herd
python: herd
'

# "file target" for every quoted include (and every <x/y.h> naming a layer).
edges=$(find src cli include python -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' | sort |
  while read -r f; do
    sed -n -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^>"]+)[>"].*/\1/p' "$f" |
      while read -r inc; do echo "$f $inc"; done
  done)
[ -n "$edges" ] || { echo "check_layers: no includes found under $root"; exit 1; }

# header: the only directory whose files may include it (the state of a run, shared
# by the files that run it; the checkpoint files' shared names; herd run's supervisor
# and its child processes).
private='
train/run.h src/train
train/checkpoint_file.h src/train
tools/run_internal.h src/tools
'
outside=$(echo "$private" | while read -r hdr dir; do
  [ -n "$hdr" ] || continue
  grep -rlE "^[[:space:]]*#[[:space:]]*include[[:space:]]*\"$hdr\"" src cli include tests bench 2>/dev/null |
    grep -v "^$dir/" | sed "s|\$| includes \"$hdr\", private to $dir/|"
done)

echo "$edges" | awk -v allowed="$allowed" '
function layer_of_file(f, p) {
    split(f, p, "/")
    if (p[1] == "src") return p[2]
    if (p[1] == "include") return p[2]
    return p[1]
}
BEGIN {
    n = split(allowed, lines, "\n")
    for (i = 1; i <= n; i++) {
        if (lines[i] == "") continue
        k = split(lines[i], w, /[: ]+/)
        known[w[1]] = 1
        for (j = 2; j <= k; j++) if (w[j] != "") ok[w[1], w[j]] = 1
    }
}
{
    from = layer_of_file($1)
    inc = $2
    if (inc ~ /(^|\/)\.\.\//) {                   # a relative path around the include directories
        printf "check_layers: %s includes \"%s\": name headers from src/ or include/, not with ../\n", $1, inc
        bad++; next
    }
    if (index(inc, "/") == 0) to = from            # a file of its own directory
    else { split(inc, p, "/"); to = p[1] }
    if (!(to in known)) next                       # a system or third-party header
    if (!(from in known)) { printf "check_layers: %s is in no known layer\n", $1; bad++; next }
    if (from == to) next
    count[from " -> " to]++
    if (!((from, to) in ok)) {
        printf "check_layers: %s includes \"%s\": %s may not include %s\n", $1, inc, from, to
        bad++
    }
}
END {
    print "layer graph (includes between layers):"
    cmd = "sort"
    for (e in count) printf "  %-20s %d\n", e, count[e] | cmd
    close(cmd)
    if (bad) { printf "check_layers: %d include(s) against the allowed direction\n", bad; exit 1 }
    print "check_layers: every include points the allowed way"
}'
layers=$?

# herd.h is open to every layer, so an include cannot show a call through it: a public
# function (declared in include/herd, defined in src/LAYER) is called from another
# layer of src/ only where that layer may include LAYER (the CLI calls the whole API).
# Comments and string literals are skipped; a definition is a line at column 0 naming
# the function before '(' and not ending in ';'.
declared=$(cat include/herd/*.h | grep -oE '\bherd_[a-z0-9_]+[[:space:]]*\(' | tr -d '( \t' | sort -u)
calls=$(find src -name '*.c' -o -name '*.cu' | sort | xargs awk -v declared="$declared" -v allowed="$allowed" '
BEGIN {
    n = split(declared, d, "\n")
    for (i = 1; i <= n; i++) pub[d[i]] = 1
    n = split(allowed, lines, "\n")
    for (i = 1; i <= n; i++) {
        k = split(lines[i], w, /[: ]+/)
        for (j = 2; j <= k; j++) if (w[j] != "") ok[w[1], w[j]] = 1
    }
}
FNR == 1 { incom = 0; split(FILENAME, p, "/"); layer = p[2] }
{
    rest = $0; code = ""
    while (rest != "") {
        if (incom) {
            k = index(rest, "*/"); if (!k) break
            rest = substr(rest, k + 2); incom = 0; continue
        }
        if (!match(rest, /\/\*|\/\/|"/)) { code = code rest; break }
        code = code substr(rest, 1, RSTART - 1); tok = substr(rest, RSTART, RLENGTH)
        rest = substr(rest, RSTART + RLENGTH)
        if (tok == "//") break
        if (tok == "/*") { incom = 1; continue }
        rest = match(rest, /^([^"\\]|\\.)*"/) ? substr(rest, RLENGTH + 1) : ""
    }
    if (code ~ /^[A-Za-z]/ && code !~ /;[[:space:]]*$/ && match(code, /[^a-z0-9_]herd_[a-z0-9_]+\(/)) {
        name = substr(code, RSTART + 1, RLENGTH - 2)
        if (name in pub) def[name] = layer
    }
    while (match(code, /herd_[a-z0-9_]+[[:space:]]*\(/)) {
        name = substr(code, RSTART, RLENGTH); sub(/[[:space:]]*\($/, "", name)
        code = substr(code, RSTART + RLENGTH)
        if ((name in pub) && !((FILENAME, name) in seen)) { seen[FILENAME, name] = 1; use[++nu] = FILENAME " " name " " layer }
    }
}
END {
    for (i = 1; i <= nu; i++) {
        split(use[i], u, " ")
        if ((u[2] in def) && def[u[2]] != u[3] && !((u[3], def[u[2]]) in ok))
            printf "check_layers: %s calls %s (src/%s) through the public header: %s may not use %s\n", u[1], u[2], def[u[2]], u[3], def[u[2]]
    }
}')

[ -z "$outside" ] || { echo "$outside" | sed 's/^/check_layers: /'; exit 1; }
echo "check_layers: the private headers stay in their directories"
[ -z "$calls" ] || { echo "$calls"; exit 1; }
echo "check_layers: every call through the public header points the allowed way"

# The build's configuration (HERD_HAVE_MPI/CUDA/NCCL, HERD_MPI_FAMILY, HERD_MPIEXEC) is in
# generated/herd_config.h: a file that uses it in code must include that header, or it
# would build its other branch without a word (-Wundef catches an #if, not an #ifdef nor a
# CUDA file). Comments and string literals are skipped.
unconfigured=$(find src cli tests python \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) -print0 |
  xargs -0 awk '
    FNR == 1 { incom = 0 }
    {
        line = $0
        if (incom) { if (!sub(/^.*\*\//, "", line)) next; incom = 0 }
        gsub(/"([^"\\]|\\.)*"/, "\"\"", line); gsub(/\/\*.*\*\//, "", line); sub(/\/\/.*/, "", line)
        if (sub(/\/\*.*$/, "", line)) incom = 1
        if (line ~ /(^|[^A-Za-z0-9_])(HERD_HAVE_(MPI|CUDA|NCCL)|HERD_MPI_FAMILY|HERD_MPIEXEC)([^A-Za-z0-9_]|$)/)
            print FILENAME
    }' | sort -u | while read -r f; do
    grep -q '^#include "herd_config.h"' "$f" || echo "check_layers: $f uses the build's configuration without #include \"herd_config.h\""
  done)
[ -z "$unconfigured" ] || { echo "$unconfigured"; exit 1; }
echo "check_layers: every file that reads the build's configuration includes herd_config.h"
exit $layers
