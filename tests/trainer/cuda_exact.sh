#!/usr/bin/env bash
# cuda_trainer on a GPU (exit 77 without one): with --exact-grads every step's averaged
# gradient and the final weights equal the CPU trainer's bit for bit, for 1, 2 and 4
# processes and both fusion modes; the replicas stay identical (checked every epoch by
# the trainer itself). $1: mini_trainer, $2: cuda_trainer.
source "$(dirname "$0")/common.sh"
C=${2:?usage: $0 mini_trainer cuda_trainer}
common=(--epochs 2 --limit 2048 --batch 256 --exact-grads --print-grad-hash --quiet)
crun() {  # like run, for cuda_trainer; a skip (no GPU) skips the test
  local name=$1
  shift
  rc=0
  timeout 300 "$C" --data "$DATA" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" || rc=$?
  if [ $rc -eq 77 ]; then
    echo "SKIP: $(cat "$TMP/$name.out" "$TMP/$name.err")"
    exit 77
  fi
}
crun gpu_r1_none --ranks 1 "${common[@]}"
expect_ok gpu_r1_none
run ref --ranks 1 "${common[@]}"
expect_ok ref
[ "$(grep -c '^grad step=' "$TMP/ref.out")" -eq 16 ] || fail "expected 16 gradient hashes"
for variant in "1 none" "2 none" "4 bucket" "4 none"; do
  set -- $variant
  name="gpu_r$1_$2"
  [ -f "$TMP/$name.out" ] || { crun "$name" --ranks "$1" --fusion "$2" --bucket-mb 0.25 "${common[@]}"; expect_ok "$name"; }
  cmp -s "$TMP/ref.out" "$TMP/$name.out" || {
    diff "$TMP/ref.out" "$TMP/$name.out" | head
    fail "cuda_trainer --ranks $1 --fusion $2 differs from the CPU trainer"
  }
done
echo "PASS: CPU and GPU gradients and weights identical: $(final_of "$TMP/ref.out")"
