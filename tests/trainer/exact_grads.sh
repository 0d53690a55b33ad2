#!/usr/bin/env bash
# End to end with --exact-grads: every step's synced gradient (hash printed per step)
# and the final weights are bit-identical for 1, 2 and 4 ranks, and across algorithms
# and fusion; without the test mode, 1/2/4 ranks agree on accuracy within a point.
source "$(dirname "$0")/common.sh"
common=(--epochs 2 --limit 2048 --batch 256 --exact-grads --print-grad-hash --quiet)
run ref --ranks 1 "${common[@]}"
expect_ok ref
[ "$(grep -c '^grad step=' "$TMP/ref.out")" -eq 16 ] || fail "expected 16 gradient hashes"
for variant in "2 ring none" "4 ring none" "4 tree none" "2 halving_doubling bucket" "4 ring bucket" "4 auto bucket"; do
  set -- $variant
  name="r$1_$2_$3"
  run "$name" --ranks "$1" --algo "$2" --fusion "$3" --bucket-mb 0.25 "${common[@]}"
  expect_ok "$name"
  cmp -s "$TMP/ref.out" "$TMP/$name.out" || { diff "$TMP/ref.out" "$TMP/$name.out" | head; fail "$variant differs from 1 rank"; }
done
echo "PASS: gradients and weights identical: $(final_of "$TMP/ref.out")"
