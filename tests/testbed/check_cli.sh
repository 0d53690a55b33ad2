#!/usr/bin/env bash
# tests/testbed/check_cli.sh NAME VERSION FLAG PROGRAM [BAD_FLAG BAD_VALUE]...: the
# command-line conventions of every program: --help prints the usage to stdout and exits
# 0; --version prints "NAME (gradsync VERSION)" and exits 0; an unknown flag and a bad
# value of FLAG exit 2 with a message on stderr naming the flag. Each further pair is a
# value that must be refused the same way (out of range, wrapping, " -1", NaN), not
# crash the program or run it.
set -uo pipefail
name=${1:?name} version=${2:?version} flag=${3:?flag} prog=${4:?program}
shift 4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
run() {  # run ARGS...: sets rc, leaves stdout/stderr in $tmp
  "$prog" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
}
bad() {
  echo "FAIL: $name $*"
  echo "  stdout: $(head -3 "$tmp/out")"
  echo "  stderr: $(head -3 "$tmp/err")"
  fail=1
}
run --help
{ [ "$rc" -eq 0 ] && grep -q '^usage:' "$tmp/out" && [ ! -s "$tmp/err" ]; } ||
  bad "--help: exit $rc, want 0 with the usage on stdout and nothing on stderr"
run --version
{ [ "$rc" -eq 0 ] && [ "$(cat "$tmp/out")" = "$name (gradsync $version)" ]; } ||
  bad "--version: exit $rc, want 0 and '$name (gradsync $version)'"
run --no-such-flag
{ [ "$rc" -eq 2 ] && grep -q -- '--no-such-flag' "$tmp/err"; } ||
  bad "--no-such-flag: exit $rc, want 2 naming the flag on stderr"
run "$flag" not-a-number
{ [ "$rc" -eq 2 ] && grep -q -- "$flag" "$tmp/err"; } ||
  bad "$flag not-a-number: exit $rc, want 2 naming $flag on stderr"
pairs=$(($# / 2))
while [ "$#" -ge 2 ]; do
  run "$1" "$2"
  { [ "$rc" -eq 2 ] && grep -q -- "$1" "$tmp/err"; } ||
    bad "$1 '$2': exit $rc, want 2 naming $1 on stderr"
  shift 2
done
[ "$fail" -eq 0 ] && echo "ok: $name --help, --version, unknown flag, bad $flag value, $pairs bad values"
exit "$fail"
