#!/usr/bin/env bash
# Doxygen (the settings of docs/api/Doxyfile.in) warns about nothing: over every public
# header (the `docs` target's input: broken markup, unknown commands), and over the main
# headers with WARN_IF_UNDOCUMENTED too (every public entity documented). Skips (77)
# without doxygen.
# Usage: doxygen_check.sh SOURCE_ROOT
set -euo pipefail
src=${1:?usage: $0 SOURCE_ROOT}
command -v doxygen >/dev/null || { echo "SKIP: doxygen not installed (scripts/setup-deps installs it)"; exit 77; }
inc=$src/include/gradsync
main=(allreducer.hpp allreduce.hpp allgather.hpp core/call.hpp core/dtype.hpp core/error.hpp
  core/op.hpp observe/stats.hpp observe/metrics.hpp)
out=$(mktemp -d /tmp/gradsync_doxygen.XXXXXX)
trap 'rm -rf "$out"' EXIT
# run NAME INPUT MAINPAGE WARN_UNDOC: Doxygen into $out/NAME; fails on any warning.
run() {
  mkdir -p "$out/$1"
  sed -e "s|@VERSION@|check|" -e "s|@INPUT@|$2|" -e "s|@MAINPAGE@|$3|" -e "s|@OUTPUT@|$out/$1|" \
    -e "s|@STRIP@|$src/include|" -e "s|@WARN_AS_ERROR@|NO|" -e "s|@WARN_UNDOC@|$4|" \
    "$src/docs/api/Doxyfile.in" >"$out/$1/Doxyfile"
  doxygen "$out/$1/Doxyfile" >"$out/$1/log" 2>&1 || { cat "$out/$1/log"; exit 1; }
  if grep -q "warning" "$out/$1/log"; then
    sed "s|$inc/||" "$out/$1/log"
    echo "FAIL: $(grep -c warning "$out/$1/log") Doxygen warnings ($1; document with ///)"
    exit 1
  fi
}
run all "$src/docs/api/mainpage.md $src/docs/api/namespaces.dox $inc" "$src/docs/api/mainpage.md" NO
input="$src/docs/api/namespaces.dox"
for h in "${main[@]}"; do input+=" $inc/$h"; done
run main "$input" "" YES
echo "PASS: no Doxygen warning over include/, none undocumented in the ${#main[@]} main headers"
