"""Salimans & Kingma's data-dependent initialisation of weight-normed layers (torch's parametrization)."""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import Tensor, nn

from lnbench.errors import ConfigError


@torch.no_grad()
def weight_norm_data_init(model: nn.Module, x: Tensor) -> int:
    """Salimans & Kingma's data-dependent init: one forward pass on a batch sets every weight-normed
    Linear's g and b so its pre-activations have zero mean and unit variance over that batch.

    Each layer is initialised on its first call with a non-zero input, in forward order, so later layers
    see the initialised outputs of earlier ones: a recurrent layer's input matrix over every time step
    of the batch, its recurrent matrix at the first step whose h is not all zeros (h_0 is). The pass runs
    a recurrent model's reference loop (`reference_path`): torch's fused kernel reads the weights without
    calling the Linear layers, so no hook would fire there. Returns the number of layers initialised;
    raises ConfigError if a weight-normed layer was never reached.
    """
    done: set[nn.Module] = set()

    def hook(module: nn.Module, inputs: tuple[Tensor], output: Tensor):
        if module in done:
            return None
        (inp,) = inputs
        if not inp.any():
            return None  # h_0: wait for the first step with a state
        done.add(module)
        v = module.parametrizations.weight.original1
        t = nn.functional.linear(inp, v / v.norm(dim=1, keepdim=True))
        flat = t.reshape(-1, t.shape[-1])
        mu, sigma = flat.mean(0), flat.std(0, unbiased=False).clamp_min(1e-6)
        module.parametrizations.weight.original0.copy_((1.0 / sigma).unsqueeze(1))
        module.bias.copy_(-mu / sigma)
        return (t - mu) / sigma

    targets = [
        m for m in model.modules() if isinstance(m, nn.Linear) and hasattr(m, "parametrizations") and m.bias is not None
    ]
    handles = [m.register_forward_hook(hook) for m in targets]
    was_training = model.training
    try:
        model.train()
        with getattr(model, "reference_path", nullcontext)():
            model(x)
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    if len(done) < len(targets):
        raise ConfigError(
            f"model.norm.data_init=true could initialise only {len(done)} of the {len(targets)} weight-normed "
            f"layers of {type(model).__name__}: the others saw only zeros in the first batch (a sequence of "
            f"one step leaves the recurrent matrix without a state). Use model.norm.data_init=false, or "
            f"sequences of at least 2 steps."
        )
    return len(done)
