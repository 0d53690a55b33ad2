#!/usr/bin/env bash
# --transport mpi under mpirun: usage mpi_run.sh MINI_TRAINER MPI_TRAINER MPIRUN [mpirun args]
# With --exact-grads, 2 and 4 MPI processes (ring, native, bucket; and two_level with the
# hierarchical algorithm) end with the same final line as 1 in-process rank; every
# process prints the same final line. Variants marked +verify run with GRADSYNC_VERIFY=1
# (every call compares the ranks' result hashes; a false alarm would fail the run).
# With --reproducible (ordinary float math), 3 processes over mpi and 4 over two_level
# end with the gradients and weights of 1 in-process rank.
source "$(dirname "$0")/common.sh"
M=${2:?mpi trainer}
MPIRUN=${3:?mpirun}
shift 3
MPIARGS=("$@")
# Checks the run of every variant against 1 in-process rank: check MODE REF_NAME VARIANTS...
# (MODE: the run's flags, in the array named by $1). A variant is "N algo fusion transport
# [+verify] [extra flags]"; two_level: shm inside nodes of 2 ranks, mpi across.
check() {
  local -n flags=$1
  local ref=$2 variant name n algo fusion transport verify finals want
  shift 2
  run "$ref" --ranks 1 "${flags[@]}"
  expect_ok "$ref"
  want=$(final_of "$TMP/$ref.out")
  for variant in "$@"; do
    set -- $variant
    name="${ref}_$4$1_$2_$3"
    n=$1 algo=$2 fusion=$3 transport=$4
    shift 4
    verify=0
    if [ "${1:-}" = +verify ]; then
      verify=1 name="${name}_verify"
      shift
    fi
    rc=0
    GRADSYNC_VERIFY=$verify timeout 150 "$MPIRUN" "${MPIARGS[@]}" -n "$n" "$M" --transport "$transport" "$@" --data "$DATA" \
      --algo "$algo" --fusion "$fusion" --bucket-mb 0.25 "${flags[@]}" >"$TMP/$name.out" 2>"$TMP/$name.err" || rc=$?
    expect_ok "$name"
    # The launcher may splice the ranks' output lines together: match the records, not lines.
    finals=$(grep -oE 'final epoch=[0-9]+ test_acc=[0-9.]+ loss=[0-9.]+ weights_fnv64=[0-9a-f]{16}' "$TMP/$name.out")
    [ "$(wc -l <<<"$finals")" -eq "$n" ] || { cat "$TMP/$name.out"; fail "$ref $variant: expected $n final lines"; }
    [ "$(sort -u <<<"$finals")" = "$want" ] || { echo "$finals"; fail "$ref $variant: final lines differ from 1 rank's '$want'"; }
    cmp -s <(grep -oE 'grad step=[0-9]+ fnv64=[0-9a-f]{16}' "$TMP/$ref.out") \
      <(grep -oE 'grad step=[0-9]+ fnv64=[0-9a-f]{16}' "$TMP/$name.out") ||
      fail "$ref $variant: gradient hashes differ from 1 rank"
  done
  echo "ok: $ref: every variant == 1 rank: $want"
}
exact=(--epochs 2 --limit 2048 --batch 256 --exact-grads --print-grad-hash --quiet)
check exact exact "2 ring none mpi" "4 native none mpi +verify" "4 ring bucket mpi +verify" \
  "4 hierarchical bucket two_level +verify --node-ranks 2" \
  "4 hierarchical_native none two_level --node-ranks 2" "2 hierarchical bucket two_level"
# --reproducible in ordinary float math: 3 processes over mpi and 4 over two_level.
reproducible=(--epochs 1 --limit 2048 --batch 256 --reproducible --print-grad-hash --quiet)
check reproducible reproducible "3 ring none mpi" "4 hierarchical bucket two_level --node-ranks 2"
echo "PASS: mpi and two_level, 2/3/4 processes == 1 rank (--exact-grads, --reproducible)"
