#!/usr/bin/env bash
# Elastic restart across simulated hosts (scripts/elastic-run over scripts/vcluster): a
# 2 hosts x 2 ranks two_level run loses host gsB (SIGKILL of everything running in it:
# its MPI daemon and both ranks) after a checkpoint; elastic-run relaunches it on the
# one host left, from the latest checkpoint, within 30 s of the kill, and it ends with
# the accuracy of an uninterrupted 4-rank run (within half a point).
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
elastic_wait_for $epid "$TMP/ck/ckpt-0000000016.bin" 120
victims=$(ip netns pids gsB)
[ -n "$victims" ] || fail "nothing runs in host gsB"
kill -KILL $victims
elastic_verdict $epid "$(date +%s.%N)" 1 4 2
echo "PASS: host gsB killed after step 16, resumed on gsA's 2 ranks ${gap} s later; test_acc $b vs $a"
