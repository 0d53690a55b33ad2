# SPDX-License-Identifier: Apache-2.0
"""Horovod (PyTorch) on the models and data of bench/torch_backend/ddp_bench.py (imported
from its bench_models.py: examples/torch_trainer's CNN on Fashion-MNIST and its GPT-style
byte LM), trained with hvd.DistributedOptimizer over the trainers' optimizer (Task.optimizer:
SGD 0.02 with momentum 0.9 for the CNN, AdamW 1e-3 for the transformer; per-rank batch 64 / 16
as ddp_bench), reporting samples/s (global samples per second of the slowest rank)
the way ddp_bench does, so the two print comparable figures.

Launch (the venv is bench/framework_compare/setup-peers'):
  one host, MPI controller:   horovodrun -np 2 -H localhost:2 V/bin/python horovod_train.py
                              (or mpirun -n 2 V/bin/python horovod_train.py)
  one host, Gloo controller:  horovodrun --gloo -np 2 -H localhost:2 V/bin/python horovod_train.py
  simulated hosts, MPI:       scripts/vcluster run --mpi openmpi --hosts 2 --ppn 1 --rate 1gbit \\
                                -- env V/bin/python horovod_train.py
  simulated hosts, Gloo:      the same with --env GLOO_SOCKET_IFNAME (eth0) and
                                horovod_train.py --controller gloo --rendezvous-addr 198.18.0.11:
                              horovodrun --gloo cannot reach the hosts (it starts remote ranks
                              over ssh), so mpirun only starts the processes and this script
                              does horovodrun's part: rank 0 serves Horovod's rendezvous and
                              every rank gets HOROVOD_* from Open MPI's variables.

Tensor fusion is at Horovod's default (64 MiB) unless --fusion-mb (or HOROVOD_FUSION_THRESHOLD
in bytes) says otherwise; --cycle-ms sets HOROVOD_CYCLE_TIME.
"""
import argparse
import os
import socket
import statistics
import sys
import time

# The shared models and data live beside ddp_bench.py.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch_backend"))

import torch  # noqa: E402

from bench_models import Task, add_task_args  # noqa: E402


def ompi(name):
    v = os.environ.get("OMPI_COMM_WORLD_" + name)
    if v is None:
        raise SystemExit(f"--controller gloo under mpirun needs OMPI_COMM_WORLD_{name} "
                         "(launch with Open MPI's mpirun, or use horovodrun --gloo)")
    return int(v)


def wait_for_port(host, port, deadline_s):
    """Horovod's workers fail at once when the rendezvous is not listening yet: wait for it."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > end:
                raise SystemExit(f"no Horovod rendezvous at {host}:{port} after {deadline_s:.0f} s")
            time.sleep(0.2)


def resolvable_hostname(rendezvous_addr, port):
    """Horovod 0.28.1's Gloo controller builds the global process set's Gloo device without
    HOROVOD_GLOO_IFACE (GlooContext::InitializeForProcessSet leaves the interface empty), so
    Gloo binds to the address of this host's name, and dies of SIGSEGV in
    lookupAddrForHostname when the name does not resolve. scripts/vcluster's hosts are named
    gsA, gsB, ... in private UTS namespaces, names no resolver knows: there, and only there
    (GS_NETNS is set), the namespace's hostname becomes this host's address on the route to
    the rendezvous, which resolves as itself. Elsewhere an unresolvable name is an error."""
    name = socket.gethostname()
    try:
        socket.getaddrinfo(name, None)
        return
    except OSError:
        pass
    if not os.environ.get("GS_NETNS"):
        raise SystemExit(f"this host's name {name!r} does not resolve, and Horovod's Gloo "
                         "controller needs it to (add it to /etc/hosts)")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((rendezvous_addr, port))  # no packet: only picks the route's source address
        mine = s.getsockname()[0]
    socket.sethostname(mine)


def gloo_under_mpi(a):
    """What horovodrun --gloo does before it starts the ranks, for ranks that mpirun started
    on hosts horovodrun cannot ssh into: one rendezvous server (rank 0) that knows every
    rank's host, and the HOROVOD_* variables that point the Gloo controller at it. Returns
    the server (kept alive by the caller) or None."""
    rank, size = ompi("RANK"), ompi("SIZE")
    local_rank, local_size = ompi("LOCAL_RANK"), ompi("LOCAL_SIZE")
    # Open MPI places ranks in blocks here (scripts/vcluster: ppr:K:node), so the host index
    # is rank // local_size; a layout with unequal hosts is refused rather than guessed.
    cross_size = size // local_size
    if cross_size * local_size != size:
        raise SystemExit("--controller gloo under mpirun needs the same rank count on every host")
    cross_rank = rank // local_size
    addr = a.rendezvous_addr or os.environ.get("MASTER_ADDR") or "127.0.0.1"
    # Horovod's rendezvous keys each host's scope by HOROVOD_HOSTNAME, which must match the
    # plan below: block placement gives both from cross_rank, without asking the hosts.
    host = f"host{cross_rank}"
    os.environ.update(
        HOROVOD_RANK=str(rank), HOROVOD_SIZE=str(size),
        HOROVOD_LOCAL_RANK=str(local_rank), HOROVOD_LOCAL_SIZE=str(local_size),
        HOROVOD_CROSS_RANK=str(cross_rank), HOROVOD_CROSS_SIZE=str(cross_size),
        HOROVOD_HOSTNAME=host, HOROVOD_CONTROLLER="gloo", HOROVOD_CPU_OPERATIONS="gloo",
        HOROVOD_GLOO_RENDEZVOUS_ADDR=addr, HOROVOD_GLOO_RENDEZVOUS_PORT=str(a.rendezvous_port))
    # Gloo's TCP device binds to this interface (horovodrun names the one it found; here
    # the hosts' own: eth0 under scripts/vcluster, lo on one host).
    os.environ["HOROVOD_GLOO_IFACE"] = os.environ.get("GLOO_SOCKET_IFNAME", "lo")
    resolvable_hostname(addr, a.rendezvous_port)
    server = None
    if rank == 0:
        import threading

        from horovod.runner.common.util import hosts
        from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

        plan = hosts.get_host_assignments(
            hosts.parse_hosts(",".join(f"host{i}:{local_size}" for i in range(cross_size))), size)
        # Horovod's RendezvousServer.start() picks a free port of its own, which the other
        # ranks could not know: its HTTP server is made here on the agreed port instead.
        server = RendezvousHTTPServer(("", a.rendezvous_port), RendezvousHandler, 0)
        server.init(plan)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    else:
        wait_for_port(addr, a.rendezvous_port, 60)
    return server


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["cnn", "transformer", "both"], default="both")
    ap.add_argument("--steps", type=int, default=40, help="timed steps per repeat")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--fusion-mb", type=float, default=None,
                    help="HOROVOD_FUSION_THRESHOLD in MiB (default: Horovod's, 64)")
    ap.add_argument("--cycle-ms", type=float, default=None, help="HOROVOD_CYCLE_TIME")
    ap.add_argument("--controller", choices=["launcher", "gloo"], default="launcher",
                    help="launcher: whatever horovodrun / mpirun set up; gloo: Horovod's Gloo "
                         "controller for ranks that Open MPI's mpirun started")
    ap.add_argument("--rendezvous-addr", default=None,
                    help="rank 0's address for --controller gloo (default $MASTER_ADDR)")
    ap.add_argument("--rendezvous-port", type=int, default=29600)
    add_task_args(ap)
    a = ap.parse_args()

    # Horovod reads these in hvd.init(): set them first.
    if a.fusion_mb is not None:
        os.environ["HOROVOD_FUSION_THRESHOLD"] = str(int(a.fusion_mb * (1 << 20)))
    if a.cycle_ms is not None:
        os.environ["HOROVOD_CYCLE_TIME"] = str(a.cycle_ms)
    server = gloo_under_mpi(a) if a.controller == "gloo" else None

    import horovod
    import horovod.torch as hvd

    hvd.init()
    torch.set_num_threads(a.threads)
    rank, n = hvd.rank(), hvd.size()
    controller = "gloo" if hvd.gloo_enabled() else "mpi" if hvd.mpi_enabled() else "?"
    fusion = os.environ.get("HOROVOD_FUSION_THRESHOLD", "default (64 MiB)")
    if rank == 0:
        print(f"# Horovod {horovod.__version__}, {n} ranks, {a.threads} thread(s) each; controller "
              f"{controller}; HOROVOD_FUSION_THRESHOLD {fusion}; "
              f"HOROVOD_CYCLE_TIME {os.environ.get('HOROVOD_CYCLE_TIME', 'default')}", flush=True)

    def barrier():
        hvd.allreduce(torch.zeros(1), name="barrier")

    for name in (["cnn", "transformer"] if a.model == "both" else [a.model]):
        task = Task(name, a, rank, n)
        params = sum(p.numel() for p in task.model(0).parameters())
        rates, loss = [], torch.zeros(())
        for rep in range(a.repeats):
            model = task.model(a.seed)
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            opt = task.optimizer(model.parameters())
            # Average, as DDP does; named so that Horovod's tensor names are stable.
            opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                           op=hvd.Average)
            took = 0.0
            for phase, (first, steps) in enumerate([(0, a.warmup), (a.warmup, a.steps)]):
                barrier()
                start = time.perf_counter()
                for step in range(first, first + steps):
                    x, y = task.step_batch(step)
                    # Horovod 0.28's optimizer wrapper takes no set_to_none (ddp_bench's);
                    # zeroing 215k-2.5M floats is noise beside the step.
                    opt.zero_grad()
                    loss = task.loss(model, x, y)
                    loss.backward()
                    opt.step()
                took = time.perf_counter() - start
            slowest = hvd.allreduce(torch.tensor([took], dtype=torch.float64), op=hvd.Max,
                                    name=f"took.{name}.{rep}")
            rates.append(a.steps * task.batch * n / slowest.item())
            if rank == 0:  # every replica holds the same weights; untimed
                metric = task.evaluate(model)
        if rank == 0:
            print(f"{name:12s} {params / 1e6:.2f}M params, batch {task.batch}/rank: "
                  f"horovod {statistics.median(rates):9.1f} samples/s (loss {loss.item():.4f}, "
                  f"{metric}) [{controller}]", flush=True)
    hvd.shutdown()
    if server is not None:
        server.shutdown()


if __name__ == "__main__":
    sys.exit(main())
