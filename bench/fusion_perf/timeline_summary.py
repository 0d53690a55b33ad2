#!/usr/bin/env python3
"""Summarizes the last step of a gradsync Chrome-trace timeline (one rank's file):
per track, how many events of each name and their total time. The last step is the
window between the end of the previous `wait` on the caller track and the end of the
last one.

    python3 bench/fusion_perf/timeline_summary.py trace.rank0.json
"""
import collections
import json
import sys

data = json.load(open(sys.argv[1]))
events = [e for e in data["traceEvents"] if e.get("ph") == "X"]
waits = sorted((e for e in events if e["name"] == "wait"), key=lambda e: e["ts"])
if not waits:
    sys.exit("no 'wait' event: not a step timeline")
end = waits[-1]["ts"] + waits[-1]["dur"]
start = waits[-2]["ts"] + waits[-2]["dur"] if len(waits) > 1 else min(e["ts"] for e in events)
tracks = {e["tid"]: e["args"]["name"] for e in data["traceEvents"]
          if e.get("ph") == "M" and e.get("name") == "thread_name"}
totals = collections.defaultdict(lambda: [0, 0.0])
for e in events:
    if e["ts"] >= start and e["ts"] + e["dur"] <= end:
        t = totals[(tracks.get(e["tid"], str(e["tid"])), e["name"])]
        t[0] += 1
        t[1] += e["dur"]
print("last step: %.1f ms" % ((end - start) / 1e3))
for (track, name), (n, us) in sorted(totals.items()):
    print("  %-10s %-15s %5d events %10.2f ms" % (track, name, n, us / 1e3))
