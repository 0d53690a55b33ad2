#!/usr/bin/env bash
# tests/lint/headers_check.sh ROOT CXX...: every public header compiles on its own (a
# translation unit that includes only it, after the standard headers, -fsyntax-only,
# -Wall -Wextra -Werror), so no header leans on what another gradsync header happened to
# include first. MPI, CUDA and libtorch include paths are given to every header (where
# found); .cuh files need nvcc and are covered by tests/cuda/all_cuh.cu. Two at a time:
# this machine has 2 cores. A forwarding header (a deprecated path, its one include marked
# "gradsync: forwarding header") is not compiled: its target is, so it only has to name a
# header that exists. The headers with an .ipp beside them (their non-template functions,
# config.hpp) are compiled a second time declaring only (-DGRADSYNC_SEPARATE_COMPILATION);
# src.hpp and src_mpi.hpp, which only compile so, are each compiled alone by the
# separate_compilation test.
set -uo pipefail
root=${1:?root}
shift
[ $# -gt 0 ] || { echo "usage: headers_check.sh ROOT CXX [ARGS...]"; exit 2; }
flags=(-std=c++20 -fsyntax-only -Wall -Wextra -Werror -DOMPI_SKIP_MPICXX=1 -DMPICH_SKIP_MPICXX=1
       -I"$root/include")
mpi=$(pkg-config --cflags-only-I ompi-cxx 2>/dev/null || pkg-config --cflags-only-I mpich 2>/dev/null)
# shellcheck disable=SC2206
[ -n "$mpi" ] && flags+=(${mpi//-I/-isystem })
# libtorch's C++ API, for include/gradsync/torch/ (Debian's libtorch-dev).
torch_api=/usr/include/torch/csrc/api/include
[ -d "$torch_api" ] && flags+=(-isystem "$torch_api")
for cuda in /usr/local/cuda/include /usr/local/cuda/include/cccl; do
  [ -d "$cuda" ] && flags+=(-isystem "$cuda")
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$root/include" || exit 1
# The C++ standard headers the tree includes, precompiled once (GCC): about 40 % of each
# header's time was parsing them. That proves each header's gradsync includes;
# std_includes_check.py checks its standard ones.
grep -rhoE '^#include <[a-z_]+>' gradsync | sort -u >"$out/std.hpp"
pch_flags=()
for f in "${flags[@]}"; do [ "$f" = -fsyntax-only ] || pch_flags+=("$f"); done
if ! "$@" -dM -E -x c++ /dev/null 2>/dev/null | grep -q __clang__ &&
   "$@" "${pch_flags[@]}" -x c++-header "$out/std.hpp" -o "$out/std.hpp.gch" >"$out/std.log" 2>&1
then
  flags+=(-include "$out/std.hpp" -Winvalid-pch)
else
  echo "(the standard headers are parsed by every header: no GCC precompiled header)"
fi
find gradsync -name '*.hpp' | sort >"$out/all"
total=$(wc -l <"$out/all")
fwd_bad=0
: >"$out/list"
while IFS= read -r h; do
  if grep -q 'gradsync: forwarding header' "$h"; then
    # Exactly one include, and what it names is a header here.
    target=$(sed -n 's/^#include "\(gradsync\/[^"]*\)".*/\1/p' "$h")
    if [ "$(grep -c '^#include' "$h")" -ne 1 ] || [ -z "$target" ] || [ ! -f "$target" ]; then
      echo "FAIL $h: a forwarding header must include one existing gradsync header, found '${target:-none}'"
      fwd_bad=$((fwd_bad + 1))
    fi
  else
    echo "$h" >>"$out/list"
  fi
done <"$out/all"
# Separate compilation: "sep H" lines compile H with the macro.
grep -Ev '^gradsync/src(_mpi)?\.hpp$' "$out/list" >"$out/plain"
srcs=$(($(wc -l <"$out/list") - $(wc -l <"$out/plain")))
{ cat "$out/plain"
  while IFS= read -r h; do [ -f "${h%.hpp}.ipp" ] && echo "sep $h"; done <"$out/plain"
} >"$out/jobs"
sep=$(grep -c '^sep ' "$out/jobs")
fwd=$((total - $(wc -l <"$out/list")))
export out
# Each header: one line "ok H" or "FAIL H" followed by the compiler's first lines.
# shellcheck disable=SC2016  # the inner script expands its own variables
xargs -P 2 -I{} sh -c 'set -- {} "$@"; d=""; if [ "$1" = sep ]; then
    d=-DGRADSYNC_SEPARATE_COMPILATION; shift; fi; h=$1; shift; log=$out/$(echo "$h$d" | tr / _).log
  if printf "#include <%s>\n" "$h" | "$@" $d -x c++ - -o /dev/null >"$log" 2>&1; then
    echo "ok $h $d"; else echo "FAIL $h $d"; head -5 "$log"; fi' _ "$@" "${flags[@]}" \
  <"$out/jobs" >"$out/result"
bad=$(($(grep -c '^FAIL' "$out/result") + fwd_bad))
grep -v '^ok ' "$out/result"
echo "$((total - srcs - bad)) of $((total - srcs)) public headers pass: $((total - srcs - fwd)) compile on their own ($sep of them also declaring only, for separate compilation), $fwd forwarding headers name an existing header; src.hpp and src_mpi.hpp: see separate_compilation"
[ "$bad" -eq 0 ]
