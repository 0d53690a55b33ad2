#!/usr/bin/env bash
# Installs gradsync from the build dir into a temporary prefix, then builds a program
# outside the tree with the flags pkg-config gives and runs it.
set -euo pipefail
build=$1; src=$2; cxx=${3:-c++}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
meson install -C "$build" --destdir "$tmp/root" --quiet --no-rebuild --tags devel 2>/dev/null ||
  meson install -C "$build" --destdir "$tmp/root" --quiet --no-rebuild >/dev/null
pc=$(find "$tmp/root" -name gradsync.pc | head -n 1)
[ -n "$pc" ] || { echo "FAIL: gradsync.pc was not installed"; exit 1; }
prefix=$(sed -n 's/^prefix=//p' "$pc")
flags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --define-variable=prefix="$tmp/root$prefix" \
        --cflags --libs gradsync)
echo "pkg-config gradsync: $flags"
test -f "$tmp/root$prefix/include/gradsync/gradsync.hpp" ||
  { echo "FAIL: headers not installed with their paths"; exit 1; }
# shellcheck disable=SC2086
"$cxx" "$src/consumer.cpp" -o "$tmp/consumer" $flags
"$tmp/consumer"
