#!/usr/bin/env bash
# Bad input gives a clear error that names the file and what differs, and never leaves
# a partial checkpoint behind.
source "$(dirname "$0")/common.sh"
expect_err() {  # name status pattern
  [ "$rc" -eq "$2" ] || { cat "$TMP/$1.err"; fail "$1: exit $rc, expected $2"; }
  grep -qF -- "$3" "$TMP/$1.err" || { cat "$TMP/$1.err"; fail "$1: error lacks '$3'"; }
  echo "ok $1: $(head -c 300 "$TMP/$1.err")"
}
small=(--epochs 1 --limit 512 --batch 64 --quiet)

# Missing data set.
run missing "${small[@]}" --data "$TMP/nowhere"
expect_err missing 2 "cannot open data file $TMP/nowhere/train-images-idx3-ubyte.gz: No such file or directory"

# Corrupt data set: a truncated download, and a file that is not gzip at all.
mkdir "$TMP/data"
cp "$DATA"/*.gz "$TMP/data/"
head -c 100000 "$DATA/train-images-idx3-ubyte.gz" >"$TMP/data/train-images-idx3-ubyte.gz"
run truncated "${small[@]}" --data "$TMP/data"
expect_err truncated 2 "corrupt data file $TMP/data/train-images-idx3-ubyte.gz"
cp "$DATA/train-images-idx3-ubyte.gz" "$TMP/data/"
echo "this is not a data file at all" >"$TMP/data/t10k-labels-idx1-ubyte.gz"
run notgz "${small[@]}" --data "$TMP/data"
expect_err notgz 2 "corrupt data file $TMP/data/t10k-labels-idx1-ubyte.gz: IDX magic is"

# Unwritable checkpoint directory (its parent is a regular file; root ignores chmod).
touch "$TMP/plain"
run unwritable "${small[@]}" --checkpoint "$TMP/plain/ckpt"
expect_err unwritable 2 "cannot create checkpoint directory $TMP/plain/ckpt"

# A write that fails half-way (file size limit): clear error, nothing left behind.
mkdir "$TMP/full"
rc=0
(trap '' XFSZ; ulimit -f 64; exec timeout 60 "$T" --data "$DATA" "${small[@]}" --checkpoint "$TMP/full") \
  >"$TMP/efbig.out" 2>"$TMP/efbig.err" || rc=$?
expect_err efbig 2 "cannot write checkpoint file $TMP/full/.ckpt-0000000008.bin.tmp."
[ -z "$(ls -A "$TMP/full")" ] || fail "a failed checkpoint write left files: $(ls -A "$TMP/full")"

# A checkpoint of a different model shape, batch or seed: refused, directory untouched.
run small_model "${small[@]}" --hidden 32,16 --checkpoint "$TMP/ck"
expect_ok small_model
before=$(ls -l --time-style=+%s.%N "$TMP/ck" | md5sum)
run shape "${small[@]}" --checkpoint "$TMP/ck" --resume
expect_err shape 2 "checkpoint $TMP/ck/ckpt-0000000008.bin holds a model of shape 784-32-16-10 but this run builds 784-256-128-10"
run batch "${small[@]}" --hidden 32,16 --batch 32 --checkpoint "$TMP/ck" --resume
expect_err batch 2 "was trained with global batch 64 but this run uses --batch 32"
run seed "${small[@]}" --hidden 32,16 --seed 9 --checkpoint "$TMP/ck" --resume
expect_err seed 2 "was trained with --seed 1 but this run uses --seed 9"
[ "$(ls -l --time-style=+%s.%N "$TMP/ck" | md5sum)" = "$before" ] || fail "a refused resume changed the checkpoint directory"

# A damaged checkpoint file.
printf '\x13' | dd of="$TMP/ck/ckpt-0000000008.bin" bs=1 seek=300 conv=notrunc status=none
run damaged "${small[@]}" --hidden 32,16 --checkpoint "$TMP/ck" --resume
expect_err damaged 2 "checkpoint $TMP/ck/ckpt-0000000008.bin is corrupt (checksum mismatch)"

# A damaged newest checkpoint with the older one kept: resumed from the older, said on
# stderr. A mistyped --resume directory: refused, not created (it started from scratch).
run two "${small[@]}" --hidden 32,16 --checkpoint "$TMP/ck2" --checkpoint-every 4
expect_ok two
head -c 1000 "$TMP/ck2/ckpt-0000000008.bin" >"$TMP/cut" && mv "$TMP/cut" "$TMP/ck2/ckpt-0000000008.bin"
run fallback "${small[@]}" --hidden 32,16 --checkpoint "$TMP/ck2" --resume
expect_ok fallback
grep -qF -- "resuming from the older $TMP/ck2/ckpt-0000000004.bin instead" "$TMP/fallback.err" ||
  { cat "$TMP/fallback.err"; fail "fallback: no line naming the older checkpoint"; }
run typo "${small[@]}" --hidden 32,16 --checkpoint "$TMP/ck_typo" --resume
expect_err typo 2 "--resume: checkpoint directory $TMP/ck_typo does not exist"
[ ! -e "$TMP/ck_typo" ] || fail "a refused --resume created $TMP/ck_typo"

# Flags that cannot work.
run exact3 "${small[@]}" --ranks 3 --exact-grads
expect_err exact3 2 "--exact-grads needs a power-of-two rank count"
run badalgo "${small[@]}" --algo nope
expect_err badalgo 2 "--algo nope --fusion none is not available with --transport local"
echo "PASS: bad input"
