#!/usr/bin/env python3
"""Checks that the C++ block after '<!-- fusion-example -->' in docs/fusion.md is
readme_fusion_example.cpp verbatim, and that the example's output (argv[3:] run) holds
the expected averaged value: the documentation cannot rot."""
import subprocess, sys

doc, src = sys.argv[1], sys.argv[2]
lines, take, block = open(doc).read().splitlines(), 0, []
for line in lines:
    if line.strip() == "<!-- fusion-example -->":
        take = 1
    elif take == 1 and line.startswith("```cpp"):
        take = 2
    elif take == 2 and line.startswith("```"):
        break
    elif take == 2:
        block.append(line)
if block != open(src).read().splitlines():
    sys.exit("FAIL: the fusion example in %s differs from %s" % (doc, src))
out = subprocess.run(sys.argv[3:], capture_output=True, text=True, timeout=120)
print(out.stdout, out.stderr)
if out.returncode != 0 or "grad[0][0] = 1.5" not in out.stdout or "tensors in" not in out.stdout:
    sys.exit("FAIL: the example did not print the averaged gradient and the summary")
print("ok")
