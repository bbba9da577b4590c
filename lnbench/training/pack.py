"""K models of one architecture as one: their parameters and buffers stacked along a leading replica axis, one
forward and backward for all of them (torch.func's functional_call under vmap), each replica's own optimizer.

Each replica's model keeps its own Parameter objects, re-pointed at its slice of the stacked tensors (`p.data =
stacked[k]`): the replica's optimizer, gradient clipping and state_dict are a solo run's own code on the same
tensors, so a replica's optimizer step is a solo run's bit for bit given the same gradients. What is not bit for
bit is the forward and backward: vmap turns a Linear's matmul into a batched one and LayerNorm's fused affine
into separate ops, whose reductions round differently in the last bit (measured: a loss 1 ulp apart at step 0).

Why vmap and not a hand-batched model (bmm per layer): measured on this machine's CPU (2 cores, 1 thread, MLP
784-1000-1000-10 with LN), the two ran within 5% of each other at batch 128 (both 0.7-0.9x the speed of K
separate steps); only at batch 4 was the hand-batched MLP faster (1.2-1.9x vmap). vmap takes every model
written in torch ops as it is, with its state_dict unchanged; a hand-batched copy would be a second model to
keep equal to the first. docs/performance.md has the figures.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager, nullcontext
from typing import Callable, Iterator

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from lnbench.training import tasks

# BN's running averages update in place with lerp_, for which functorch has no batching rule yet: it loops over
# the replicas (correct, slower), and says so at every call.
warnings.filterwarnings("ignore", message="There is a performance drop because we have not yet implemented")


class NotPackable(Exception):
    """These runs cannot train as one pack (the model's forward cannot run under vmap, ...): the message says why."""


def torch_ops_path(model: nn.Module):
    """The model's path in plain torch ops for the block: vmap cannot batch lnbench's C++ kernels or its
    hand-written autograd.Functions (lnbench.nn.fast), so a recurrent model runs its reference loop."""
    path = getattr(model, "reference_path", None)
    return path() if path is not None else nullcontext()


class Pack:
    """The stacked parameters and buffers of `models` (one architecture), and a step and an evaluation that run
    all of them at once. `restack(keep)` drops replicas (a diverged one stops updating)."""

    def __init__(self, models: list[nn.Module], spec, device: torch.device):
        self.base, self.spec, self.device = models[0], spec, device
        self.names = [n for n, _ in self.base.named_parameters()]
        self.buffer_names = [n for n, _ in self.base.named_buffers()]
        self.restack(models)

    def restack(self, models: list[nn.Module]) -> None:
        """Stacks the current values of `models`' tensors and points each model's tensors at its slice."""
        self.models = list(models)
        own = [(dict(m.named_parameters()), dict(m.named_buffers())) for m in self.models]
        self.params = {n: torch.stack([p[n].detach() for p, _ in own]).requires_grad_() for n in self.names}
        self.buffers = {n: torch.stack([b[n] for _, b in own]) for n in self.buffer_names}
        for k, (p, b) in enumerate(own):
            for n in self.names:
                p[n].data = self.params[n].detach()[k]
            for n in self.buffer_names:
                b[n].data = self.buffers[n][k]

    def __len__(self) -> int:
        return len(self.models)

    # ---- the functions vmap batches: one replica's view ----
    def _loss(self, params, buffers, x, y) -> tuple[Tensor, Tensor]:
        loss, values, _ = tasks.loss_and_metrics(self.spec, functional_call(self.base, (params, buffers), (x,)), y)
        return loss, values

    def _eval(self, params, buffers, x, y) -> tuple[Tensor, Tensor]:
        _, values, n = tasks.loss_and_metrics(self.spec, functional_call(self.base, (params, buffers), (x,)), y)
        return values * n, n

    def _batched(self, fn: Callable, batches: list[tuple[Tensor, Tensor]], buffers=None):
        x = torch.stack([b[0] for b in batches]).to(self.device, non_blocking=True)
        y = torch.stack([b[1] for b in batches]).to(self.device, non_blocking=True)
        with torch_ops_path(self.base):
            # randomness="error": a model that draws random numbers in its forward (DRAW's sampling) would draw
            # other numbers than its solo run; it is refused (probe) rather than trained differently.
            return vmap(fn, randomness="error")(self.params, self.buffers if buffers is None else buffers, x, y)

    # ---- training ----
    def probe(self, batches: list[tuple[Tensor, Tensor]]) -> None:
        """One forward and backward on a few cases, on copies of the buffers (BN's running averages stay as they
        are): NotPackable where the model cannot run under vmap."""
        copies = {n: b.clone() for n, b in self.buffers.items()}
        try:
            loss, _ = self._batched(self._loss, batches, copies)
            loss.sum().backward()
        except Exception as e:  # noqa: BLE001 - whatever vmap or the model refuses: the reason, in one line
            raise NotPackable(f"{type(self.base).__name__} cannot run under vmap: {type(e).__name__}: {e}") from None
        finally:
            for p in self.params.values():
                p.grad = None

    def forward_backward(self, batches: list[tuple[Tensor, Tensor]]) -> Tensor:
        """Every replica's loss and metrics on its own batch, gradients into each replica's parameters (views of
        the stacked gradient). Returns the metrics (K, M), on the device."""
        for p in self.params.values():
            p.grad = None
        loss, values = self._batched(self._loss, batches)
        # d(sum)/d(loss_k) is exactly 1, as a solo run's loss.backward() seeds it: the replicas stay independent.
        loss.sum().backward()
        for k, model in enumerate(self.models):
            for n, p in model.named_parameters():
                p.grad = self.params[n].grad[k]
        return values

    # ---- evaluation ----
    @torch.no_grad()
    def evaluate(self, splits: list[Iterator[tuple[Tensor, Tensor]]]) -> list[list[float]] | None:
        """Each replica's metric means over its own split (`splits[k]`: its eval batches), weighted as
        lnbench.training.recipe.evaluate weights them; None where the replicas' batches differ in shape
        (the caller then evaluates each replica alone)."""
        was_training = self.base.training
        self.base.eval()
        total: Tensor | None = None
        count: Tensor | None = None
        try:
            for batches in zip(*splits, strict=True):
                if len({(tuple(x.shape), tuple(y.shape)) for x, y in batches}) > 1:
                    return None
                weighted, n = self._batched(self._eval, list(batches))
                total = weighted if total is None else total + weighted
                count = n if count is None else count + n
        except ValueError:  # zip(strict=True): splits of different lengths
            return None
        finally:
            self.base.train(was_training)
        if total is None:
            return None
        return (total / count.clamp_min(1).unsqueeze(-1)).tolist()


@contextmanager
def own_storage(model: nn.Module) -> Iterator[None]:
    """A replica's tensors in storage of their own for the block: torch.save writes a view's whole storage, which
    for a replica is the stacked tensor of all K."""
    views = {t: t.data for t in (*model.parameters(), *model.buffers())}
    for t, v in views.items():
        t.data = v.clone()
    try:
        yield
    finally:
        for t, v in views.items():
            t.data = v
