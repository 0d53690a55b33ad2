#!/usr/bin/env bash
# A short real training run: 2 ranks, 3 epochs of 100 steps on 6400 samples. The loss
# must decrease, every epoch's replica check must pass, the final line must be
# well-formed, and the model must have learned something.
source "$(dirname "$0")/common.sh"
run short --ranks 2 --epochs 3 --limit 6400 --batch 64 --progress-every 40 --fusion bucket
expect_ok short
cat "$TMP/short.out"
out="$TMP/short.out"
[ "$(grep -c '^epoch ./3 .*replicas identical' "$out")" -eq 3 ] || fail "expected 3 epoch lines with passed replica checks"
grep -q '^  epoch 1 step    40/100  loss .* samples/s  sync .* ms/step (.*% of step)' "$out" ||
  fail "no progress line during the epoch"
l1=$(sed -n 's/^epoch 1\/3  loss \([0-9.]*\).*/\1/p' "$out")
l3=$(sed -n 's/^epoch 3\/3  loss \([0-9.]*\).*/\1/p' "$out")
awk -v a="$l1" -v b="$l3" 'BEGIN { exit !(b < a - 0.1) }' || fail "loss did not decrease: epoch 1 $l1, epoch 3 $l3"
final=$(final_of "$out")
[[ "$final" =~ ^final\ epoch=3\ test_acc=0\.[0-9]{4}\ loss=[0-9]+\.[0-9]{4}\ weights_fnv64=[0-9a-f]{16}$ ]] ||
  fail "malformed final line: '$final'"
grep -q '^all 2 ranks hold identical weights$' "$out" || fail "no replica agreement line"
acc=$(field_of "$final" test_acc)
awk -v a="$acc" 'BEGIN { exit !(a > 0.70) }' || fail "test accuracy $acc after 300 steps (expected > 0.70)"
echo "PASS: loss $l1 -> $l3, $final"
