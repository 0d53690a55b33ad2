# SPDX-License-Identifier: Apache-2.0
"""bench/compare --collectives: broadcast, allgather and reduce_scatter against the MPI
libraries' own (MPI_Bcast, MPI_Allgather, MPI_Reduce_scatter_block), timed interleaved in
one job by bench/collectives_perf, on shm, shm_reg and mpi, 2 and 4 ranks, under each MPI
built. Writes to the output folder:
  collectives.csv             every row (collective, transport, mpi, ranks, bytes, gradsync
                              and MPI time and busbw, gs/mpi, #wrong)
  collectives_log_*.txt       the tables as collectives_perf printed them
  collectives_<n>ranks.png    busbw versus size, one panel per collective
  collectives_summary.md      gs/mpi at 1 MiB and up against issue 21's one-host targets
"""

import csv
import os
import subprocess
import time

FIELDS = ["collective", "transport", "mpi", "ranks", "bytes", "gs_us", "gs_busbw", "mpi_us",
          "mpi_busbw", "gs_over_mpi", "wrong"]
COLLECTIVES = ("broadcast", "allgather", "reduce_scatter")
# Issue 21: on shm >= 1.2x the MPI peer, on mpi >= 1.0x, at >= 1 MiB.
TARGET = {"shm": 1.2, "shm_reg": 1.2, "mpi": 1.0}
# shm_reg: shm with both sides' buffers in the transport's heap (shm::allocate), which
# the direct collectives read in place; the MPI peer then works on those pages too.
TRANSPORTS = ("shm", "shm_reg", "mpi")


def log(msg):
    print(f"[compare {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def binaries(build_dir):
    """(flavour, path) of each collectives_perf that was built."""
    out = []
    for flavour in ("openmpi", "mpich"):
        p = os.path.join(build_dir, "bench", "collectives_perf", f"collectives_perf_{flavour}")
        if os.path.exists(p):
            out.append((flavour, p))
    return out


def build(build_dir):
    targets = [f"collectives_perf_{f}" for f in ("openmpi", "mpich")]
    log("building " + " ".join(targets))
    for t in targets:  # a flavour may be missing (no MPICH): build what exists
        subprocess.run(["meson", "compile", "-C", build_dir, t])


def launcher(flavour, n):
    if flavour == "openmpi":
        return ["mpirun.openmpi", "-n", str(n), "--allow-run-as-root", "--oversubscribe",
                "--mca", "btl", "self,vader,tcp"]
    return ["mpirun.mpich", "-n", str(n), "-bind-to", "core"]


def parse(text, flavour, n):
    """The rows of one collectives_perf output."""
    rows, head = [], None
    for line in text.splitlines():
        s = line.split()
        if line.startswith("# ") and len(s) > 2 and s[1] in COLLECTIVES:
            head = (s[1], s[2].split("=", 1)[1])
        elif head and s and s[0].isdigit() and len(s) >= 10:
            rows.append({"collective": head[0], "transport": head[1], "mpi": flavour,
                         "ranks": n, "bytes": int(s[0]), "gs_us": float(s[2]),
                         "gs_busbw": float(s[4]), "mpi_us": float(s[5]),
                         "mpi_busbw": float(s[7]), "gs_over_mpi": float(s[8]),
                         "wrong": int(s[9])})
    return rows


def run(build_dir, out_dir, ranks, quick):
    """Runs every (MPI, ranks, transport) job; returns (rows, failures)."""
    sizes = ["-b", "1M", "-e", "4M", "-n", "3", "-w", "1"] if quick else \
        ["-b", "1M", "-e", "64M", "-n", "10", "-w", "3"]
    rows, failures = [], []
    for flavour, exe in binaries(build_dir):
        for n in ranks:
            for transport in TRANSPORTS:
                cmd = launcher(flavour, n) + [exe, "--transport", transport] + sizes
                name = f"{flavour} {n} ranks {transport}"
                log(f"{name}: {' '.join(cmd)}")
                r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, timeout=1800)
                with open(os.path.join(out_dir, f"collectives_log_{flavour}_{n}_{transport}.txt"),
                          "w") as f:
                    f.write("$ " + " ".join(cmd) + "\n" + r.stdout)
                got = parse(r.stdout, flavour, n)
                if r.returncode != 0 or not got:
                    failures.append(f"{name}: exit {r.returncode}, {len(got)} rows")
                rows += got
    return rows, failures


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)


def plot(rows, n, out_dir, info):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mine = [r for r in rows if r["ranks"] == n]
    if not mine:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    for ax, coll in zip(axes, COLLECTIVES):
        for key in sorted({(r["transport"], r["mpi"]) for r in mine if r["collective"] == coll}):
            pts = sorted((r["bytes"], r["gs_busbw"], r["mpi_busbw"]) for r in mine
                         if (r["collective"], r["transport"], r["mpi"]) == (coll,) + key)
            xs = [p[0] for p in pts]
            ax.plot(xs, [p[1] for p in pts], marker="o", label=f"gradsync {key[0]} ({key[1]})")
            ax.plot(xs, [p[2] for p in pts], linestyle="--", marker="x",
                    label=f"MPI {key[1]} (in the {key[0]} job)")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{coll}, {n} ranks")
        ax.set_xlabel("bytes (nccl-tests' S)")
        ax.set_ylabel("bus bandwidth (GB/s, 1e9)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{info['host']}: {info['cpu']}, {info['cores']} cores, {info['when']}")
    fig.tight_layout()
    path = os.path.join(out_dir, f"collectives_{n}ranks.png")
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def summary(rows, out_dir, info):
    """collectives_summary.md: gs/mpi per cell against the one-host targets."""
    lines = [f"# Collectives against the MPI libraries ({info['when']})", "",
             f"{info['host']}: {info['cpu']}, {info['cores']} cores. gs/mpi > 1: gradsync "
             "faster. Targets (issue 21): shm >= 1.2x, mpi >= 1.0x the MPI peer at >= 1 MiB.",
             "shm_reg: gradsync's and MPI's buffers both in the shm heap (shm::allocate); the "
             "MPI library is slower on those pages, so judge the MPI target on the shm rows.",
             "", "| collective | transport | MPI | ranks | gs/mpi by size | cells met |",
             "| --- | --- | --- | --- | --- | --- |"]
    keys = sorted({(r["collective"], r["transport"], r["mpi"], r["ranks"]) for r in rows})
    for k in keys:
        cells = sorted((r["bytes"], r["gs_over_mpi"]) for r in rows
                       if (r["collective"], r["transport"], r["mpi"], r["ranks"]) == k)
        met = sum(1 for _, x in cells if x >= TARGET[k[1]])
        txt = " / ".join(f"{b >> 20}M {x:.2f}" for b, x in cells)
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {txt} | {met} of {len(cells)} |")
    path = os.path.join(out_dir, "collectives_summary.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def main(args, info):
    """The --collectives mode of bench/compare; returns the exit status."""
    t0 = time.time()
    if not args.no_build:
        build(args.build)
    if not binaries(args.build):
        log(f"no collectives_perf in {args.build}: configure with -Dbench=enabled and MPI")
        return 1
    rows, failures = run(args.build, args.out, args.ranks, args.quick)
    write_csv(rows, os.path.join(args.out, "collectives.csv"))
    for n in sorted({r["ranks"] for r in rows}):
        p = plot(rows, n, args.out, info)
        if p:
            log(f"wrote {p}")
    log(f"wrote {summary(rows, args.out, info)}")
    wrong = [r for r in rows if r["wrong"] > 0]
    for r in wrong:
        print(f"  WRONG: {r['collective']} {r['transport']} {r['mpi']} {r['ranks']} ranks "
              f"{r['bytes']} B: {r['wrong']} elements")
    for f in failures:
        print(f"  FAILED: {f}")
    log(f"done in {time.time() - t0:.0f} s")
    return 1 if failures or wrong else 0
