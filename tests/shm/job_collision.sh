#!/usr/bin/env bash
# Two jobs of 2 ranks each given the same GRADSYNC_SHM_JOB, all four processes started
# together, 20 trials (issue 54's target). Passes only when, in every trial, every
# process refuses (exits non-zero) and at least one message names the shared job id.
# Today a rank of each job forms a group with one of the other's and both finish
# (their data mixed, silently), the two others refuse: registered as an expected
# failure until that is fixed (docs/reliability.md).
#   tests/shm/job_collision.sh build/tests/shm/shm_launched [trials]
set -u
exe=$1
trials=${2:-20}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
met=0
for i in $(seq 1 "$trials"); do
  job="collide-$$-$i"
  pids=()
  for j in a b; do
    for r in 0 1; do
      GRADSYNC_SHM_RANK=$r GRADSYNC_SHM_SIZE=2 GRADSYNC_SHM_JOB=$job GRADSYNC_TIMEOUT=5 \
        timeout 60 "$exe" 'GRADSYNC_SHM_*' 2 >"$out/$j$r" 2>&1 &
      pids+=($!)
    done
  done
  finished=0
  for p in "${pids[@]}"; do
    wait "$p" && finished=$((finished + 1))
  done
  named=$(cat "$out"/* | grep -c 'same job id')
  echo "trial $i: $finished of 4 processes finished, $((4 - finished)) refused, $named messages name the shared job id"
  if [ "$finished" -eq 0 ] && [ "$named" -gt 0 ]; then met=$((met + 1)); fi
  rm -f /dev/shm/gradsync-*"$job"* 2>/dev/null
done
echo "both jobs refused in $met of $trials trials"
[ "$met" -eq "$trials" ]
