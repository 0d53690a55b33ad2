#!/usr/bin/env bash
# End to end with --exact-grads: every step's synced gradient (hash printed per step)
# and the final weights are bit-identical for 1, 2 and 4 ranks, and across algorithms
# and fusion and bucket sizes, and equal bench/gpu/exact_ref.txt (the GPU check's reference).
source "$(dirname "$0")/common.sh"
common=(--epochs 2 --limit 2048 --batch 256 --exact-grads --print-grad-hash --quiet)
run ref --ranks 1 "${common[@]}"
expect_ok ref
[ "$(grep -c '^grad step=' "$TMP/ref.out")" -eq 16 ] || fail "expected 16 gradient hashes"
# bench/gpu_check.sh compares the CUDA trainer on a GPU with this run, kept in the tree
# (the GPU machine may have no OpenBLAS to build the CPU trainer): it must stay current.
REF="$(dirname "$0")/../../bench/gpu/exact_ref.txt"
cmp -s "$TMP/ref.out" "$REF" || { diff "$REF" "$TMP/ref.out" | head; fail "bench/gpu/exact_ref.txt is \
stale: regenerate it with: mini_trainer --ranks 1 ${common[*]} > bench/gpu/exact_ref.txt"; }
for variant in "local 2 ring none" "local 4 ring none" "local 4 tree none" \
  "local 2 halving_doubling bucket" "local 4 ring bucket" "local 4 auto bucket" \
  "shm 2 direct none" "shm 4 direct_one_shot bucket" "shm 4 ring none"; do
  set -- $variant
  name="$1_r$2_$3_$4"
  run "$name" --transport "$1" --ranks "$2" --algo "$3" --fusion "$4" --bucket-mb 0.25 "${common[@]}"
  expect_ok "$name"
  cmp -s "$TMP/ref.out" "$TMP/$name.out" || { diff "$TMP/ref.out" "$TMP/$name.out" | head; fail "$variant differs from 1 rank"; }
done
# --bucket-mb is a run-time value: sizes no build lists (3, 0.01 = 10 KiB) give the same bits.
for mb in 3 0.01; do
  name="local_r4_ring_bucket_${mb}"
  run "$name" --ranks 4 --fusion bucket --bucket-mb "$mb" "${common[@]}"
  expect_ok "$name"
  cmp -s "$TMP/ref.out" "$TMP/$name.out" || fail "--bucket-mb $mb differs from 1 rank"
done
echo "PASS: gradients and weights identical: $(final_of "$TMP/ref.out")"
