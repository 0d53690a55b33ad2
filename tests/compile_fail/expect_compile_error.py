#!/usr/bin/env python3
"""Compiles a snippet that must NOT compile and checks the compiler names the fix.

usage: expect_compile_error.py SNIPPET EXPECTED_TEXT -- COMPILER [ARGS...]
Passes when the compiler fails and its diagnostics contain EXPECTED_TEXT.
"""
import subprocess
import sys

def main() -> int:
    sep = sys.argv.index("--")
    snippet, expected = sys.argv[1], sys.argv[2]
    cmd = sys.argv[sep + 1:] + ["-fsyntax-only", "-x", "c++", snippet]
    r = subprocess.run(cmd, capture_output=True, text=True)
    out = r.stdout + r.stderr
    if "-Winvalid-pch" in out:  # a precompiled header was given but GCC could not use it
        print(f"FAIL: {snippet}: the precompiled header was not used (rebuild it with the"
              " flags of this command):")
        print(out[-2000:])
        return 1
    if r.returncode == 0:
        print(f"FAIL: {snippet} compiled, but it must be rejected with: {expected}")
        return 1
    if expected not in out:
        print(f"FAIL: {snippet} was rejected, but without the expected text: {expected}")
        print("---- compiler output ----")
        print(out[-4000:])
        return 1
    print(f"ok: {snippet} rejected with: {expected}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
