#!/usr/bin/env bash
# Kill -9 mid-run after a checkpoint, resume, and end with the same final line (weights
# hash, loss, accuracy) as an uninterrupted run; also with --fusion bucket on 4 ranks.
source "$(dirname "$0")/common.sh"
check() {
  local label=$1
  shift
  local common=(--epochs 3 --limit 4096 --batch 128 --checkpoint-every 10 "$@")
  run "full_$label" "${common[@]}" --checkpoint "$TMP/full_$label" --quiet
  expect_ok "full_$label"
  local want
  want=$(final_of "$TMP/full_$label.out")
  # 96 steps, 30 ms each: the kill lands after the checkpoint of step 40 (epoch 2).
  # Started directly (no `timeout` wrapper) so that $! is the trainer itself.
  "$T" --data "$DATA" "${common[@]}" --checkpoint "$TMP/ck_$label" --throttle-ms 30 \
    >"$TMP/killed_$label.out" 2>&1 &
  local pid=$! waited=0
  until [ -f "$TMP/ck_$label/ckpt-0000000040.bin" ]; do
    sleep 0.05
    waited=$((waited + 1))
    [ $waited -lt 1200 ] || fail "$label: no checkpoint at step 40 after 60 s"
    kill -0 $pid 2>/dev/null || { cat "$TMP/killed_$label.out"; fail "$label: the run ended before its checkpoint at step 40"; }
  done
  kill -KILL $pid
  local krc=0
  wait $pid 2>/dev/null || krc=$?
  [ $krc -eq 137 ] || fail "$label: the run was not killed mid-run (exit $krc)"
  grep -q '^final ' "$TMP/killed_$label.out" && fail "$label: killed run finished anyway"
  local latest
  latest=$(ls "$TMP/ck_$label" | grep '^ckpt-' | tail -n 1)
  [ "$latest" \< "ckpt-0000000096.bin" ] || fail "$label: latest checkpoint $latest is the end of training"
  run "resumed_$label" "${common[@]}" --checkpoint "$TMP/ck_$label" --resume
  expect_ok "resumed_$label"
  grep -q "^resumed from $TMP/ck_$label/ckpt-" "$TMP/resumed_$label.out" || fail "$label: no 'resumed from' line"
  local got
  got=$(final_of "$TMP/resumed_$label.out")
  [ "$got" = "$want" ] || fail "$label: resumed run ended with '$got', uninterrupted with '$want'"
  ls -A "$TMP/ck_$label" | grep -q '\.tmp\.' && fail "$label: temporary checkpoint files left behind"
  echo "PASS ($label): killed after $latest, resumed: $got"
}
check ranks2 --ranks 2
check ranks4_bucket --ranks 4 --fusion bucket --bucket-mb 0.25
