#!/usr/bin/env bash
# What libherd.so exports: every dynamic symbol it defines must carry the herd_ prefix
# (an unprefixed one, such as check_mpi or doc_read, can clash with a program's own),
# and the exports must be exactly the functions declared in the public headers
# (include/herd/*.h, marked HERD_API): no internal function leaks out, and no public
# one is missing. Usage: check_exports.sh LIBHERD.so [SOURCE_ROOT]. Exits 77 when the
# library is not a shared object here or binutils' nm is missing.
set -u
lib=$1
root=${2:-$(cd "$(dirname "$0")/.." && pwd)}
command -v nm >/dev/null || { echo "SKIPPED: check_exports: no nm (binutils)"; exit 77; }
if [ ! -f "$lib" ] || ! nm -D "$lib" >/dev/null 2>&1; then
  echo "SKIPPED: check_exports: '$lib' is not a shared library"
  exit 77
fi

# Not herd's: the linker's bounds of sanitizer-coverage sections (__start_/__stop_, in the
# fuzz-instrumented build) and of the data segment (_edata, _end, __bss_start: gold
# exports them), and clang's OpenMP critical-section locks, which stay global by design
# so every object shares one lock per name.
exported=$(nm -D --defined-only "$lib" | awk 'NF == 3 { print $3 }' |
  grep -vE '^(__start_|__stop_|\.gomp_critical_user_|_edata$|_end$|__bss_start$)' | sort -u)
# Every function declared in the public headers: a herd_ name followed by '('.
declared=$(cat "$root"/include/herd/*.h | grep -oE '\bherd_[a-z0-9_]+[[:space:]]*\(' | tr -d '( \t' | sort -u)
[ -n "$declared" ] || { echo "check_exports: no declarations found in $root/include/herd"; exit 1; }

fails=0
unprefixed=$(grep -v '^herd_' <<<"$exported")
if [ -n "$unprefixed" ]; then
  echo "check_exports: $(wc -l <<<"$unprefixed") exported symbol(s) without the herd_ prefix:"
  sed 's/^/  /' <<<"$unprefixed"
  fails=$((fails + 1))
fi
internal=$(comm -23 <(grep '^herd_' <<<"$exported") <(echo "$declared"))
if [ -n "$internal" ]; then
  echo "check_exports: $(wc -l <<<"$internal") exported herd_ symbol(s) not declared in include/herd (internal: hide them):"
  sed 's/^/  /' <<<"$internal"
  fails=$((fails + 1))
fi
missing=$(comm -13 <(echo "$exported") <(echo "$declared"))
if [ -n "$missing" ]; then
  echo "check_exports: $(wc -l <<<"$missing") public function(s) not exported (mark them HERD_API):"
  sed 's/^/  /' <<<"$missing"
  fails=$((fails + 1))
fi
[ "$fails" -eq 0 ] || exit 1
echo "check_exports: $(wc -l <<<"$exported") exported symbols, every one a public herd_ function"
