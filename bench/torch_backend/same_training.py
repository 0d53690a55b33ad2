# SPDX-License-Identifier: Apache-2.0
"""The Python peers train what examples/torch_trainer trains: after the same samples, DDP
(over "gradsync" and over "gloo", ddp_bench.py) prints the same test metric as the trainer.
bench_models.Task must match the trainer in every choice that moves the weights: the data
and its normalisation, the sample order (trainer_data.py), the initial weights and the
optimizer. bench/framework_compare compares the systems' accuracy and perplexity on that
basis, so a change to either side that breaks it fails here.

    same_training.py TORCH_TRAINER
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# (model, ranks, global batch, samples): the CNN on 2 ranks (each rank's slice of a global
# batch), the transformer on 1 (its steps are slow in a -O0 test build).
CASES = [("cnn", 2, 64, 512), ("transformer", 1, 32, 64)]


def run(what, cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=300)
    if p.returncode != 0:
        print(p.stdout)
        sys.exit(f"FAIL: {what} exited with {p.returncode}: {' '.join(cmd)}")
    return p.stdout


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    trainer = sys.argv[1]
    for model, ranks, batch, samples in CASES:
        out = run(f"torch_trainer ({model})",
                  [trainer, "--model", model, "--ranks", str(ranks), "--batch", str(batch),
                   "--limit", str(samples), "--quiet"])
        m = re.search(r"final epoch=1 ((?:test_acc|perplexity)=[\d.]+)", out)
        if not m:
            print(out)
            sys.exit(f"FAIL: torch_trainer ({model}) printed no final metric")
        want = m.group(1)
        out = run(f"ddp_bench.py ({model})",
                  [sys.executable, os.path.join(HERE, "ddp_bench.py"), "--ranks", str(ranks),
                   "--model", model, "--batch", str(batch // ranks), "--warmup", "1",
                   "--steps", str(samples // batch - 1), "--repeats", "1", "--limit",
                   str(samples)])
        got = re.findall(r"(?:test_acc|perplexity)=[\d.]+", out)
        if len(got) != 2:
            print(out)
            sys.exit(f"FAIL: ddp_bench.py ({model}) printed {len(got)} metrics, expected 2")
        if got != [want, want]:
            print(out)
            sys.exit(f"FAIL: {model} after {samples} samples on {ranks} rank(s): torch_trainer "
                     f"{want}, DDP over gradsync and gloo {got[0]} and {got[1]}")
        print(f"ok {model}: {ranks} rank(s), {samples} samples: torch_trainer and both DDP "
              f"runs {want}", flush=True)
    print("PASS", flush=True)


if __name__ == "__main__":
    main()
