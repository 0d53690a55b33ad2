#!/usr/bin/env bash
# Extracts the C++ block that follows "<!-- compiled-example -->" in README.md,
# compiles it against the headers and runs it: the README's example cannot rot.
set -euo pipefail
root=$1; shift
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
awk '/<!-- compiled-example -->/{f=1; next} f && /^```cpp/{g=1; next} g && /^```/{exit} g{print}' \
  "$root/README.md" >"$tmp/example.cpp"
[ -s "$tmp/example.cpp" ] || { echo "FAIL: no compiled example found in README.md"; exit 1; }
echo "README example: $(wc -l <"$tmp/example.cpp") lines"
"$@" -std=c++20 -Wall -Wextra -Werror -I"$root/include" "$tmp/example.cpp" -o "$tmp/example" -pthread
out=$("$tmp/example")
echo "$out"
# 4 ranks: avg of 1..4 is 2.5, then the sum of four 2.5s is 10.
grep -qx "grad\[0\] = 10" <<<"$out" || { echo "FAIL: expected grad[0] = 10"; exit 1; }
