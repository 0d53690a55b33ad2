#!/usr/bin/env bash
# GRADSYNC_METRICS: every rank writes gradsync.rank<R>.prom and mini_trainer.rank<R>.prom,
# which Prometheus' own text parser (prometheus_client) reads; the counters agree with
# what the run did (steps, payload bytes = steps * parameters * 4, no errors) and the
# test accuracy with the final line.
source "$(dirname "$0")/common.sh"
py=
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import prometheus_client.parser' 2>/dev/null; then
    py=$p
    break
  fi
done
if [ -z "$py" ]; then
  echo "SKIP: no python3 with prometheus_client (scripts/setup-deps installs python3-prometheus-client)"
  exit 77
fi
mkdir -p "$TMP/metrics"
GRADSYNC_METRICS="$TMP/metrics" GRADSYNC_METRICS_INTERVAL=0.2 \
  run m --ranks 2 --epochs 1 --limit 6000 --batch 128 --fusion bucket --compress int8 --quiet
expect_ok m
acc=$(field_of "$(final_of "$TMP/m.out")" test_acc)
"$py" - "$TMP/metrics" "$acc" <<'PY' || fail "metrics files"
import os, sys
from prometheus_client.parser import text_string_to_metric_families
d, acc = sys.argv[1], float(sys.argv[2])
names = sorted(os.listdir(d))
want = ["gradsync.rank0.prom", "gradsync.rank1.prom", "mini_trainer.rank0.prom", "mini_trainer.rank1.prom"]
assert names == want, f"files {names}, want {want} (no temporaries left)"
def read(name):
    out = {}
    for fam in text_string_to_metric_families(open(os.path.join(d, name)).read()):
        for s in fam.samples:
            out[(s.name, s.labels.get("kind", ""))] = (s.value, s.labels)
    return out
steps = 6000 // 128
params = 235146  # 784-256-128-10
for r in (0, 1):
    g, t = read(f"gradsync.rank{r}.prom"), read(f"mini_trainer.rank{r}.prom")
    calls, labels = g[("gradsync_calls_total", "")]
    assert labels["rank"] == str(r) and labels["compression"] == "ef_int8", labels
    assert calls == steps, f"rank {r}: {calls} calls, {steps} steps"
    assert g[("gradsync_bytes_in_total", "")][0] == steps * params * 4
    enc = g[("gradsync_bytes_encoded_total", "")][0]
    assert 3.5 < steps * params * 4 / enc < 4.0, f"int8 ratio {steps * params * 4 / enc}"
    for kind in ("timeout", "mismatch", "peer_lost", "diverged", "other"):
        assert g[("gradsync_errors_total", kind)][0] == 0, kind
    assert g[("gradsync_collective_seconds_total", "")][0] > 0
    assert t[("mini_trainer_steps_total", "")][0] == steps
    assert t[("mini_trainer_epoch", "")][0] == 1
    assert abs(t[("mini_trainer_test_accuracy", "")][0] - acc) < 1e-4
    assert t[("mini_trainer_samples_per_second", "")][0] > 0
    assert 0 < t[("mini_trainer_sync_share", "")][0] < 1
print(f"ok: {steps} steps, {steps * params * 4} bytes in per rank, test_acc {acc}")
PY
echo "PASS: metrics files parsed by prometheus_client and consistent with the run"
