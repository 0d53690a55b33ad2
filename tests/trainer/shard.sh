#!/usr/bin/env bash
# The start broadcast and --shard-optimizer: ranks that drew different initial weights
# (--seed-per-rank) end with the weights of a plain run, because every rank takes rank
# 0's start; with --exact-grads, --shard-optimizer (reduce-scatter, update a shard,
# allgather) ends with the same weights as the replicated update on 2 and 4 ranks, local
# and shm, and keeps 1/n of the momentum per rank; a sharded checkpoint resumes exactly.
source "$(dirname "$0")/common.sh"
common=(--epochs 2 --limit 2048 --batch 256 --exact-grads --quiet)
run ref --ranks 4 "${common[@]}"
expect_ok ref
want=$(field_of "$(final_of "$TMP/ref.out")" weights_fnv64)
[ -n "$want" ] || fail "no final line in the reference run"
run seeds --ranks 4 --seed-per-rank "${common[@]}"
expect_ok seeds
got=$(field_of "$(final_of "$TMP/seeds.out")" weights_fnv64)
[ "$got" = "$want" ] || fail "--seed-per-rank ended with weights $got, a plain run with $want"
for variant in "local 2" "local 4" "shm 4"; do
  set -- $variant
  name="shard_$1_$2"
  run "$name" --transport "$1" --ranks "$2" --shard-optimizer "${common[@]}"
  expect_ok "$name"
  got=$(field_of "$(final_of "$TMP/$name.out")" weights_fnv64)
  [ "$got" = "$want" ] || fail "--shard-optimizer on $variant ended with weights $got, unsharded $want"
done
# The start line reports the momentum each rank keeps: ceil(P / 4) of P floats.
run mem --ranks 4 --shard-optimizer --epochs 1 --limit 512 --batch 256 --exact-grads --progress-every 0
expect_ok mem
grep -Eq '^sharded optimizer: momentum [0-9]+ floats per rank \([0-9]+ for the whole model, 1/4\)' "$TMP/mem.out" ||
  { cat "$TMP/mem.out"; fail "no momentum-per-rank line"; }
read -r per total < <(sed -n 's/^sharded optimizer: momentum \([0-9]*\) floats per rank (\([0-9]*\) .*/\1 \2/p' "$TMP/mem.out")
[ "$per" -eq $(((total + 3) / 4)) ] || fail "momentum per rank $per, expected ceil($total / 4)"
# Sharded checkpoints hold the whole momentum: stopped after 5 steps and resumed, the run
# ends as the uninterrupted one.
run part --ranks 4 --shard-optimizer --checkpoint "$TMP/ck" --checkpoint-every 5 --stop-after 5 "${common[@]}"
expect_ok part
run rest --ranks 4 --shard-optimizer --checkpoint "$TMP/ck" --resume "${common[@]}"
expect_ok rest
got=$(field_of "$(final_of "$TMP/rest.out")" weights_fnv64)
[ "$got" = "$want" ] || fail "a resumed sharded run ended with weights $got, expected $want"
echo "PASS: start broadcast and sharded optimizer match the plain run ($want); momentum $per of $total floats per rank"
