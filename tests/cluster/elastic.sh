#!/usr/bin/env bash
# Elastic restart across simulated hosts (scripts/elastic-run over scripts/vcluster): a
# 2 hosts x 2 ranks two_level run loses host gsB (SIGKILL of everything running in it:
# its MPI daemon and both ranks) after a checkpoint; elastic-run relaunches it on the
# one host left, from the latest checkpoint, within 30 s of the kill, and it ends with
# the accuracy of an uninterrupted 4-rank run (within a point).
#   elastic.sh MINI_TRAINER MPI_TRAINER FLAVOUR
source "$(dirname "$0")/../trainer/common.sh"
M=${2:?mpi trainer}
flavour=${3:?flavour}
root=$(cd "$(dirname "$0")/../.." && pwd)
vc=$root/scripts/vcluster
ER=$root/scripts/elastic-run
why=$("$vc" check) || { echo "$why"; exit 77; }
export GRADSYNC_TIMEOUT=10
shape=(--epochs 2 --limit 4096 --batch 128 --checkpoint-every 8)
run ref --transport local --ranks 4 "${shape[@]}" --checkpoint "$TMP/ref_ck" --quiet
expect_ok ref
"$vc" up 2 >/dev/null || fail "vcluster up"
trap '"$vc" down >/dev/null 2>&1; rm -rf "$TMP"' EXIT
# {ranks} counts hosts here: 2, then 1 after gsB is lost.
"$ER" --ranks 2 --min 1 --restarts 2 --log "$TMP/elastic.log" -- \
  "$vc" run --mpi "$flavour" --hosts '{ranks}' --ppn 2 --timeout 300 -- \
  "$M" --data "$DATA" --transport two_level --algo hierarchical "${shape[@]}" \
  --checkpoint "$TMP/ck" --throttle-ms 25 >"$TMP/el.out" 2>"$TMP/el.err" &
epid=$!
waited=0
until [ -f "$TMP/ck/ckpt-0000000016.bin" ]; do
  sleep 0.05
  waited=$((waited + 1))
  [ $waited -lt 2400 ] || fail "no checkpoint at step 16 after 120 s"
  kill -0 $epid 2>/dev/null || { cat "$TMP/el.out" "$TMP/el.err"; fail "the run ended early"; }
done
victims=$(ip netns pids gsB)
[ -n "$victims" ] || fail "nothing runs in host gsB"
kill -KILL $victims
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
[ $rc -eq 0 ] || { tail -n 30 "$TMP/el.out" "$TMP/el.err"; fail "elastic-run exited with $rc"; }
[ -n "$resumed" ] || { cat "$TMP/el.out"; fail "no 'resumed from' line after the kill"; }
grep -q 'launch 1 failed' "$TMP/elastic.log" || fail "the first launch did not fail"
grep -q 'restart 1: relaunching from the latest checkpoint on 1 rank(s)' "$TMP/elastic.log" ||
  fail "no restart on 1 host in the log"
grep -q 'resuming with 2 ranks a checkpoint written by 4 ranks' "$TMP/el.out" ||
  fail "the relaunch did not resume the 4-rank checkpoint on 2 ranks"
gap=$(awk -v a="$killed" -v b="$resumed" 'BEGIN { printf "%.1f", b - a }')
awk -v g="$gap" 'BEGIN { exit !(g < 30) }' || fail "resumed $gap s after the kill (limit 30 s)"
a=$(field_of "$(final_of "$TMP/ref.out")" test_acc)
b=$(field_of "$(final_of "$TMP/el.out")" test_acc)
[ -n "$b" ] || fail "the elastic run has no final line"
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01) }' ||
  fail "test_acc $b after the restart vs $a uninterrupted"
echo "PASS: host gsB killed after step 16, resumed on gsA's 2 ranks ${gap} s later; test_acc $b vs $a"
