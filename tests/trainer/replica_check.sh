#!/usr/bin/env bash
# The per-epoch replica check: perturbing one rank's weights (a test hook) must stop the
# run with an error that names that rank, on 2 and on 4 ranks.
source "$(dirname "$0")/common.sh"
for spec in "2 1" "4 3"; do
  set -- $spec
  run div$1 --ranks "$1" --epochs 2 --limit 1024 --batch 64 --inject-divergence "$2"
  [ "$rc" -eq 1 ] || { cat "$TMP/div$1.err"; fail "$1 ranks: diverged run exited with $rc, expected 1"; }
  grep -q "replica check after epoch 1 failed: the weights of rank(s) $2 differ from rank 0's" "$TMP/div$1.err" ||
    { cat "$TMP/div$1.err"; fail "$1 ranks: error does not name rank $2"; }
  grep -q '^final ' "$TMP/div$1.out" && fail "$1 ranks: a diverged run printed a final line"
  grep -q '^epoch 2/' "$TMP/div$1.out" && fail "$1 ranks: training went on after the divergence"
done
echo "PASS: divergence of rank 1 (of 2) and rank 3 (of 4) stopped training and was named"
