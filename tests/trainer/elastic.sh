#!/usr/bin/env bash
# Elastic restart (scripts/elastic-run): a 4-rank shm run loses a rank (SIGKILL of one of
# its processes) after a checkpoint; elastic-run relaunches it on the 3 ranks left from
# the latest checkpoint, within 30 s of the kill, and it ends with the accuracy of an
# uninterrupted 4-rank run (within half a point, issue 20's bound: the rank count changes
# the float sums).
source "$(dirname "$0")/common.sh"
ER="$(cd "$(dirname "$0")/../.." && pwd)/scripts/elastic-run"
shape=(--transport shm --epochs 2 --limit 4096 --batch 128 --checkpoint-every 8)
run ref --ranks 4 "${shape[@]}" --checkpoint "$TMP/ref_ck" --quiet
expect_ok ref
"$ER" --ranks 4 --min 2 --restarts 2 --log "$TMP/elastic.log" -- \
  "$T" --data "$DATA" --ranks '{ranks}' "${shape[@]}" --checkpoint "$TMP/ck" \
  --throttle-ms 25 >"$TMP/el.out" 2>"$TMP/el.err" &
epid=$!
elastic_wait_for $epid "$TMP/ck/ckpt-0000000016.bin" 60
trainer=$(pgrep -P $epid | head -n 1)
victim=$(pgrep -P "$trainer" | head -n 1)
[ -n "$victim" ] || fail "no rank process under the trainer (pid $trainer)"
kill -KILL "$victim"
elastic_verdict $epid "$(date +%s.%N)" 3 4 3
echo "PASS: killed a rank after step 16, resumed on 3 ranks ${gap} s later; test_acc $b vs $a"
