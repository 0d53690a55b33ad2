#!/usr/bin/env bash
# The mini-trainer across 2 simulated hosts with --exact-grads: 2 hosts x 2 ranks over
# two_level + hierarchical (bucket fusion) and over flat mpi must end with the final line
# (weights_fnv64 included) of 4 in-process ranks on one host, on every rank; 2 + 1 ranks
# over flat mpi must end with identical replicas. (MPI_Finalize hangs of MPICH over UCX's TCP transport are
# tolerated as in tests/cluster/run.sh; every rank's final line is still required.)
#   trainer.sh MINI_TRAINER MPI_TRAINER FLAVOUR
source "$(dirname "$0")/../trainer/common.sh"
M=${2:?mpi trainer}
flavour=${3:?flavour}
vc=$(cd "$(dirname "$0")/../.." && pwd)/scripts/vcluster
why=$("$vc" check) || { echo "$why"; exit 77; }
common=(--epochs 2 --limit 2048 --batch 256 --exact-grads --quiet)
run ref --transport local --ranks 4 "${common[@]}"
expect_ok ref
want=$(final_of "$TMP/ref.out")
[ -n "$want" ] || fail "no final line from the reference run"
# ppn | transport | algorithm | fusion. 2 + 1 ranks cannot use --exact-grads (it needs a
# power-of-two rank count): its 3 replicas must agree with each other.
for variant in "2 two_level hierarchical bucket" "2 mpi ring none" "2,1 mpi auto bucket"; do
  set -- $variant
  ppn=$1 transport=$2 algo=$3 fusion=$4
  flags=("${common[@]}")
  [[ $ppn == *,* ]] && flags=(--epochs 1 --limit 2048 --batch 192 --quiet)
  name="${transport}_${algo}_${fusion}_${ppn/,/+}"
  n=$((${ppn%%,*} + ${ppn#*,}))
  [[ $ppn == *,* ]] || n=$((2 * ppn))
  rc=0
  "$vc" run --mpi "$flavour" --hosts 2 --ppn "$ppn" --timeout 200 -- "$M" --data "$DATA" \
    --transport "$transport" --algo "$algo" --fusion "$fusion" --bucket-mb 0.25 "${flags[@]}" \
    >"$TMP/$name.out" 2>"$TMP/$name.err" || rc=$?
  if [ "$rc" -ne 0 ] && grep -q 'MPI_Finalize did not return' "$TMP/$name.err"; then
    echo "NOTE: $variant: status $rc from MPI_Finalize not returning (see tests/cluster/run.sh)"
    rc=0  # the final lines below must still be complete and equal
  fi
  expect_ok "$name"
  finals=$(grep -oE 'final epoch=[0-9]+ test_acc=[0-9.]+ loss=[0-9.]+ weights_fnv64=[0-9a-f]{16}' "$TMP/$name.out")
  [ "$(wc -l <<<"$finals")" -eq "$n" ] || { cat "$TMP/$name.out"; fail "$variant: expected $n final lines"; }
  if [[ $ppn == *,* ]]; then
    [ "$(sort -u <<<"$finals" | wc -l)" -eq 1 ] || { echo "$finals"; fail "$variant: the replicas differ"; }
    echo "ok: $variant ($n ranks on 2 hosts): identical replicas: $(head -1 <<<"$finals")"
    continue
  fi
  [ "$(sort -u <<<"$finals")" = "$want" ] || { echo "$finals"; fail "$variant: final lines differ from 4 local ranks' '$want'"; }
  echo "ok: $variant ($n ranks on 2 hosts): $want"
done
# --reproducible (ordinary float math): 2 + 1 ranks on 2 hosts end with the weights of
# 1 rank on one host.
rep=(--epochs 1 --limit 2048 --batch 256 --reproducible --quiet)
run rep_ref --transport local --ranks 1 "${rep[@]}"
expect_ok rep_ref
rep_want=$(final_of "$TMP/rep_ref.out")
rc=0
"$vc" run --mpi "$flavour" --hosts 2 --ppn 2,1 --timeout 200 -- "$M" --data "$DATA" \
  --transport mpi --algo auto --fusion bucket --bucket-mb 0.25 "${rep[@]}" \
  >"$TMP/rep.out" 2>"$TMP/rep.err" || rc=$?
if [ "$rc" -ne 0 ] && grep -q 'MPI_Finalize did not return' "$TMP/rep.err"; then rc=0; fi
expect_ok rep
finals=$(grep -oE 'final epoch=[0-9]+ test_acc=[0-9.]+ loss=[0-9.]+ weights_fnv64=[0-9a-f]{16}' "$TMP/rep.out")
[ "$(wc -l <<<"$finals")" -eq 3 ] || { cat "$TMP/rep.out"; fail "--reproducible 2 + 1 ranks: expected 3 final lines"; }
[ "$(sort -u <<<"$finals")" = "$rep_want" ] || { echo "$finals"; fail "--reproducible 2 + 1 ranks on 2 hosts differ from 1 local rank's '$rep_want'"; }
echo "ok: --reproducible, 2 + 1 ranks on 2 hosts == 1 rank: $rep_want"
echo "PASS: across 2 hosts == 4 ranks on one host: $want"
