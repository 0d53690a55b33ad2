#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# torch_trainer end to end: usage torch_trainer.sh TORCH_TRAINER [MPI_TRAINER MPIRUN
# [mpirun args]]. Two ranks sum exactly (a + b = b + a), so every transport, fusion and
# sync pattern ends with the same weights: local threads, shm processes, mpi and two_level
# under mpirun, overlapped buckets and one allreduce per parameter. Four ranks, the
# transformer and a compressed run end with identical replicas (the trainer checks every
# epoch and compares the ranks' final lines).
set -euo pipefail
T=${1:?usage: $0 torch_trainer [mpi_trainer mpirun [args]]}
M=${2:-}
MPIRUN=${3:-}
shift $(($# < 3 ? $# : 3))
MPIARGS=("$@")
export GRADSYNC_TIMEOUT=60
TMP=$(mktemp -d /tmp/torch_trainer_test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
final_of() { grep -oE 'final epoch=.*weights_fnv64=[0-9a-f]{16}' "$1" | tail -n 1; }
weights_of() { grep -oE 'weights_fnv64=[0-9a-f]{16}' <<<"$1" | head -n 1; }
# run NAME [runner...] -- ARGS: the trainer with a hard time limit; output in $TMP/NAME.*.
run() {
  local name=$1
  shift
  local rc=0
  timeout 240 "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" || rc=$?
  [ "$rc" -eq 0 ] || { cat "$TMP/$name.out" "$TMP/$name.err" >&2; fail "$name exited with $rc"; }
  final_of "$TMP/$name.out" >"$TMP/$name.final"
  [ -s "$TMP/$name.final" ] || { cat "$TMP/$name.out" >&2; fail "$name printed no final line"; }
  echo "$name: $(cat "$TMP/$name.final")"
}
cnn=(--model cnn --limit 512 --batch 64 --progress-every 4)
run local_bucket "$T" --ranks 2 "${cnn[@]}"
grep -q 'all 2 ranks hold identical weights' "$TMP/local_bucket.out" || fail "local: no replica line"
grep -q 'replicas identical' "$TMP/local_bucket.out" || fail "local: no epoch replica check"
grep -qE 'step +4/8 +loss [0-9.]+ ' "$TMP/local_bucket.out" || fail "local: no progress line"
want=$(weights_of "$(cat "$TMP/local_bucket.final")")
run local_none "$T" --ranks 2 --fusion none "${cnn[@]}"
run local_ring "$T" --ranks 2 --algo ring "${cnn[@]}"
run local_per_parameter "$T" --ranks 2 --sync per-parameter "${cnn[@]}"
run shm_bucket "$T" --transport shm --ranks 2 "${cnn[@]}"
run shm_per_parameter "$T" --transport shm --ranks 2 --sync per-parameter "${cnn[@]}"
for name in local_none local_ring local_per_parameter shm_bucket shm_per_parameter; do
  [ "$(weights_of "$(cat "$TMP/$name.final")")" = "$want" ] ||
    fail "$name: weights differ from local_bucket's ($want)"
done
# The test accuracy beats chance (0.1) after 8 steps.
acc=$(sed -n 's/.*test_acc=\([0-9.]*\).*/\1/p' "$TMP/local_bucket.final")
awk -v a="$acc" 'BEGIN { exit !(a > 0.2) }' || fail "CNN test accuracy $acc after 8 steps"
run local4 "$T" --ranks 4 --check-replicas 2 "${cnn[@]}"
grep -q 'all 4 ranks hold identical weights' "$TMP/local4.out" || fail "local4: replicas"
run int8 "$T" --transport shm --ranks 2 --compress int8 "${cnn[@]}"
lm=(--model transformer --limit 96 --batch 16 --progress-every 2)
run lm_overlap "$T" --transport shm --ranks 2 "${lm[@]}"
grep -q 'perplexity=' "$TMP/lm_overlap.final" || fail "transformer: no perplexity"
grep -qE '\(2[0-9]{6} parameters in [34][0-9] tensors\)' "$TMP/lm_overlap.out" ||
  fail "transformer: expected 2M+ parameters in 30+ tensors"
run lm_per_parameter "$T" --ranks 2 --sync per-parameter "${lm[@]}"
[ "$(weights_of "$(cat "$TMP/lm_per_parameter.final")")" = \
  "$(weights_of "$(cat "$TMP/lm_overlap.final")")" ] || fail "transformer: overlap and per-parameter differ"
if [ -n "$M" ]; then
  run mpi "$MPIRUN" "${MPIARGS[@]}" -n 2 "$M" --transport mpi "${cnn[@]}"
  [ "$(weights_of "$(cat "$TMP/mpi.final")")" = "$want" ] || fail "mpi: weights differ ($want)"
  run two_level "$MPIRUN" "${MPIARGS[@]}" -n 4 "$M" --transport two_level --node-ranks 2 "${cnn[@]}"
  [ "$(grep -cE 'final epoch=.*weights_fnv64' "$TMP/two_level.out")" -eq 4 ] ||
    fail "two_level: expected 4 final lines"
  [ "$(grep -oE 'weights_fnv64=[0-9a-f]{16}' "$TMP/two_level.out" | sort -u | wc -l)" -eq 1 ] ||
    fail "two_level: ranks ended with different weights"
fi
echo "PASS: torch_trainer: every 2-rank run ends with $want"
