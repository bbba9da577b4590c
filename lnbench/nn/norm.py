"""The normalizers compared by lnbench, one small module each, and the one factory that picks them.

Every normalizer here acts on summed inputs `a` of shape (..., B, H): the last dim holds the H hidden
units, the one before it the batch. What each kind implies (its module, bias rules, statistics) is one
`Normalizer` object registered in lnbench.options; the factories below ask it. Layer and RMS norm are
torch's own modules; batch norm is written here because torch's BatchNorm1d offers neither the paper's unbiased-variance option for small batches
nor per-time-step statistics; weight norm is torch's own parametrization of a Linear's weight.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from lnbench.errors import ConfigError
from lnbench.options import NormConfig, NormKind, Normalizer, normalizer, register  # noqa: F401 (re-exported)


def as_norm_config(cfg: NormConfig | dict | None) -> NormConfig:
    """A NormConfig whose kind is a registered normalizer (a built-in one as its NormKind member)."""
    if cfg is None:
        return NormConfig()
    if not isinstance(cfg, NormConfig):
        cfg = NormConfig(**dict(cfg))
    name = normalizer(cfg.kind).name  # KeyError naming the registered kinds
    cfg.kind = NormKind(name) if name in NormKind._value2member_map_ else name
    return cfg


def make_linear(cfg: NormConfig, in_features: int, out_features: int) -> nn.Linear:
    """A Linear whose summed inputs feed `cfg`'s normalizer (weight norm re-parametrizes its weight)."""
    return normalizer(cfg.kind).linear(cfg, in_features, out_features)


def make_norm(cfg: NormConfig, num_features: int, *, bias: bool = True, time_steps: int = 0) -> nn.Module:
    """The normalizer of summed inputs for `cfg.kind` (Identity for none and weight norm).

    bias: whether the normalizer carries its own additive bias (LN's b, BN's beta).
    time_steps: for BN in a recurrent layer, keep separate statistics for this many time steps.
    """
    return normalizer(cfg.kind).module(cfg, num_features, bias=bias, time_steps=time_steps)


class BatchNorm(nn.Module):
    """Batch normalization (paper eq. 2) of inputs (B, H), or (T, B, H) with per-time-step statistics.

    Training normalizes with the mini-batch's mean and variance of each unit (the unbiased variance if
    `unbiased`), and updates running averages (of the unbiased variance, as torch does); evaluation
    uses the running averages. With `time_steps` > 0 every time step t keeps its own statistics
    (Cooijmans et al.; the paper's section 3.1); a step beyond the last stored one uses the last.
    """

    def __init__(
        self,
        num_features: int,
        *,
        gain_init: float = 1.0,
        bias: bool = True,
        eps: float = 1e-5,
        momentum: float = 0.1,
        unbiased: bool = False,
        time_steps: int = 0,
    ):
        super().__init__()
        self.eps, self.momentum, self.unbiased, self.time_steps = eps, momentum, unbiased, time_steps
        self.weight = nn.Parameter(torch.full((num_features,), float(gain_init)))
        self.bias = nn.Parameter(torch.zeros(num_features)) if bias else None
        shape = (time_steps, num_features) if time_steps else (num_features,)
        self.register_buffer("running_mean", torch.zeros(shape))
        self.register_buffer("running_var", torch.ones(shape))

    def forward(self, a: Tensor, t: int | None = None) -> Tensor:
        """a: (B, H) at time step t (None for a feed-forward layer), or (T, B, H) for steps 0..T-1."""
        per_step = a.dim() == 3
        if self.training:
            if a.shape[-2] < 2:
                raise ConfigError(
                    "batch normalization cannot train at batch size 1: the batch variance of one case "
                    "is undefined. Use dataset.batch_size >= 2, or a normalizer that works per case "
                    "(model=ln_* or rms)."
                )
            mean = a.mean(dim=-2)
            var = a.var(dim=-2, unbiased=self.unbiased)
            self._update_running(mean.detach(), a.var(dim=-2, unbiased=True).detach(), per_step, t)
        else:
            mean, var = self._running(a.shape[0] if per_step else None, t)
        y = (a - mean.unsqueeze(-2)) * torch.rsqrt(var + self.eps).unsqueeze(-2) * self.weight
        return y + self.bias if self.bias is not None else y

    def _running(self, steps: int | None, t: int | None) -> tuple[Tensor, Tensor]:
        if not self.time_steps:
            return self.running_mean, self.running_var
        last = self.time_steps - 1
        if steps is None:
            i = min(t or 0, last)
            return self.running_mean[i], self.running_var[i]
        idx = torch.arange(steps, device=self.running_mean.device).clamp_(max=last)
        return self.running_mean[idx], self.running_var[idx]

    @torch.no_grad()
    def _update_running(self, mean: Tensor, var: Tensor, per_step: bool, t: int | None) -> None:
        m = self.momentum
        if not self.time_steps:  # one set of statistics: a sequence updates it at each step in turn
            for mean_t, var_t in zip(mean.reshape(-1, mean.shape[-1]), var.reshape(-1, var.shape[-1])):
                self.running_mean.lerp_(mean_t, m)
                self.running_var.lerp_(var_t, m)
            return
        if per_step:
            n = min(mean.shape[0], self.time_steps)  # steps past the last slot do not update it
            self.running_mean[:n].lerp_(mean[:n], m)
            self.running_var[:n].lerp_(var[:n], m)
        elif (t or 0) < self.time_steps:
            self.running_mean[t or 0].lerp_(mean, m)
            self.running_var[t or 0].lerp_(var, m)

    def extra_repr(self) -> str:
        return (
            f"{self.weight.shape[0]}, eps={self.eps}, momentum={self.momentum}, "
            f"unbiased={self.unbiased}, time_steps={self.time_steps}, bias={self.bias is not None}"
        )


def apply_norm(norm: nn.Module, a: Tensor, t: int | None = None) -> Tensor:
    """Call a normalizer; only batch norm needs to know the time step."""
    return norm(a, t) if isinstance(norm, BatchNorm) else norm(a)


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
    from contextlib import nullcontext

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

    targets = [m for m in model.modules() if isinstance(m, nn.Linear) and hasattr(m, "parametrizations") and m.bias is not None]
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
