#!/usr/bin/env bash
# Two jobs of 2 ranks each given the same GRADSYNC_SHM_JOB, all four processes started
# together, 20 trials (issue 54's target). Passes only when, in every trial, every
# process refuses (exits non-zero) with a message naming the shared job id, and nothing
# of the id is left in /dev/shm.
# Before the job id's roster (transport/shm/roster.hpp), a rank of each job formed a
# group with one of the other's and both finished, their data mixed, in 20 of 20 trials.
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
  named=$(grep -l 'same job id' "$out"/* | wc -l)
  echo "trial $i: $finished of 4 processes finished, $((4 - finished)) refused, $named of them naming the shared job id"
  left=$(find /dev/shm -maxdepth 1 -name "gradsync-*-$job*" | wc -l)
  [ "$left" -eq 0 ] || echo "trial $i: $left names of the job id left in /dev/shm"
  if [ "$finished" -eq 0 ] && [ "$named" -eq 4 ] && [ "$left" -eq 0 ]; then met=$((met + 1)); fi
  rm -f /dev/shm/gradsync-*"-$job"* 2>/dev/null
done
echo "both jobs refused in $met of $trials trials"
[ "$met" -eq "$trials" ]
