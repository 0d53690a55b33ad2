# SPDX-License-Identifier: Apache-2.0
"""Gradients whose bits do not depend on the rank count: train on 8 ranks, debug on 1 with
the same numbers. gradsync's compress::exact_accumulator, for a torch training loop.

The global batch is cut into a fixed list of micro-batches (by position, never by rank);
each rank computes its share of them and adds each micro-batch's gradient as integer
codes; the ranks' codes add exactly, so the averaged gradient is the correctly rounded
average of the same micro-batch gradients however they were spread over the ranks:

    acc = gradsync_torch.exact.ExactAccumulator(model.parameters())   # every rank
    for step in ...:
        mine = micro_batches[rank::world]            # micro-batch i on rank i % world
        while True:                                  # the first step adds twice
            acc.begin()
            for x, y in mine:
                model.zero_grad()
                loss_fn(model(x), y).backward()      # ordinary float math
                acc.add()                            # codes every parameter's .grad
            if not acc.agree():                      # exponents agreed: no redo needed
                break
        acc.average()                                # .grad := the average, bit-exact
        opt.step()

The model is a plain module, not DDP (DDP would average every backward() itself): start
every rank from the same weights (the same seed, or dist.broadcast of each parameter from
rank 0). agree() and average() are collectives on `group` (any backend: gradsync, gloo).
A step is added again (agree() returns True) when a block's values outgrew the exponent
it was coded at: always the first step, rarely later; the redo recomputes the
micro-batches.
Float32 parameters only; at most 4096 micro-batches a step over all ranks. The cost and
the guarantees: docs/reproducibility.md.
"""
import torch
import torch.distributed as dist

from ._C import _ExactCore


class ExactAccumulator:
    """Sums micro-batch gradients of `params` as compress::exact_accumulator's codes."""

    def __init__(self, params, group=None):
        self.params = [p for p in params if p.requires_grad]
        for p in self.params:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise TypeError("gradsync_torch.exact.ExactAccumulator takes float32 CPU "
                                f"parameters; one is {p.dtype} on {p.device}")
        self.group = group
        self._core = _ExactCore([p.numel() for p in self.params])
        # A contribution and the decoded average, laid out as the core expects (reused).
        self._flat = torch.empty(self._core.size(), dtype=torch.float32)
        self._out = torch.empty(self._core.size(), dtype=torch.float32)
        self._added = 0

    def begin(self):
        """Starts a step, or its redo: no micro-batches added yet."""
        self._core.begin()
        self._added = 0

    def add(self):
        """Adds the micro-batch gradient the parameters' .grad hold now (None: zeros)."""
        at = 0
        for p in self.params:
            part = self._flat[at:at + p.numel()]
            if p.grad is None:
                part.zero_()
            else:
                part.copy_(p.grad.detach().reshape(-1))
            at += p.numel()
        self._core.add(self._flat)
        self._added += 1

    def agree(self):
        """Agrees the step's exponents over the group (collective): True when the step
        must be added again (begin(), every add()), False when average() may follow."""
        fields = self._core.fields()
        dist.all_reduce(fields, op=dist.ReduceOp.MAX, group=self.group)
        return self._core.needs_redo(fields)

    def average(self):
        """Sums the codes over the group and writes the average over every rank's
        micro-batches into each parameter's .grad (collective). Returns that count."""
        codes = self._core.codes()
        count = torch.tensor([self._added], dtype=torch.int64)
        dist.all_reduce(codes, op=dist.ReduceOp.SUM, group=self.group)
        dist.all_reduce(count, op=dist.ReduceOp.SUM, group=self.group)
        self._core.decode(codes, self._out, int(count.item()))
        at = 0
        for p in self.params:
            g = self._out[at:at + p.numel()].view_as(p)
            if p.grad is None:
                p.grad = g.clone()
            else:
                p.grad.copy_(g)
            at += p.numel()
        return int(count.item())
