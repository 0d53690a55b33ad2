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
