#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/elastic-run bounds a failed job's end: after a rank prints transport::abort_job's
# "[gradsync] rank R: ending the job" line, a launcher that does not exit within
# --end-grace gets SIGTERM, then SIGKILL, with its whole process group. Stand-in
# launchers (bash) play the MPI launcher; the MPI case runs in tests/cluster/link_down.sh.
set -uo pipefail
ER="$(cd "$(dirname "$0")/../.." && pwd)/scripts/elastic-run"
TMP=$(mktemp -d /tmp/elastic_run.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$TMP"/*.out "$TMP"/*.err; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; } >&2; done
  exit 1
}
mark='[gradsync] rank 1: ending the job (MPI_Abort, exit status 3)'
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# 1. A launcher that announces the end, ignores SIGTERM and a child of which sleeps on:
# both are gone after grace + 3 s, the status is non-zero and the log says why.
t0=$(now)
rc=0
"$ER" --restarts 0 --end-grace 1 -- bash -c "
  trap '' TERM
  sleep 60 & echo \$! >'$TMP/straggler.pid'
  echo 'step 1 done'
  echo '$mark' >&2
  sleep 60" >"$TMP/1.out" 2>"$TMP/1.err" || rc=$?
took=$(secs "$t0")
[ $rc -ne 0 ] || fail "1: exit status 0 after a rank ended the job"
awk -v t="$took" 'BEGIN { exit !(t >= 1 && t < 7) }' ||
  fail "1: ended after $took s (grace 1 s, then 3 s to SIGKILL)"
grep -qx 'step 1 done' "$TMP/1.out" || fail "1: the job's standard output did not pass through"
grep -qF "$mark" "$TMP/1.err" || fail "1: the job's standard error did not pass through"
grep -q "still running 1 s after a rank ended the job ('\[gradsync\] rank 1: ending the job" \
  "$TMP/1.err" || fail "1: no SIGTERM line naming the rank's announcement"
grep -q "did not end 3 s after the signal; sending SIGKILL" "$TMP/1.err" ||
  fail "1: no SIGKILL line"
straggler=$(cat "$TMP/straggler.pid")
sleep 0.2
state=$(ps -o stat= -p "$straggler" 2>/dev/null || true)  # a zombie (Z) has ended
[[ -z $state || $state == Z* ]] ||
  { kill "$straggler"; fail "1: the launcher's child $straggler was left running ($state)"; }
echo "1: a launcher ignoring SIGTERM ended in $took s (grace 1 s), its child too"

# 2. A launcher that ends by itself after the announcement keeps its own status.
rc=0
"$ER" --restarts 0 --end-grace 5 -- bash -c "echo '$mark' >&2; sleep 0.3; exit 3" \
  >"$TMP/2.out" 2>"$TMP/2.err" || rc=$?
[ $rc -eq 3 ] || fail "2: exit status $rc, expected the launcher's 3"
! grep -q SIGTERM "$TMP/2.err" || fail "2: a launcher that ended by itself was signalled"
echo "2: a launcher ending by itself kept its status 3"

# 3. No announcement: a long job is left alone (grace 0 would end it at once otherwise).
rc=0
"$ER" --restarts 0 --end-grace 0 -- \
  bash -c 'echo "[gradsync] rank 0: ended a step"; sleep 1.5; exit 4' \
  >"$TMP/3.out" 2>"$TMP/3.err" || rc=$?
[ $rc -eq 4 ] || fail "3: exit status $rc, expected 4 (signalled without an announcement?)"
echo "3: without an announcement the job ran to its own end"

# 4. SIGTERM to elastic-run ends a launcher that ignores it (SIGKILL 3 s later) and is
# not taken for a failure to restart from.
t0=$(now)
"$ER" --ranks 2 --restarts 2 -- bash -c "trap '' TERM; echo up {ranks}; sleep 60" \
  >"$TMP/4.out" 2>"$TMP/4.err" &
pid=$!
for _ in $(seq 100); do grep -q '^up 2' "$TMP/4.out" && break; sleep 0.05; done
kill -TERM $pid
rc=0
wait $pid || rc=$?
took=$(secs "$t0")
[ $rc -eq 143 ] || fail "4: exit status $rc after SIGTERM, expected 143"
grep -q "stopped by SIGTERM: not relaunching" "$TMP/4.err" || fail "4: no 'not relaunching' line"
! grep -q "launch 2" "$TMP/4.err" || fail "4: relaunched after SIGTERM"
awk -v t="$took" 'BEGIN { exit !(t < 8) }' || fail "4: took $took s to stop"
echo "4: SIGTERM stopped the run in $took s without a relaunch"

# 5. Bad options name what is wrong.
out=$("$ER" --restarts 1 -- true 2>&1) && fail "5: --restarts 1 without {ranks} was accepted"
grep -q '{ranks}' <<<"$out" || fail "5: the error does not mention {ranks}: $out"
out=$("$ER" --restarts 0 --end-grace -1 -- true 2>&1) && fail "5: --end-grace -1 was accepted"
grep -q 'at least 0' <<<"$out" || fail "5: the error does not give the range: $out"
out=$("$ER" --restarts 0 --end-grace soon -- true 2>&1) && fail "5: --end-grace soon was accepted"
grep -q "seconds or 'off'" <<<"$out" || fail "5: the error does not say what is expected: $out"
"$ER" --restarts 0 --end-grace off -- true 2>/dev/null || fail "5: --end-grace off refused"
echo "PASS"
