#!/usr/bin/env bash
# Every tracked C++/CUDA source is clang-format clean (scripts/format --check). Skipped
# (exit 77) outside a git checkout or without clang-format 14, whose line breaks the tree
# follows; scripts/setup-deps installs it on Debian 12.
set -uo pipefail
root=$1
cd "$root" || exit 1
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo "not a git checkout"; exit 77; }
command -v clang-format >/dev/null || { echo "no clang-format"; exit 77; }
clang-format --version | grep -q 'version 14\.' || { clang-format --version; exit 77; }
GRADSYNC_CLANG_FORMAT=clang-format scripts/format --check
