#!/usr/bin/env bash
# cuda_trainer without a GPU: what it does not do is refused before any CUDA call, with
# exit 2 and a message naming the flag; a missing data directory is named (exit 2, as in
# the CPU trainer).
# $1: mini_trainer (for common.sh), $2: cuda_trainer.
source "$(dirname "$0")/common.sh"
C=${2:?usage: $0 mini_trainer cuda_trainer}
refused() {  # refused NAME PATTERN ARGS...: exit 2 with PATTERN on stderr
  local name=$1 pattern=$2 rc=0
  shift 2
  timeout 60 "$C" --data "$DATA" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" || rc=$?
  [ $rc -eq 2 ] || { cat "$TMP/$name.err"; fail "$name: exit $rc, want 2"; }
  grep -q -- "$pattern" "$TMP/$name.err" || { cat "$TMP/$name.err"; fail "$name: no '$pattern' in the message"; }
}
refused transport "--transport must be cuda_ipc or mpi_device, got 'shm'" --transport shm
refused algo "--algo must be native" --algo ring
refused compress "--compress int8 is not supported by cuda_trainer" --fusion bucket --compress int8
refused shard "--shard-optimizer is not supported" --shard-optimizer
refused checkpoint "--checkpoint / --resume is not supported" --checkpoint "$TMP/ck"
refused ranks "--ranks must be 1..8 with cuda_ipc, got 9" --ranks 9
rc=0
timeout 60 "$C" --data "$TMP/nowhere" >"$TMP/data.out" 2>"$TMP/data.err" || rc=$?
[ $rc -eq 2 ] || fail "missing data: exit $rc, want 2"
grep -q "$TMP/nowhere" "$TMP/data.err" || { cat "$TMP/data.err"; fail "missing data: the directory is not named"; }
echo "PASS: cuda_trainer refuses what it does not do, naming the flag"
