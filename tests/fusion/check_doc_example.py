#!/usr/bin/env python3
"""check_doc_example.py [--marker NAME --expect TEXT]... DOC SRC PROGRAM...: checks that
the C++ block after '<!-- NAME -->' in DOC (default fusion-example) is SRC verbatim, and
that PROGRAM's output holds every TEXT (default: the fusion example's averaged gradient
and summary): the documentation cannot rot."""
import subprocess, sys

args, marker, expect = sys.argv[1:], "fusion-example", []
while args and args[0] in ("--marker", "--expect"):
    if args[0] == "--marker":
        marker = args[1]
    else:
        expect.append(args[1])
    args = args[2:]
expect = expect or ["grad[0][0] = 1.5", "tensors in"]
doc, src = args[0], args[1]
lines, take, block = open(doc).read().splitlines(), 0, []
for line in lines:
    if line.strip() == "<!-- %s -->" % marker:
        take = 1
    elif take == 1 and line.startswith("```cpp"):
        take = 2
    elif take == 2 and line.startswith("```"):
        break
    elif take == 2:
        block.append(line)
if block != open(src).read().splitlines():
    sys.exit("FAIL: the %s block in %s differs from %s" % (marker, doc, src))
out = subprocess.run(args[2:], capture_output=True, text=True, timeout=120)
print(out.stdout, out.stderr)
missing = [e for e in expect if e not in out.stdout]
if out.returncode != 0 or missing:
    sys.exit("FAIL: the example exited %d; its output lacks %s" % (out.returncode, missing))
print("ok")
