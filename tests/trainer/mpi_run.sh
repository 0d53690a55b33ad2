#!/usr/bin/env bash
# --transport mpi under mpirun: usage mpi_run.sh MINI_TRAINER MPI_TRAINER MPIRUN [mpirun args]
# With --exact-grads, 2 and 4 MPI processes (ring, native, bucket) end with the same final
# line as 1 in-process rank; every process prints the same final line.
source "$(dirname "$0")/common.sh"
M=${2:?mpi trainer}
MPIRUN=${3:?mpirun}
shift 3
MPIARGS=("$@")
common=(--epochs 2 --limit 2048 --batch 256 --exact-grads --print-grad-hash --quiet)
run ref --ranks 1 "${common[@]}"
expect_ok ref
want=$(final_of "$TMP/ref.out")
for variant in "2 ring none" "4 native none" "4 ring bucket"; do
  set -- $variant
  name="mpi$1_$2_$3"
  rc=0
  timeout 150 "$MPIRUN" "${MPIARGS[@]}" -n "$1" "$M" --transport mpi --data "$DATA" --algo "$2" \
    --fusion "$3" --bucket-mb 0.25 "${common[@]}" >"$TMP/$name.out" 2>"$TMP/$name.err" || rc=$?
  expect_ok "$name"
  # The launcher may splice the ranks' output lines together: match the records, not lines.
  finals=$(grep -oE 'final epoch=[0-9]+ test_acc=[0-9.]+ loss=[0-9.]+ weights_fnv64=[0-9a-f]{16}' "$TMP/$name.out")
  [ "$(wc -l <<<"$finals")" -eq "$1" ] || { cat "$TMP/$name.out"; fail "$variant: expected $1 final lines"; }
  [ "$(sort -u <<<"$finals")" = "$want" ] || { echo "$finals"; fail "$variant: final lines differ from 1 rank's '$want'"; }
  cmp -s <(grep -oE 'grad step=[0-9]+ fnv64=[0-9a-f]{16}' "$TMP/ref.out") \
    <(grep -oE 'grad step=[0-9]+ fnv64=[0-9a-f]{16}' "$TMP/$name.out") ||
    fail "$variant: gradient hashes differ from 1 rank"
done
echo "PASS: mpi 2/4 processes == 1 rank: $want"
