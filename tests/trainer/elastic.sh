#!/usr/bin/env bash
# Elastic restart (scripts/elastic-run): a 4-rank shm run loses a rank (SIGKILL of one of
# its processes) after a checkpoint; elastic-run relaunches it on the 3 ranks left from
# the latest checkpoint, within 30 s of the kill, and it ends with the accuracy of an
# uninterrupted 4-rank run (within a point: the rank count changes the float sums).
source "$(dirname "$0")/common.sh"
ER="$(cd "$(dirname "$0")/../.." && pwd)/scripts/elastic-run"
shape=(--transport shm --epochs 2 --limit 4096 --batch 128 --checkpoint-every 8)
run ref --ranks 4 "${shape[@]}" --checkpoint "$TMP/ref_ck" --quiet
expect_ok ref
"$ER" --ranks 4 --min 2 --restarts 2 --log "$TMP/elastic.log" -- \
  "$T" --data "$DATA" --ranks '{ranks}' "${shape[@]}" --checkpoint "$TMP/ck" \
  --throttle-ms 25 >"$TMP/el.out" 2>"$TMP/el.err" &
epid=$!
waited=0
until [ -f "$TMP/ck/ckpt-0000000016.bin" ]; do
  sleep 0.05
  waited=$((waited + 1))
  [ $waited -lt 1200 ] || fail "no checkpoint at step 16 after 60 s"
  kill -0 $epid 2>/dev/null || { cat "$TMP/el.out" "$TMP/el.err"; fail "the run ended early"; }
done
trainer=$(pgrep -P $epid | head -n 1)
victim=$(pgrep -P "$trainer" | head -n 1)
[ -n "$victim" ] || fail "no rank process under the trainer (pid $trainer)"
kill -KILL "$victim"
killed=$(date +%s.%N)
resumed=""
for _ in $(seq 1 1200); do
  if grep -q '^resumed from' "$TMP/el.out" 2>/dev/null; then
    resumed=$(date +%s.%N)
    break
  fi
  kill -0 $epid 2>/dev/null || break
  sleep 0.05
done
rc=0
wait $epid || rc=$?
cat "$TMP/elastic.log"
[ $rc -eq 0 ] || { cat "$TMP/el.out" "$TMP/el.err"; fail "elastic-run exited with $rc"; }
[ -n "$resumed" ] || { cat "$TMP/el.out"; fail "no 'resumed from' line after the kill"; }
grep -q 'launch 1 failed' "$TMP/elastic.log" || fail "the first launch did not fail"
grep -q 'restart 1: relaunching from the latest checkpoint on 3 rank(s)' "$TMP/elastic.log" ||
  fail "no restart on 3 ranks in the log"
grep -q 'resuming with 3 ranks a checkpoint written by 4 ranks' "$TMP/el.out" ||
  fail "the relaunch did not resume the 4-rank checkpoint on 3 ranks"
gap=$(awk -v a="$killed" -v b="$resumed" 'BEGIN { printf "%.1f", b - a }')
awk -v g="$gap" 'BEGIN { exit !(g < 30) }' || fail "resumed $gap s after the kill (limit 30 s)"
a=$(field_of "$(final_of "$TMP/ref.out")" test_acc)
b=$(field_of "$(final_of "$TMP/el.out")" test_acc)
[ -n "$b" ] || fail "the elastic run has no final line"
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01) }' ||
  fail "test_acc $b after the restart vs $a uninterrupted"
echo "PASS: killed a rank after step 16, resumed on 3 ranks ${gap} s later; test_acc $b vs $a"
