#!/usr/bin/env bash
# Builds tests/consumers/subproject with gradsync as its meson subproject and runs it.
set -euo pipefail
src=$1; root=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp -r "$src/subproject" "$tmp/proj"
cp "$src/consumer.cpp" "$tmp/proj/main.cpp"  # the same program the pkg-config test builds
mkdir -p "$tmp/proj/subprojects"
ln -s "$root" "$tmp/proj/subprojects/gradsync"
meson setup "$tmp/build" "$tmp/proj" >"$tmp/setup.log" 2>&1 || { cat "$tmp/setup.log"; exit 1; }
meson compile -C "$tmp/build" >"$tmp/compile.log" 2>&1 || { cat "$tmp/compile.log"; exit 1; }
"$tmp/build/consumer"
