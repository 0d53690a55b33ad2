#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cluster_ddp.sh VENV: ddp_cluster.py as an Open MPI job over 2 simulated hosts
# (scripts/vcluster): 2 x 2 ranks (two_level: shm in a host, mpi across) and 2 x 1 (mpi).
# Exit 77 (skip) where network namespaces cannot be made.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
vc=$here/../../scripts/vcluster
why=$("$vc" check) || { echo "$why"; exit 77; }
venv=${1:?venv}
# Rank 0 runs on the first host (gsA, 198.18.0.11): the c10d store listens there.
export MASTER_ADDR=198.18.0.11 PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1
export GRADSYNC_LOG=${GRADSYNC_LOG:-warn}
status=0
for layout in "2 two_level" "1 mpi"; do
  set -- $layout
  export MASTER_PORT=$((20000 + RANDOM % 20000))
  # `env` starts the venv's python by its own path (vcluster resolves the program's links,
  # and the venv's python is a link to the system's).
  "$vc" run --mpi openmpi --hosts 2 --ppn "$1" --timeout 240 --env MASTER_ADDR \
    --env MASTER_PORT --env PYTHONDONTWRITEBYTECODE -- \
    env "$venv/bin/python" "$here/ddp_cluster.py" --expect "$2" || {
    echo "FAIL: 2 hosts x $1 ranks ($2): status $?"
    status=1
  }
done
# Launched as torchrun would (no MPI in sight), a group across hosts is refused on every rank.
export MASTER_PORT=$((20000 + RANDOM % 20000))
out=$("$vc" run --mpi openmpi --hosts 2 --ppn 1 --timeout 120 --env MASTER_ADDR --env MASTER_PORT \
  --env PYTHONDONTWRITEBYTECODE -- env "$venv/bin/python" "$here/cross_host_store.py" 2>&1)
echo "$out" | grep -E '^ok:|Error|error' | head -20
# The launcher may splice the two ranks' lines together: count the records, not lines.
if [ "$(grep -oE 'ok: rank [01] refused' <<<"$out" | sort -u | wc -l)" != 2 ]; then
  echo "FAIL: the store path across hosts was not refused on both ranks"
  status=1
fi
[ $status = 0 ] && echo "PASS: DDP across 2 simulated hosts (2 x 2 two_level, 2 x 1 mpi), the store path refused"
exit $status
