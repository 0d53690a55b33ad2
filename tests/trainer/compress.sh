#!/usr/bin/env bash
# --compress: short runs with each scheme on 3 ranks (int8, topk and powersgd with and
# without error feedback). Every replica check must pass, the wire bytes per step must shrink as
# the scheme says (fp16 about 1/2 of none, int8 about 1/4, top-k 1 % about 1/25 over
# 3 ranks' allgather), the model must still learn, and a compression without
# --fusion bucket, an unknown scheme and an unsupported --topk-permille must be refused
# naming the flag.
source "$(dirname "$0")/common.sh"
common=(--ranks 3 --epochs 1 --limit 6000 --batch 96 --progress-every 20 --fusion bucket)
wire_of() { sed -n 's/^epoch 1\/1 .*  wire \([0-9.]*\) MB\/step$/\1/p' "$TMP/$1.out"; }
for c in none fp16 int8 "int8 --no-error-feedback" topk "topk --no-error-feedback" powersgd \
  "powersgd --powersgd-rank 1 --no-error-feedback"; do
  name=${c// /_}
  # shellcheck disable=SC2086
  run "$name" "${common[@]}" --compress $c
  expect_ok "$name"
  out="$TMP/$name.out"
  grep -q '^epoch 1/1 .*replicas identical  wire [0-9.]* MB/step$' "$out" ||
    { cat "$out"; fail "$c: no epoch line with the replica check and the wire bytes"; }
  grep -q '^  epoch 1 step    20/62 .* (.*% of step)  wire [0-9.]* MB/step$' "$out" ||
    { cat "$out"; fail "$c: no progress line with the wire bytes"; }
  grep -q '^all 3 ranks hold identical weights$' "$out" || fail "$c: replicas differ"
  acc=$(field_of "$(final_of "$out")" test_acc)
  awk -v a="$acc" 'BEGIN { exit !(a > 0.60) }' || fail "$c: test accuracy $acc (expected > 0.60)"
  echo "$c: $(wire_of "$name") MB/step, test_acc $acc"
done
none=$(wire_of none)
ratio() { awk -v a="$none" -v b="$(wire_of "$1")" 'BEGIN { printf "%.2f", a / b }'; }
awk -v r="$(ratio fp16)" 'BEGIN { exit !(r > 1.9 && r < 2.1) }' || fail "fp16 moved 1/$(ratio fp16) of none's bytes"
awk -v r="$(ratio int8)" 'BEGIN { exit !(r > 3.5 && r < 4.1) }' || fail "int8 moved 1/$(ratio int8) of none's bytes"
awk -v r="$(ratio topk)" 'BEGIN { exit !(r > 15) }' || fail "topk moved 1/$(ratio topk) of none's bytes"
# powersgd rank 4 on 784x256, 256x128, 128x10 (+ biases): about 1/27 of the bytes.
awk -v r="$(ratio powersgd)" 'BEGIN { exit !(r > 15) }' || fail "powersgd moved 1/$(ratio powersgd) of none's bytes"
# Refusals exit 2 and name the flag.
run nofusion --ranks 1 --compress int8
[ "$rc" -eq 2 ] && grep -q -- '--compress int8 needs --fusion bucket' "$TMP/nofusion.err" ||
  fail "--compress without --fusion bucket: exit $rc, $(cat "$TMP/nofusion.err")"
run badscheme --ranks 1 --fusion bucket --compress zstd
[ "$rc" -eq 2 ] && grep -q -- "--compress must be none, fp16, bf16, int8, topk or powersgd, got 'zstd'" "$TMP/badscheme.err" ||
  fail "unknown scheme: exit $rc, $(cat "$TMP/badscheme.err")"
run badk --ranks 1 --fusion bucket --compress topk --topk-permille 7
[ "$rc" -eq 2 ] && grep -q -- '--topk-permille must be 1 or 10' "$TMP/badk.err" ||
  fail "bad --topk-permille: exit $rc, $(cat "$TMP/badk.err")"
echo "PASS: wire per step none $none MB, fp16 1/$(ratio fp16), int8 1/$(ratio int8), topk 1/$(ratio topk), powersgd 1/$(ratio powersgd)"
