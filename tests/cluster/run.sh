#!/usr/bin/env bash
# tests/cluster/run.sh FLAVOUR PPN PROGRAM [ARGS...]: PROGRAM (a test executable with
# tests/mpi/mpi_main.cpp) as an MPI job over 2 simulated hosts (scripts/vcluster), PPN
# ranks per host (2, or 2,1 for uneven hosts), links unshaped. Exit 77 (skip) where
# network namespaces cannot be made.
# One tolerance, said aloud: when every case passed on every rank and the job's status
# comes only from MPI_Finalize not returning (MPICH 4.0 over UCX's TCP transport, about
# 1 run in 10 here; transport/mpi/exit.hpp), the run passes with a note.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
vc=$root/scripts/vcluster
why=$("$vc" check) || { echo "$why"; exit 77; }
flavour=${1:?flavour}
ppn=${2:?ranks per host}
shift 2
export GRADSYNC_LOG=${GRADSYNC_LOG:-warn} UCX_LOG_LEVEL=${UCX_LOG_LEVEL:-error}
log=$(mktemp /tmp/cluster_run.XXXXXX)
trap 'rm -f "$log"' EXIT
"$vc" run --mpi "$flavour" --hosts 2 --ppn "$ppn" --timeout 280 -- "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ] && grep -q 'MPI_Finalize did not return' "$log" &&
   grep -qE ' [0-9]+ cases, [0-9]+ passed, 0 failed' "$log"; then
  echo "NOTE: every case passed; the launcher's status $rc comes from MPI_Finalize not returning"
  exit 0
fi
exit "$rc"
