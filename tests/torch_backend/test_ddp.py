# SPDX-License-Identifier: Apache-2.0
"""DistributedDataParallel over the gradsync backend, each case against the same model
trained over Gloo in the same processes:
  - exact training (float64, dyadic weights and inputs): the final weights equal Gloo's
    and a one-process run's on the whole batch, bit for bit;
  - find_unused_parameters=True, a BatchNorm model (buffers broadcast from rank 0);
  - torch's own PowerSGD and fp16 comm hooks (PowerSGD waits on collectives inside its
    future callbacks);
  - gradsync's int8 and topk hooks: the loss goes down and the replicas stay identical;
  - gradsync's exact hook: the same bits for one bucket or many, over shm or mpi.

    test_ddp.py --ranks 2            # mp.spawn
    mpirun -n 2 python test_ddp.py   # the ranks of an MPI job (gradsync over shm from MPI)
"""
import copy
import hashlib

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
from torch.nn.parallel import DistributedDataParallel as DDP

import common
import gradsync_torch


def dyadic_(module, salt=0):
    """Weights in [-1/2, 1/2] on a grid of 1/8: sums and products of a few steps stay exact."""
    with torch.no_grad():
        for k, p in enumerate(module.parameters()):
            i = torch.arange(p.numel(), dtype=torch.float64).reshape(p.shape)
            p.copy_(((i * 5 + k + salt) % 9 - 4) / 8)
    return module


def exact_batch(rank, step, rows=8, cols=6):
    i = torch.arange(rows * cols, dtype=torch.float64).reshape(rows, cols)
    return (i + 3 * rank + 5 * step) % 5 - 2


def coeff(rank, step, rows=8, out=3):
    i = torch.arange(rows * out, dtype=torch.float64).reshape(rows, out)
    return torch.where((i + rank + step) % 3 == 0, -1.0, 1.0)


def exact_model():
    return dyadic_(nn.Sequential(nn.Linear(6, 4), nn.Linear(4, 3)).double())


def train_exact(model, rank, steps, forward=None):
    opt = torch.optim.SGD(model.parameters(), lr=1 / 8)
    for step in range(steps):
        opt.zero_grad()
        out = forward(model, step) if forward else model(exact_batch(rank, step))
        (out * coeff(rank, step)).sum().backward()
        opt.step()
    return model


def check_exact(rank, n, gs, gloo):
    steps = 3
    a = train_exact(DDP(exact_model(), process_group=gs), rank, steps).module
    b = train_exact(DDP(exact_model(), process_group=gloo), rank, steps).module
    # One process, every rank's batch: the loss is the mean of the ranks' (DDP averages).
    ref = exact_model()
    opt = torch.optim.SGD(ref.parameters(), lr=1 / 8)
    for step in range(steps):
        opt.zero_grad()
        sum((ref(exact_batch(r, step)) * coeff(r, step)).sum() for r in range(n)).div(n).backward()
        opt.step()
    for (name, p), q, r in zip(a.named_parameters(), b.parameters(), ref.parameters()):
        common.same(p.detach(), q.detach(), f"exact DDP {name} against Gloo")
        common.same(p.detach(), r.detach(), f"exact DDP {name} against one process")


class Branchy(nn.Module):
    """Odd steps use `b`, even steps `a`: DDP must find the unused one each step."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 4)
        self.b = nn.Linear(6, 4)
        self.head = nn.Linear(4, 3)

    def forward(self, x, step):
        return self.head(self.b(x) if step % 2 else self.a(x))


def check_unused(rank, n, gs, gloo):
    def fwd(m, step):
        return m(exact_batch(rank, step), step)

    models = []
    for pg in (gs, gloo):
        m = DDP(dyadic_(Branchy().double()), process_group=pg, find_unused_parameters=True)
        models.append(train_exact(m, rank, 4, fwd).module)
    for (name, p), q in zip(models[0].named_parameters(), models[1].parameters()):
        common.same(p.detach(), q.detach(), f"find_unused_parameters {name} against Gloo")


def check_batchnorm(rank, n, gs, gloo):
    models = []
    for pg in (gs, gloo):
        torch.manual_seed(1)
        m = nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 3)).double()
        if rank:  # different starting buffers: DDP broadcasts rank 0's
            m[1].running_mean.fill_(rank)
        ddp = DDP(m, process_group=pg, broadcast_buffers=True)
        train_exact(ddp, rank, 3)
        models.append(ddp.module)
    for (name, x), y in zip(models[0].state_dict().items(), models[1].state_dict().values()):
        if n == 2:  # a + b == b + a: bit for bit
            common.same(x, y, f"BatchNorm model {name} against Gloo")
        elif not torch.allclose(x.double(), y.double(), rtol=1e-12, atol=1e-14):
            raise AssertionError(f"BatchNorm model {name} differs from Gloo's: {x} {y}")
    # Each rank's last forward updates its own running statistics after the broadcast:
    # the parameters are the replicas' common part.
    common.replicas_identical(models[0], gloo, "BatchNorm model over gradsync", buffers=False)


def float_model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 48), nn.ReLU(),
                         nn.Linear(48, 4))


def regression_batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 32, generator=g)
    w = torch.linspace(-1, 1, 32 * 4).reshape(32, 4)
    return x, x @ w


def train_float(ddp, rank, steps, lr=0.05):
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        x, y = regression_batch(rank, step % 4)
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def mean_loss(losses, group):
    """The loss of the first and the last 4 steps, averaged over the ranks (each rank
    trains on its own data), so every rank reaches the same verdict."""
    t = torch.tensor([sum(losses[:4]) / 4, sum(losses[-4:]) / 4], dtype=torch.float64)
    dist.all_reduce(t, group=group)
    t /= dist.get_world_size(group)
    return t[0].item(), t[1].item()


def check_torch_hooks(rank, n, gs, gloo):
    results = {}
    for label, pg in (("gradsync", gs), ("gloo", gloo)):
        for hook in ("powersgd", "fp16"):
            ddp = DDP(float_model(3), process_group=pg)
            if hook == "powersgd":
                state = powerSGD.PowerSGDState(process_group=pg, matrix_approximation_rank=1,
                                               start_powerSGD_iter=2, min_compression_rate=1,
                                               random_seed=0)
                ddp.register_comm_hook(state, powerSGD.powerSGD_hook)
            else:
                ddp.register_comm_hook(pg, default_hooks.fp16_compress_hook)
            train_float(ddp, rank, 6)
            results[label, hook] = ddp.module
            common.replicas_identical(ddp.module, gloo, f"{hook} hook over {label}")
    # Summed in another order (over 4 ranks), fp16 codes round apart by an ulp of half.
    for hook, tol in (("powersgd", 1e-5), ("fp16", 1e-5 if n == 2 else 1e-3)):
        for (name, p), q in zip(results["gradsync", hook].named_parameters(),
                                results["gloo", hook].parameters()):
            if not torch.allclose(p, q, rtol=tol, atol=tol / 10):
                raise AssertionError(f"{hook} hook: {name} differs from Gloo's by "
                                     f"{(p - q).abs().max().item()}")


def check_codec(rank, n, gs, gloo):
    """The hooks' entry point compresses: int8 lands near the average (within the int8
    grid of each block's range) but not on it; topk keeps 1 % of the values; every rank
    gets the same bits."""
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(4096, generator=g)
    avg = x.clone()
    dist.all_reduce(avg, group=gloo)
    avg /= n
    for codec in ("int8", "topk"):
        y = x.clone()
        gs._compressed_average(y, codec, 1000).wait()
        err = (y - avg).abs().max().item()
        assert not torch.equal(y, avg), f"{codec}: the result is the exact average"
        if codec == "int8":
            assert err < 4.5 * 2 / (127 // n), f"int8: off the average by {err}"
        else:
            assert (y != 0).sum().item() <= n * 41, f"topk kept {(y != 0).sum().item()} values"
        common.replicas_identical(torch.nn.ParameterList([torch.nn.Parameter(y)]), gloo, codec)


def check_gradsync_hooks(rank, n, gs, gloo):
    check_codec(rank, n, gs, gloo)
    for hook in (gradsync_torch.hooks.int8, gradsync_torch.hooks.topk):
        ddp = DDP(float_model(5), process_group=gs, bucket_cap_mb=0.01)  # several buckets
        ddp.register_comm_hook(gs, hook)
        losses = train_float(ddp, rank, 40)
        first, last = mean_loss(losses, gloo)
        if not last < 0.5 * first:
            raise AssertionError(f"{hook.__name__} hook: the loss went {first:.4f} -> {last:.4f}")
        h = common.replicas_identical(ddp.module, gloo, f"{hook.__name__} hook")
        if rank == 0:
            print(f"ok: gradsync {hook.__name__} hook: loss {first:.4f} -> {last:.4f}, "
                  f"replicas identical ({h})", flush=True)
    # Another backend's group is refused with a message that says what to pass.
    ddp = DDP(float_model(5), process_group=gloo)
    ddp.register_comm_hook(gloo, gradsync_torch.hooks.int8)
    try:
        train_float(ddp, rank, 1)
    except Exception as e:  # the reducer reports the hook's TypeError
        assert "backend 'gradsync'" in str(e), e
    else:
        raise AssertionError("the int8 hook took a Gloo group")


class Tiny(nn.Module):
    """float_model with one more parameter whose gradient is about 1e-13 of the others':
    a block of codes that mixed it with another parameter would round it (64-bit codes
    hold a block's values exactly only within 2^27 of its largest)."""

    def __init__(self, seed):
        super().__init__()
        self.body = float_model(seed)
        self.tiny = nn.Parameter(torch.linspace(-1, 1, 37))  # last: first in DDP's buckets

    def forward(self, x):
        return self.body(x) + 1e-13 * (self.tiny * torch.arange(1.0, 38.0)).sum()


def grads_hash(module):
    h = hashlib.sha256()
    for p in module.parameters():
        h.update(p.grad.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def check_exact_hook(rank, n, gs, gloo):
    """gradsync's exact hook: the same averaged gradients, bit for bit, whether DDP makes
    one bucket or one per parameter (its blocks start at each parameter, not at the
    bucket's start), and, under mpirun, over shm and over mpi (other algorithms); close
    to DDP's default average. The default hook's hashes are printed beside it."""
    hashes, plain = {}, {}
    groups = [("shm", gs)]
    if common.under_mpirun():
        groups.append(("mpi", common.gradsync_group("mpi")))
    for label, pg in groups:
        for cap in (25, 0.0005):  # one bucket; one per parameter (the largest is 12 KiB)
            runs = {}
            for hook in (gradsync_torch.hooks.exact, None):
                ddp = DDP(Tiny(7), process_group=pg, bucket_cap_mb=cap)
                if hook:
                    ddp.register_comm_hook(pg, hook)
                opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
                steps = []
                for step in range(3):
                    opt.zero_grad()
                    x, y = regression_batch(rank, step)
                    nn.functional.mse_loss(ddp(x), y).backward()
                    steps.append(grads_hash(ddp.module))
                    opt.step()
                runs[hook] = ddp.module
                (hashes if hook else plain)[label, cap] = ",".join(steps)
            common.replicas_identical(runs[gradsync_torch.hooks.exact], gloo, f"exact hook, {label}")
            for (name, p), q in zip(runs[gradsync_torch.hooks.exact].named_parameters(),
                                    runs[None].parameters()):
                # Float sums of 4 ranks cancel: measured against the tensor's largest.
                off, top = (p.grad - q.grad).abs().max().item(), q.grad.abs().max().item()
                if not off <= 1e-6 * top:
                    raise AssertionError(f"exact hook: {name}'s gradient is {off} from DDP's "
                                         f"average (its largest element: {top})")
    if len(set(hashes.values())) != 1:
        raise AssertionError(f"exact hook: the gradients differ by bucket size or transport: {hashes}")
    if rank == 0:
        print(f"ok: gradsync exact hook: one gradient hash per step over {sorted(hashes)}; "
              f"the default hook: {len(set(plain.values()))} distinct", flush=True)
    # A float64 bucket is refused (averaged plainly its bits would depend on the buckets).
    ddp = DDP(float_model(7).double(), process_group=gs)
    ddp.register_comm_hook(gs, gradsync_torch.hooks.exact)
    try:
        x, y = regression_batch(rank, 0)
        nn.functional.mse_loss(ddp(x.double()), y.double()).backward()
    except Exception as e:  # the reducer reports the future's error
        assert "exact hook averages float32 buckets" in str(e) and "float64" in str(e), e
    else:
        raise AssertionError("the exact hook took a float64 bucket")


def ranks(rank, n):
    common.init_default("gloo", rank, n)
    gloo = dist.group.WORLD
    gs = common.gradsync_group()
    check_exact(rank, n, gs, gloo)
    check_unused(rank, n, gs, gloo)
    check_batchnorm(rank, n, gs, gloo)
    check_torch_hooks(rank, n, gs, gloo)
    check_gradsync_hooks(rank, n, gs, gloo)
    check_exact_hook(rank, n, gs, gloo)
    if rank == 0:
        print(f"ok: DDP over {gs.describe()} equals DDP over Gloo", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    common.run(ranks, __doc__)
