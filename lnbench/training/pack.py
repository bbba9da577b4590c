"""K runs of one architecture as one pack: which runs may (`pack_key`: they differ only in seed and optimizer scalars),
their parameters and buffers stacked along a leading replica axis, and one forward and backward for all of them
(torch.func's functional_call under vmap).

Each replica's model keeps its own Parameter objects, re-pointed at its slice of the stacked tensors (`p.data =
stacked[k]`): the replica's optimizer, gradient clipping and state_dict are a solo run's own code on the same
tensors, so a replica's optimizer step is a solo run's bit for bit given the same gradients; where the replicas'
optimizers are one elementwise kind with equal hyperparameters (a pack of seeds), one optimizer steps them all, with
the same bits (`shared_optimizer`). What is not bit for bit is the forward and backward: vmap turns a Linear's
matmul into a batched one and LayerNorm's fused affine into separate ops, whose reductions round differently in the
last bit (measured: a loss 1 ulp apart at step 0), and they differ again in a pack of another size.

Why vmap and not a hand-batched model (bmm per layer): measured on this machine's CPU (2 cores, 1 thread, MLP
784-1000-1000-10 with LN), the two ran within 5% of each other at batch 128 (both 0.7-0.9x the speed of K
separate steps); only at batch 4 was the hand-batched MLP faster (1.2-1.9x vmap). vmap takes every model
written in torch ops as it is, with its state_dict unchanged; a hand-batched copy would be a second model to
keep equal to the first. docs/performance.md has the figures.
"""

from __future__ import annotations

import json
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from lnbench.errors import ConfigError
from lnbench.training import checkpoint, tasks

# BN's running averages update in place with lerp_, for which functorch has no batching rule yet: it loops over
# the replicas (correct, slower), and says so at every call.
warnings.filterwarnings("ignore", message="There is a performance drop because we have not yet implemented")
# A replica's scheduler steps after the pack's one optimizer did, not after its own, which torch takes for a call out
# of order (its first step only; the learning rates are the same either way).
warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)` before `optimizer.step\(\)`")


# ---- which runs can train as one pack ----
# What may differ between the runs of one pack: the seed (and the dataset's, interpolated from it), the optimizer's
# scalars, gradient clipping, and what a resume may change (where the run logs, how often it checkpoints).
MAY_DIFFER = (
    "seed",
    "dataset.seed",
    "optim.",
    "clip_grad_norm",
    *(k for k in checkpoint.MAY_CHANGE if k != "device"),
)
SAME_OPTIMIZER = "optim._target_"  # within `optim.`, the optimizer itself must be the same


def pack_key(config: dict[str, Any]) -> str:
    """What must be equal for runs to train in one pack: the resolved config without the keys of MAY_DIFFER."""
    kept = {k: v for k, v in flatten(config).items() if k == SAME_OPTIMIZER or not may_differ(k)}
    return json.dumps(kept, sort_keys=True, default=str)


def may_differ(key: str) -> bool:
    return any(key == k or key.startswith(k if k.endswith(".") else k + ".") for k in MAY_DIFFER)


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flatten(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def check_packable(configs: list[dict[str, Any]], dirs: list[Path]) -> None:
    """ConfigError unless the runs differ only in MAY_DIFFER's keys."""
    first = flatten(configs[0])
    for config, run_dir in zip(configs[1:], dirs[1:]):
        other = flatten(config)
        differ = [k for k in sorted(first.keys() | other.keys()) if first.get(k) != other.get(k)]
        if bad := [k for k in differ if k == SAME_OPTIMIZER or not may_differ(k)]:
            raise ConfigError(
                f"{run_dir} cannot train in one pack with {dirs[0]}: they differ in {', '.join(bad[:6])}. The runs "
                f"of a pack may differ only in seed, optim.* scalars and clip_grad_norm; train the others apart."
            )


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
        self.optimizer: torch.optim.Optimizer | None = None  # one for all replicas, where one can be (replicas.stack)
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


# Optimizers whose update of a parameter reads only that parameter's gradient and state (elementwise): one of them over
# every replica's tensors computes each replica's update as the replica's own optimizer would, bit for bit, in one
# call (fused Adam: one kernel for the pack, where K optimizers would launch K and pay K times Python's overhead).
PER_PARAMETER = (
    "torch.optim.adam.Adam",
    "torch.optim.adamw.AdamW",
    "torch.optim.sgd.SGD",
    "torch.optim.rmsprop.RMSprop",
)


def hyperparameters(optimizer: torch.optim.Optimizer) -> dict:
    return {k: v for k, v in optimizer.param_groups[0].items() if k not in ("params", "initial_lr")}


def shared_optimizer(optimizers: list[torch.optim.Optimizer]) -> torch.optim.Optimizer | None:
    """One optimizer over the parameters of all `optimizers`, holding the very state dicts they hold (so each one's
    state_dict, for its replica's checkpoint, is what it would be had it stepped alone), where they are one
    PER_PARAMETER kind with one parameter group and equal hyperparameters; None otherwise. The caller keeps its
    hyperparameters equal to theirs (`hyperparameters`), which their schedulers move."""
    first = optimizers[0]
    if f"{type(first).__module__}.{type(first).__qualname__}" not in PER_PARAMETER:
        return None
    if any(type(o) is not type(first) or len(o.param_groups) != 1 for o in optimizers):
        return None
    if any(hyperparameters(o) != hyperparameters(first) for o in optimizers[1:]):
        return None
    shared = type(first)([p for o in optimizers for p in o.param_groups[0]["params"]], **first.defaults)
    shared.param_groups[0].update(hyperparameters(first))
    for o in optimizers:
        for p in o.param_groups[0]["params"]:
            shared.state[p] = o.state[p]  # a new replica's is an empty dict, filled in place at the first step
    return shared
