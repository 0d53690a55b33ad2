# Sourced by the trainer test scripts: $1 is the mini_trainer executable.
set -euo pipefail
T=${1:?usage: $0 path/to/mini_trainer}
DATA=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [ ! -f "$DATA/train-images-idx3-ubyte.gz" ]; then
  echo "SKIP: Fashion-MNIST not installed at $DATA (scripts/setup-deps installs it)"
  exit 77
fi
export OPENBLAS_NUM_THREADS=1
export GRADSYNC_TIMEOUT=${GRADSYNC_TIMEOUT:-60}
TMP=$(mktemp -d /tmp/trainer_test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# The machine-readable last line of a run's output.
final_of() { grep '^final ' "$1" | tail -n 1; }
field_of() { sed -n "s/.*\b$2=\([^ ]*\).*/\1/p" <<<"$1"; }
# Runs the trainer with a hard time limit; output in $TMP/$name.out/.err, status in $rc.
run() {
  local name=$1
  shift
  rc=0
  timeout 120 "$T" --data "$DATA" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" || rc=$?
}
expect_ok() {
  [ "$rc" -eq 0 ] || { cat "$TMP/$1.out" "$TMP/$1.err" >&2; fail "$1 exited with $rc"; }
}

# The elastic-restart tests (tests/trainer/elastic.sh, tests/cluster/elastic.sh) run
# scripts/elastic-run in the background as $1 with output in $TMP/el.out/.err and its
# log in $TMP/elastic.log. elastic_wait_for waits until it has written file $2 (at most
# $3 seconds).
elastic_wait_for() {
  local pid=$1 file=$2 ticks=$(($3 * 20)) waited=0
  until [ -f "$file" ]; do
    sleep 0.05
    waited=$((waited + 1))
    [ $waited -lt $ticks ] || fail "no $(basename "$file") after $3 s"
    kill -0 "$pid" 2>/dev/null || { cat "$TMP/el.out" "$TMP/el.err"; fail "the run ended early"; }
  done
}
# After a kill at $2 (date +%s.%N): waits for elastic-run ($1) and checks that its first
# launch failed, that it relaunched on $3 (the count it logs), that the trainer resumed
# the checkpoint of $4 ranks on $5, within 30 s of the kill, and that it ended within
# half a point of the uninterrupted run's accuracy ($TMP/ref.out). Sets gap, a and b (accuracies).
elastic_verdict() {
  local epid=$1 killed=$2 resumed="" rc=0
  for _ in $(seq 1 1200); do
    if grep -q '^resumed from' "$TMP/el.out" 2>/dev/null; then
      resumed=$(date +%s.%N)
      break
    fi
    kill -0 "$epid" 2>/dev/null || break
    sleep 0.05
  done
  wait "$epid" || rc=$?
  cat "$TMP/elastic.log"
  [ $rc -eq 0 ] || { tail -n 30 "$TMP/el.out" "$TMP/el.err"; fail "elastic-run exited with $rc"; }
  [ -n "$resumed" ] || { cat "$TMP/el.out"; fail "no 'resumed from' line after the kill"; }
  grep -q 'launch 1 failed' "$TMP/elastic.log" || fail "the first launch did not fail"
  grep -q "restart 1: relaunching from the latest checkpoint on $3 rank(s)" "$TMP/elastic.log" ||
    fail "no restart on $3 in the log"
  grep -q "resuming with $5 ranks a checkpoint written by $4 ranks" "$TMP/el.out" ||
    fail "the relaunch did not resume the $4-rank checkpoint on $5 ranks"
  gap=$(awk -v a="$killed" -v b="$resumed" 'BEGIN { printf "%.1f", b - a }')
  awk -v g="$gap" 'BEGIN { exit !(g < 30) }' || fail "resumed $gap s after the kill (limit 30 s)"
  a=$(field_of "$(final_of "$TMP/ref.out")" test_acc)
  b=$(field_of "$(final_of "$TMP/el.out")" test_acc)
  [ -n "$b" ] || fail "the elastic run has no final line"
  awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.005) }' ||
    fail "test_acc $b after the restart vs $a uninterrupted"
}
