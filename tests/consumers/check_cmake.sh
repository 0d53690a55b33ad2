#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/consumers/check_cmake.sh BUILD SRC [MPIRUN MPICXX]: installs gradsync from the
# build dir into a temporary prefix, then configures tests/consumers/cmake with CMake
# (find_package(gradsync CONFIG); with the MPI component when MPIRUN and the matching
# MPICXX wrapper are given), builds it and runs the programs. A version gradsync does not
# satisfy must be refused.
set -euo pipefail
build=$1; src=$2; mpirun=${3:-}; mpicxx=${4:-}
command -v cmake >/dev/null || { echo "cmake: not installed (scripts/setup-deps installs it)"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
meson install -C "$build" --destdir "$tmp/root" --quiet --no-rebuild >/dev/null
cfg=$(find "$tmp/root" -name gradsyncConfig.cmake | head -n 1)
[ -n "$cfg" ] || { echo "FAIL: gradsyncConfig.cmake was not installed"; exit 1; }
[ -f "$(dirname "$cfg")/gradsyncConfigVersion.cmake" ] ||
  { echo "FAIL: gradsyncConfigVersion.cmake was not installed"; exit 1; }
prefix=$(cd "$(dirname "$cfg")/../../.." && pwd)  # <prefix>/share/cmake/gradsync
echo "cmake package: ${cfg#"$tmp/root"} (prefix ${prefix#"$tmp/root"})"
mpi_args=(-DWITH_MPI=OFF)
[ -n "$mpirun" ] && mpi_args=(-DWITH_MPI=ON -DMPI_CXX_COMPILER="$mpicxx")
cmake -S "$src/cmake" -B "$tmp/b" -DCMAKE_PREFIX_PATH="$prefix" "${mpi_args[@]}" \
  -DCMAKE_BUILD_TYPE=Release >"$tmp/configure.log" 2>&1 ||
  { cat "$tmp/configure.log"; echo "FAIL: cmake configure"; exit 1; }
cmake --build "$tmp/b" -j 2 >"$tmp/build.log" 2>&1 ||
  { tail -30 "$tmp/build.log"; echo "FAIL: cmake build"; exit 1; }
"$tmp/b/consumer"
if [ -n "$mpirun" ]; then
  root_flags=()
  [ "$(id -u)" -eq 0 ] && root_flags=(--allow-run-as-root)
  timeout 120 "$mpirun" "${root_flags[@]}" --oversubscribe -n 2 "$tmp/b/consumer_mpi"
fi
# A version the package cannot satisfy is refused at configure time.
mkdir -p "$tmp/v"
printf 'cmake_minimum_required(VERSION 3.20)\nproject(v CXX)\nfind_package(gradsync 9.0 CONFIG REQUIRED)\n' \
  >"$tmp/v/CMakeLists.txt"
if cmake -S "$tmp/v" -B "$tmp/vb" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/v.log" 2>&1; then
  echo "FAIL: find_package(gradsync 9.0) succeeded against $(grep -o 'version: .*' "$tmp/v.log" || true)"
  exit 1
fi
grep -q "gradsync" "$tmp/v.log" && echo "find_package(gradsync 9.0): refused, as it must be"
# So is a component gradsync does not have, with a message naming it.
mkdir -p "$tmp/c"
printf 'cmake_minimum_required(VERSION 3.20)\nproject(c CXX)\nfind_package(gradsync CONFIG REQUIRED COMPONENTS Bogus)\n' \
  >"$tmp/c/CMakeLists.txt"
if cmake -S "$tmp/c" -B "$tmp/cb" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/c.log" 2>&1; then
  echo "FAIL: find_package(gradsync COMPONENTS Bogus) succeeded"
  exit 1
fi
grep -q "has no component 'Bogus'" "$tmp/c.log" ||
  { cat "$tmp/c.log"; echo "FAIL: the error does not name the unknown component"; exit 1; }
echo "find_package(gradsync COMPONENTS Bogus): refused, naming the component"
