#!/usr/bin/env bash
# finalize.sh PROBE MPIRUN [ARGS...]: transport::finalize_job ends a job within its bounds
# (finalize_probe.cpp). A late rank is waited for; an absent one ends the job after
# `grace` with a message naming the cause, not after the absent rank's 60 s.
set -uo pipefail
probe=${1:?probe}
shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { cat "$out"; echo "FAIL: $*"; exit 1; }

timeout 60 "$@" -n 2 "$probe" late >"$out" 2>&1
rc=$?
[ "$rc" -eq 0 ] || fail "late: exit $rc, expected 0"
t=$(sed -n 's/^rank 0 finalize_job \([0-9.]*\) s$/\1/p' "$out")
[ -n "$t" ] || fail "late: rank 0 did not return from finalize_job"
awk -v t="$t" 'BEGIN { exit !(t >= 1.3) }' || fail "late: rank 0 left after $t s, before rank 1 arrived"
notes=$(grep -c '^\[gradsync\] rank 0: waiting for the other ranks to reach the end of the job: [0-9]* ms so far, at most 10000 ms$' "$out")
[ "$notes" -ge 2 ] || fail "late: $notes notes of rank 0 waiting, expected at least 2 (after 0.5 and 1 s)"
echo "ok late: rank 0 waited $t s for rank 1 with $notes notes, both exited 0"

start=$(date +%s%N)
timeout 60 "$@" -n 2 "$probe" absent >"$out" 2>&1
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
[ "$rc" -ne 0 ] || fail "absent: the job exited 0"
grep -q 'not every rank reached the end of the job within 1000 ms (MPI_Barrier before MPI_Finalize); exiting with status 5' "$out" ||
  fail "absent: no message naming the cause"
grep -q '^rank 0 finalize_job' "$out" && fail "absent: finalize_job returned on rank 0"
[ "$ms" -lt 20000 ] || fail "absent: the job took $ms ms (rank 1 sleeps 60 s)"
echo "ok absent: the job ended after $ms ms with status $rc and the message"
