#!/usr/bin/env bash
# End to end with --reproducible, in ordinary float math (no --exact-grads): every step's
# synced gradient (hash printed per step) and the final weights are bit-identical for
# 1, 2, 3, 4 and 8 ranks, across algorithms, fusion and bucket sizes, local and shm.
# Without --reproducible, 1 and 3 ranks end with different weights (what it fixes).
source "$(dirname "$0")/common.sh"
common=(--epochs 1 --limit 2048 --batch 256 --reproducible --print-grad-hash --quiet)
run ref --ranks 1 "${common[@]}"
expect_ok ref
[ "$(grep -c '^grad step=' "$TMP/ref.out")" -eq 8 ] || fail "expected 8 gradient hashes"
for variant in "local 2 ring none 1" "local 3 ring none 1" "local 4 tree none 1" \
  "local 8 ring bucket 0.01" "local 8 halving_doubling bucket 3" "local 3 auto bucket 0.25" \
  "shm 4 direct_one_shot bucket 0.25" "shm 3 direct none 1" "shm 8 ring bucket 1"; do
  set -- $variant
  name="$1_r$2_$3_$4_$5"
  run "$name" --transport "$1" --ranks "$2" --algo "$3" --fusion "$4" --bucket-mb "$5" "${common[@]}"
  expect_ok "$name"
  cmp -s "$TMP/ref.out" "$TMP/$name.out" || { diff "$TMP/ref.out" "$TMP/$name.out" | head; fail "$variant differs from 1 rank"; }
done
# Other micro-batch counts are other sums (the arithmetic changes), still rank-free.
run m4_r1 --ranks 1 "${common[@]}" --micro-batches 4
run m4_r4 --ranks 4 "${common[@]}" --micro-batches 4
expect_ok m4_r4
cmp -s "$TMP/m4_r1.out" "$TMP/m4_r4.out" || fail "--micro-batches 4: 4 ranks differ from 1"
# The control: plain float sums depend on the rank count.
plain=(--epochs 1 --limit 2048 --batch 256 --quiet)
run plain1 --ranks 1 "${plain[@]}"
run plain3 --ranks 3 "${plain[@]}"
expect_ok plain3
[ "$(field_of "$(final_of "$TMP/plain1.out")" weights_fnv64)" != \
  "$(field_of "$(final_of "$TMP/plain3.out")" weights_fnv64)" ] ||
  fail "without --reproducible, 1 and 3 ranks gave the same weights: the control is void"
# Refusals name the fix.
run nine --ranks 9 "${common[@]}"
[ "$rc" -eq 2 ] && grep -q "raise --micro-batches" "$TMP/nine.err" || fail "9 ranks of 8 micro-batches: $(cat "$TMP/nine.err")"
run comp --fusion bucket --compress int8 "${common[@]}"
[ "$rc" -eq 2 ] && grep -q "takes no --compress int8" "$TMP/comp.err" || fail "--compress: $(cat "$TMP/comp.err")"
echo "PASS: 1 to 8 ranks, every variant: $(final_of "$TMP/ref.out")"
