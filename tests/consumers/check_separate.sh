#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/consumers/check_separate.sh PART_LIB SRC_LIB LOCAL_EXE
#                                   [MPI_PART_LIB MPI_SRC_LIB MPI_EXE MPIRUN MPIRUN_ARGS...]
# Separate compilation (GRADSYNC_SEPARATE_COMPILATION): the parts that use an allreducer
# only reference gradsync's non-template functions (nm: U), the source files of
# <gradsync/src.hpp> and <gradsync/src_mpi.hpp> define them (T), and the linked programs
# compute exact results (the MPI one under mpirun with 2 ranks, 120 s watchdog).
set -uo pipefail
part=${1:?part library}; src=${2:?src library}; local_exe=${3:?local program}
shift 3
fail=0
# defined_once LIB_USER LIB_DEF SYMBOL: SYMBOL is referenced but not defined in LIB_USER,
# and defined (text) in LIB_DEF.
defined_once() {
  local user def sym=$3
  user=$(nm -C "$1") def=$(nm -C "$2")  # whole listings: grep -q would cut nm's pipe
  if ! grep -Fq " U $sym(" <<<"$user"; then
    echo "FAIL: $(basename "$1") does not reference $sym as undefined (compiled inline?)"
    grep -F "$sym(" <<<"$user" | head -3
    fail=1
  elif grep -Fq " T $sym(" <<<"$user" || grep -Fq " W $sym(" <<<"$user"; then
    echo "FAIL: $(basename "$1") defines $sym"
    fail=1
  elif ! grep -Fq " T $sym(" <<<"$def"; then
    echo "FAIL: $(basename "$2") does not define $sym"
    fail=1
  else
    echo "ok: $sym is compiled once, in $(basename "$2")"
  fi
}
defined_once "$part" "$src" gradsync::detail::allreducer_core::run_list
defined_once "$part" "$src" gradsync::error::format
defined_once "$part" "$src" gradsync::detail::check_agreement
out=$(timeout 120 "$local_exe" 2>&1)
rc=$?
echo "$out"
if [ $rc -ne 0 ] || ! grep -q "local part: .* ok" <<<"$out"; then
  echo "FAIL: $(basename "$local_exe") exited $rc"
  fail=1
fi
if [ $# -gt 0 ]; then
  mpi_part=$1 mpi_src=$2 mpi_exe=$3 mpirun=$4
  shift 4
  defined_once "$mpi_part" "$mpi_src" gradsync::transport::mpi::wait
  defined_once "$mpi_part" "$mpi_src" gradsync::transport::mpi::mpi
  defined_once "$mpi_part" "$mpi_src" gradsync::transport::two_level_from_mpi
  defined_once "$mpi_part" "$src" gradsync::transport::shm::wait
  out=$(timeout 120 "$mpirun" -n 2 "$@" "$mpi_exe" 2>&1)
  rc=$?
  echo "$out"
  if [ $rc -ne 0 ] || [ "$(grep -c "mpi part (rank .* of 2): .* ok" <<<"$out")" -ne 2 ]; then
    echo "FAIL: $(basename "$mpi_exe") under $(basename "$mpirun") -n 2 exited $rc"
    fail=1
  fi
else
  echo "no MPI: the transport::mpi part is not checked"
fi
exit $fail
