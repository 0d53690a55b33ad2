#!/usr/bin/env bash
# The main public headers have no undocumented public entity: Doxygen over them (the
# settings of docs/api/Doxyfile.in) with warnings as errors. Skips (77) without doxygen.
# Usage: doxygen_check.sh SOURCE_ROOT
set -euo pipefail
src=${1:?usage: $0 SOURCE_ROOT}
command -v doxygen >/dev/null || { echo "SKIP: doxygen not installed (scripts/setup-deps installs it)"; exit 77; }
inc=$src/include/gradsync
main=(allreducer.hpp allreduce.hpp allgather.hpp core/call.hpp core/dtype.hpp core/error.hpp
  core/op.hpp observe/stats.hpp observe/metrics.hpp)
input="$src/docs/api/namespaces.dox"
for h in "${main[@]}"; do input+=" $inc/$h"; done
out=$(mktemp -d /tmp/gradsync_doxygen.XXXXXX)
trap 'rm -rf "$out"' EXIT
sed -e "s|@VERSION@|check|" -e "s|@INPUT@|$input|" -e "s|@MAINPAGE@||" -e "s|@OUTPUT@|$out|" \
  -e "s|@STRIP@|$src/include|" -e "s|@WARN_AS_ERROR@|NO|" "$src/docs/api/Doxyfile.in" >"$out/Doxyfile"
doxygen "$out/Doxyfile" >"$out/log" 2>&1 || { cat "$out/log"; exit 1; }
if grep -q "warning" "$out/log"; then
  sed "s|$inc/||" "$out/log"
  echo "FAIL: $(grep -c warning "$out/log") Doxygen warnings in the main headers (document them with ///)"
  exit 1
fi
echo "PASS: ${#main[@]} main headers, no Doxygen warning"
