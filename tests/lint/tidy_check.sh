#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/lint/tidy_check.sh ROOT BUILD: clang-tidy 14 with the repository's .clang-tidy
# (bug patterns, avoidable copies, a few readability checks; warnings are errors) over
# translation units that instantiate the host headers: local threads, two_level and the
# allreducer (test_algorithm_list), shm (test_shm_faults), mpi (src_mpi.cpp, transport::mpi's
# function bodies: 10 s against 28 s for an MPI test program), fusion and compression in the
# allreducer (test_compress). Findings in include/gradsync and in these files count. Two at
# a time.
set -uo pipefail
root=${1:?root}
build=${2:?build directory (with compile_commands.json)}
tidy=$(command -v clang-tidy-14 || command -v clang-tidy) || {
  echo "tidy: clang-tidy is not installed (scripts/setup-deps installs it)"
  exit 77
}
[ -f "$build/compile_commands.json" ] || { echo "tidy: no $build/compile_commands.json"; exit 1; }
units=(tests/core/test_algorithm_list.cpp tests/shm/test_shm_faults.cpp
       tests/consumers/separate/src_mpi.cpp tests/fusion/test_compress.cpp)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$root" || exit 1
# The compile database without the test programs' GCC precompiled header (-Dtest_pch,
# tests/meson.build): clang cannot read a .gch, and each unit includes what it uses. A
# test file compiled inside a unity unit (meson's -Dunity=on) gets its own entry: the unit's
# command with the file in place of the unit.
python3 - "$build/compile_commands.json" "$out/compile_commands.json" "${units[@]}" <<'PY' || exit 1
import json, os, re, sys
db = json.load(open(sys.argv[1]))
for e in db:
    e["command"] = re.sub(r" -include \S*test_pch_O\d\.hpp| -fpch-deps", "", e["command"])
def path(e):
    return os.path.normpath(os.path.join(e["directory"], e["file"]))
have = {path(e) for e in db}
for unit in map(os.path.abspath, sys.argv[3:]):
    if unit in have:
        continue
    for e in db:
        src = path(e)
        if "-unity" in src and os.path.isfile(src) and unit in {
                os.path.normpath(i) for i in re.findall(r"^#include\s*[<\"](.*)[>\"]", open(src).read(), re.M)}:
            db.append(dict(e, file=unit, command=e["command"].replace(e["file"], unit)))
            break
json.dump(db, open(sys.argv[2], "w"))
PY
export tidy out
printf '%s\n' "${units[@]}" | xargs -P 2 -I{} sh -c \
  'f={}; if "$tidy" -p "$out" --quiet "$f" >"$out/$(echo "$f" | tr / _).log" 2>&1;
   then echo "ok $f"; else echo "FAIL $f"; fi' >"$out/result"
bad=0
while read -r status f; do
  if [ "$status" != ok ]; then
    bad=$((bad + 1))
    echo "== $f"
    # Paths as clang-tidy prints them (absolute, or through the build dir) -> repo-relative.
    grep -E "(warning|error): " "$out/$(echo "$f" | tr / _).log" |
      sed -E "s|^[^ :]*/(include/gradsync/)|\1|; s|^$root/||" | sort -u | head -20
  fi
done <"$out/result"
echo "$(( ${#units[@]} - bad )) of ${#units[@]} translation units clang-tidy clean"
[ "$bad" -eq 0 ]
