#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run.sh VENV SCRIPT ARGS...            : a torch_backend test under the built venv
# run.sh --mpirun NP VENV SCRIPT ARGS...: the same as NP ranks of Open MPI's mpirun
#   (tests/meson.build's mpirun arguments come after NP, up to a lone '--')
set -uo pipefail
export PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1
if [ "${1:-}" = --mpirun ]; then
  np=${2:?ranks}
  shift 2
  margs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do margs+=("$1"); shift; done
  shift
  venv=${1:?venv}
  shift
  port=$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  exec mpirun.openmpi "${margs[@]}" -n "$np" -x MASTER_ADDR=127.0.0.1 -x "MASTER_PORT=$port" \
    -x PYTHONDONTWRITEBYTECODE -x OMP_NUM_THREADS "$venv/bin/python" "$@"
fi
venv=${1:?venv}
shift
exec "$venv/bin/python" "$@"
